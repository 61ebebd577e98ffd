"""Word documents (.docx): one Document a file, its paragraphs in order.

A report or a letter is one document, kept as a note is (text.py): its id
and `path` metadata are the file's absolute path. A .docx is a zip of XML
(Office Open XML), read here with the standard library: each paragraph of
the body (`w:p`, table cells' included) is a line of its own, its runs'
text joined, a tab a space, a line break a new line. Its title is the one
the file's properties give (docProps/core.xml), else its first paragraph
styled Title, else the file's name; the properties' creator is its
`author`. Headers, footers, comments and tracked deletions are not text a
reader of the document sees, and are left out.

A file that is not a zip, or a zip without a Word body, is a counted skip.
"""
from __future__ import annotations

import zipfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

from .base import Record, Skip
from .paragraphs import paragraphs
from .text import file_document

DOCX_SUFFIXES = (".docx", ".docm")
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_DC = "{http://purl.org/dc/elements/1.1/}"
# A body's XML spends bytes on markup: this many bytes of it a character of text, at most.
_XML_BYTES_A_CHAR = 64


def read(path: Path, max_chars: int) -> Iterator[Record]:
    yield _docx_record(path, max_chars)


def _docx_record(path: Path, max_chars: int) -> Record:
    source = str(path)
    try:
        with zipfile.ZipFile(path) as z:
            body = z.getinfo("word/document.xml")
            if body.file_size > _XML_BYTES_A_CHAR * max_chars:
                return Skip("too_large", source, f"a body of {body.file_size} bytes of XML")
            with z.open(body) as f:
                lines, styled_title = _body_lines(f)
            properties = _properties(z)
    except KeyError:
        return Skip("unreadable", source, "a zip without a Word body (word/document.xml)")
    except (zipfile.BadZipFile, ET.ParseError, OSError, EOFError) as e:
        return Skip("unreadable", source, f"not a readable .docx: {type(e).__name__}: {e}")
    author = properties.get("creator")
    return file_document(path, paragraphs(lines), properties.get("title") or styled_title, max_chars,
                         {"author": author} if author else {})


def _body_lines(f) -> tuple[list[tuple[str, bool, bool]], str]:
    """The body's paragraphs as lines for `paragraphs`, and the first one styled Title."""
    lines: list[tuple[str, bool, bool]] = []
    title = ""
    parts: list[str] = []
    style = ""
    skipping = 0  # depth inside deleted text
    for event, el in ET.iterparse(f, events=("start", "end")):
        tag = el.tag
        if tag in (_W + "del", _W + "moveFrom"):
            skipping += 1 if event == "start" else -1
        elif event == "start":
            continue
        elif skipping:
            pass
        elif tag == _W + "t":
            parts.append(el.text or "")
        elif tag in (_W + "tab", _W + "noBreakHyphen"):
            parts.append(" " if tag == _W + "tab" else "-")
        elif tag in (_W + "br", _W + "cr"):
            parts.append("\n")
        elif tag == _W + "pStyle":
            style = el.get(_W + "val", "")
        elif tag == _W + "p":
            for line in "".join(parts).split("\n"):
                lines.append((" ".join(line.split()), True, True))
            if style == "Title" and not title:
                title = " ".join("".join(parts).split())
            parts, style = [], ""
            el.clear()
    return lines, title


def _properties(z: zipfile.ZipFile) -> dict[str, str]:
    """The title and creator the file's core properties give, where they do."""
    try:
        root = ET.fromstring(z.read("docProps/core.xml"))
    except (KeyError, ET.ParseError):
        return {}
    out = {}
    for name in ("title", "creator"):
        el = root.find(_DC + name)
        if el is not None and el.text and el.text.strip():
            out[name] = " ".join(el.text.split())
    return out
