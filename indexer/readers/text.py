"""Plain text and Markdown files: one Document a file (TEXT_SUFFIXES).

A note, a README, a chapter is one document. Its id is the file's absolute
path, so a file keeps its id however the command line names it, and
`propdex add --update` replaces it. Its title is the one the file gives
itself (markdown.title), else the file's name without its suffix. Lines are
unwrapped (markdown.unwrap) because sentences end at line breaks.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from . import markdown
from .base import Record, Skip, document
from .streams import bare_name, open_binary


def read(path: Path, max_chars: int) -> Iterator[Record]:
    yield _text_record(path, max_chars)


def _text_record(path: Path, max_chars: int) -> Record:
    """The file's Document, or the Skip for a file too large to be one text
    (checked on bytes, before decoding) or not UTF-8."""
    source = str(path)
    with open_binary(path) as f:
        data = f.read(4 * max_chars + 1)  # UTF-8 spends at most 4 bytes a character
    if len(data) > 4 * max_chars:
        return Skip("too_large", source, f"more than {4 * max_chars} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return Skip("invalid_utf8", source, str(e))
    markup = bare_name(path).suffix.lower() in markdown.MARKUP_SUFFIXES
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    title, lines = markdown.title(lines, markup)
    body = markdown.unwrap(lines, markup)
    if markup:
        body = markdown.link_text(body)
    return document(os.path.abspath(path), body, title or bare_name(path).stem, source, max_chars)
