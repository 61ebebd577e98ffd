"""HotpotQA question files: the context paragraphs as Documents.

A paragraph's title is its id, and HotpotQA gives the same paragraph to many
questions, so each distinct title is one Document; the first occurrence
wins. The text is the paragraph's sentences joined so that sentence i of the
Document is HotpotQA's sentence i, because supporting facts name sentences
by index.
"""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from propdex.encoders.text import sentence_spans_from_list

from .base import FileSkip, Record, Skip, document
from .streams import load_json


def read(path: Path, max_chars: int) -> Iterator[Record]:
    """One Document per distinct context title, in the order first met."""
    data = load_json(path)
    if not isinstance(data, list):
        raise FileSkip(Skip("missing_field", str(path), "not a list of questions"))
    seen: set[str] = set()
    for qi, question in enumerate(data):
        context = question.get("context") if isinstance(question, dict) else None
        if not isinstance(context, list):
            yield Skip("missing_field", f"{path}#question {qi}", "no context")
            continue
        yield from _paragraphs(context, seen, f"{path}#question {qi}", path, max_chars)


def _paragraphs(context: list, seen: set[str], question: str, path: Path, max_chars: int) -> Iterator[Record]:
    """The Documents of one question's context not `seen` before (added to it)."""
    for paragraph in context:
        if not _is_paragraph(paragraph):
            yield Skip("missing_field", question, "bad context paragraph")
            continue
        title, sentences = paragraph
        if title in seen:
            continue
        seen.add(title)
        text, spans = sentence_spans_from_list(sentences)
        yield document(title, text, title, f"{path}#{title}", max_chars, spans)


def _is_paragraph(paragraph: object) -> bool:
    """Whether `paragraph` is [title, [sentence, ...]] with strings."""
    return (
        isinstance(paragraph, list)
        and len(paragraph) == 2
        and isinstance(paragraph[0], str)
        and bool(paragraph[0])
        and isinstance(paragraph[1], list)
        and all(isinstance(s, str) for s in paragraph[1])
    )
