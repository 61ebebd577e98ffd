"""BEIR datasets: a folder whose corpus.jsonl is the corpus.

The corpus is JSON Lines with `_id`, `title`, `text` and a `metadata` object
(jsonl opens it up into fields), so it is read by the JSONL reader: one
reader for the format, whichever folder it sits in. Only corpus.jsonl is
read; queries.jsonl and qrels/ beside it are questions and judgements, not
documents.
"""
from __future__ import annotations

from pathlib import Path

from . import jsonl

CORPUS_FILE = "corpus.jsonl"
read = jsonl.read


def corpus_file(folder: Path) -> Path | None:
    """The folder's corpus.jsonl if it has one: what makes a folder BEIR."""
    path = folder / CORPUS_FILE
    return path if path.is_file() else None
