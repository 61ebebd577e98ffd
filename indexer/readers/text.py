"""Plain text and Markdown files: one Document a file (TEXT_SUFFIXES).

A note, a README, a chapter is one document. Its id is the file's absolute
path, so a file keeps its id however the command line names it, and
`propdex add --update` replaces it; the same path is its `path` metadata,
so `where={"path": {"prefix": "/notes/work/"}}` searches one folder. Its
title is the one the file gives itself (front matter's `title:`, else
markdown.title), else the file's name without its suffix; front matter's
other fields are metadata too (and win over `path`). Lines are unwrapped
(markdown.unwrap) because sentences end at line breaks.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import markdown
from .base import Record, Skip, document
from .streams import bare_name, open_binary

log = logging.getLogger(__name__)


def read(path: Path, max_chars: int) -> Iterator[Record]:
    yield _text_record(path, max_chars)


def file_bytes(path: Path, max_chars: int) -> bytes | Skip:
    """A whole file's bytes, or the Skip for one too large to be a text of
    `max_chars`, told before decoding: UTF-8 spends at most 4 bytes a character."""
    with open_binary(path) as f:
        data = f.read(4 * max_chars + 1)
    if len(data) > 4 * max_chars:
        return Skip("too_large", str(path), f"more than {4 * max_chars} bytes")
    return data


def file_id(path: Path) -> str:
    """The id of a document that is a whole file: its absolute path, so a
    file keeps its id however a command line names it."""
    return os.path.abspath(path)


def file_document(path: Path, text: str, title: str, max_chars: int, fields: dict[str, Any]) -> Record:
    """A whole file as one Document (a note, a PDF, a page): its id is its
    absolute path (`file_id`), and so is its `path` metadata (the file's own
    fields win); untitled, it is titled by its name without its suffix."""
    doc_id = file_id(path)
    return document(doc_id, text, title or bare_name(path).stem, str(path), max_chars, metadata={"path": doc_id, **fields})


def _text_record(path: Path, max_chars: int) -> Record:
    """The file's Document, or the Skip for a file too large to be one text
    or not UTF-8."""
    source = str(path)
    data = file_bytes(path, max_chars)
    if isinstance(data, Skip):
        return data
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return Skip("invalid_utf8", source, str(e))
    markup = bare_name(path).suffix.lower() in markdown.MARKUP_SUFFIXES
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    fields, lines, problem = markdown.front_matter(lines, markup)
    if problem:
        log.warning("%s: %s; the note is indexed without it", source, problem)
    named = fields.pop("title", None)
    if isinstance(named, str) and named.strip():
        title = named.strip()
        heading, rest = markdown.title(lines, markup)
        if heading.casefold() == title.casefold():
            lines = rest  # the title again, as the first heading: said once (any other heading stays text)
    else:
        title, lines = markdown.title(lines, markup)
        if named is not None:
            fields["title"] = named  # not a title (a number, a list): kept as the field it is
    body = markdown.unwrap(lines, markup)
    if markup:
        body = markdown.link_text(body)
    return file_document(path, body, title, max_chars, fields)
