"""WikiExtractor output: `<doc id url title>` ... `</doc>` blocks of text.

The format is line-based, so a bad line spoils only the document it is in
(one Skip naming the line) and an unclosed `<doc>` is one Skip, not the end
of the file. Attributes other than id and title (url, revid) are kept as
metadata.
"""
from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path

from .base import Record, Skip, document
from .streams import open_binary

_DOC_START = re.compile(r"<doc\s+([^>]*)>\s*$")
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


def read(path: Path, max_chars: int) -> Iterator[Record]:
    """`<doc id url title>` ... `</doc>` blocks of WikiExtractor output."""
    attrs: dict[str, str] | None = None  # of the open <doc>, None outside one
    body: list[str] = []
    bad_line: str | None = None  # first decoding error inside the open <doc>
    with open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad_line = bad_line or f"line {lineno}: {e}"
                continue
            start = _DOC_START.match(line)
            if start:
                if attrs is not None:
                    yield Skip("unreadable", _doc_source(path, attrs), "<doc> without </doc>")
                attrs = {k: html.unescape(v) for k, v in _ATTRIBUTE.findall(start.group(1))}
                body, bad_line = [], None
            elif line.strip() == "</doc>" and attrs is not None:
                yield _record(attrs, body, bad_line, path, max_chars)
                attrs = None
            elif attrs is not None:
                body.append(line)
    if attrs is not None:
        yield Skip("unreadable", _doc_source(path, attrs), "<doc> without </doc>")


def _doc_source(path: Path, attrs: dict[str, str]) -> str:
    return f"{path}#{attrs.get('id', '?')}"


def _record(attrs: dict[str, str], body: list[str], bad_line: str | None, path: Path, max_chars: int) -> Record:
    source = _doc_source(path, attrs)
    if bad_line is not None:
        return Skip("invalid_utf8", source, bad_line)
    if not attrs.get("id"):
        return Skip("missing_field", source, "<doc> without id")
    title = attrs.get("title", "")
    # WikiExtractor repeats the title (HTML-escaped) as the first body line.
    if body and html.unescape(body[0]).strip() == title.strip():
        body = body[1:]
    extra = {k: v for k, v in attrs.items() if k not in ("id", "title")}  # url, revid
    return document(attrs["id"], "".join(body).strip(), title, source, max_chars, metadata=extra)
