"""PDF files: one Document a file, its pages' text in order.

A paper, a manual, a scanned-in letter is one document, kept as a note is
(text.py): its id is the file's absolute path, which is also its `path`
metadata, beside `pages`. Its title is the PDF's own (/Title), else the
file's name without its suffix. A page's lines are what a PDF holds, set
lines of a layout, so they are unwrapped as plain text (markdown.unwrap)
after a word broken over two lines by a hyphen is joined. Pages end
paragraphs and are separated by a form feed, so a hit and a citation say
the page they are on.

Reading needs pypdf (the `pdf` extra). Without it, or for a PDF it cannot
open (damaged, encrypted with a password), the file is a counted skip that
says why; a PDF of scanned images without a text layer is an `empty` skip.
"""
from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

from . import markdown
from propdex.encoders.text import PAGE_BREAK

from .base import Record, Skip
from .streams import open_binary
from .text import file_document

# A word broken at a line's end: "retrie-" then "val ..." reads "retrieval".
_BROKEN_WORD = re.compile(r"(?<=[^\W\d_])-\n(?=[a-z])")


def read(path: Path, max_chars: int) -> Iterator[Record]:
    yield _pdf_record(path, max_chars)


def _pdf_record(path: Path, max_chars: int) -> Record:
    source = str(path)
    try:
        import pypdf
    except ImportError:
        return Skip("unreadable", source, "a PDF: pip install 'propdex[pdf]' (pypdf) to read it")
    with open_binary(path) as f:
        data = f.read()
    try:
        pdf = pypdf.PdfReader(io.BytesIO(data))
        if pdf.is_encrypted and not pdf.decrypt(""):
            return Skip("unreadable", source, "an encrypted PDF: it needs a password")
        pages = [page.extract_text() or "" for page in pdf.pages]
        named = (pdf.metadata.title if pdf.metadata else None) or ""
    except Exception as e:  # noqa: BLE001 - a third-party parser's errors on bad bytes are many and unlisted
        return Skip("unreadable", source, f"not a readable PDF: {type(e).__name__}: {e}")
    # Pages end paragraphs and are told apart by a form feed, which search reports as a hit's page (hits.page_at).
    body = f"\n{PAGE_BREAK}\n".join(page_text(p) for p in pages).strip(" \n")
    return file_document(path, body, " ".join(str(named).split()), max_chars, {"pages": len(pages)})


def page_text(text: str) -> str:
    """A page's extracted text as paragraphs on one line each: hyphenated
    words joined, then plain text's unwrapping rule."""
    text = _BROKEN_WORD.sub("", text.replace("\x00", "").replace("\r\n", "\n").replace("\r", "\n"))
    return markdown.unwrap(text.split("\n"), markup=False)
