"""Streamed corpus readers: files in their original formats to `Document`s.

`read_corpus` yields one record per input record, in a deterministic order: a
`Document` for what should be indexed and a `Skip` saying why for everything
else, so the indexer can count skips and a resumed build can skip the first N
records. Bad user data never raises: it becomes a `Skip`. Only a path that does
not exist or whose format cannot be detected raises `ValueError`, before any
record is read.

Formats are detected from content (compressed files are opened by their magic
bytes, whatever their name), falling back to the file name only when a
compressed file is too damaged to read its beginning. Plain text and Markdown
are the exception: they have no telling content, so their names say it
(TEXT_SUFFIXES), and a folder of notes reads without a `--format`.

One module a format, one reader each, for indexing, training and eval alike:
jsonl (and `record_from_dict` for the Python API), beir, hotpotqa,
propsegment (with `PropSegment` for training and eval), mediawiki (rendered
by wikitext), wikiextractor, text (unwrapped by markdown), pdf, html, docx and
notebook (Jupyter); jsonl also reads JSON documents of records. base holds the
records and skips, streams opens compressed files, detect tells formats,
parallel renders a large dump in worker processes, corpus reads paths in
order.
"""
from __future__ import annotations

from .base import FORMATS, MAX_ID_BYTES, TEXT_SUFFIXES, Record, Skip
from .corpus import fingerprint, input_files, read_corpus
from .detect import detect_format
from .jsonl import record_from_dict
from .propsegment import PROPSEGMENT_WIKI, PropSegment, PropSegmentSentence
from .streams import DamagedMembers
from .streams import compression as _compression
from .wikitext import render_wikitext

__all__ = [
    "FORMATS", "MAX_ID_BYTES", "TEXT_SUFFIXES", "Record", "Skip",
    "read_corpus", "fingerprint", "input_files", "detect_format", "record_from_dict",
    "PROPSEGMENT_WIKI", "PropSegment", "PropSegmentSentence", "DamagedMembers", "render_wikitext",
    "_compression",  # tests/test_fuzz.py tells compressed files apart with it
]
