"""HTML pages: one Document a file, the text a browser shows.

A saved article, an exported wiki page, a docs page is one document, kept as
a note is (text.py): its id is the file's absolute path, which is also its
`path` metadata. Its title is the page's <title>, else its first <h1>, else
the file's name without its suffix; <meta name="author|description|keywords|
date"> are metadata too (keywords as a list). What a reader never sees is
dropped: <head>, scripts, styles, templates, forms' option lists. Block
elements (paragraphs, headings, list items, table cells, line breaks) end
lines, as they end lines on screen, and their inline text joins into one
line, so sentences are cut as the page reads; <pre> keeps its lines.

The bytes are UTF-8 unless the page declares another charset in its first
bytes (`<meta charset>`), as browsers read it.
"""
from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

from .base import Record, Skip
from .paragraphs import paragraphs
from .text import file_bytes, file_document

HTML_SUFFIXES = (".html", ".htm", ".xhtml")
# Elements whose text a reader never sees.
_HIDDEN = {"script", "style", "template", "noscript", "svg", "math", "select", "iframe", "object"}
# Elements that start and end a line of their own.
_BLOCKS = {
    "address", "article", "aside", "blockquote", "br", "caption", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li",
    "main", "nav", "ol", "p", "pre", "section", "summary", "table", "td", "th", "tr", "ul",
}
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}
_META = ("author", "description", "keywords", "date")
_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([\w-]+)""", re.I)


def read(path: Path, max_chars: int) -> Iterator[Record]:
    yield _html_record(path, max_chars)


def _html_record(path: Path, max_chars: int) -> Record:
    data = file_bytes(path, max_chars)
    if isinstance(data, Skip):
        return data
    text = _decoded(data)
    if not isinstance(text, str):
        reason, problem = text
        return Skip(reason, str(path), problem)
    page = _Page()
    page.feed(text)
    page.close()
    return file_document(path, paragraphs(page.lines), page.title or page.first_h1, max_chars, page.meta)


def _decoded(data: bytes) -> str | tuple[str, str]:
    """The page's text, decoded as UTF-8 or the charset the page declares;
    else (skip reason, why)."""
    declared = _CHARSET.search(data[:4096])
    encoding = declared.group(1).decode("ascii", "replace").lower() if declared else "utf-8"
    try:
        encoding = codecs.lookup(encoding).name
    except LookupError:
        return "unreadable", f"the page declares an unknown charset {encoding!r}"
    try:
        return data.decode("utf-8-sig" if encoding == "utf-8" else encoding)
    except UnicodeDecodeError as e:
        return "invalid_utf8" if encoding == "utf-8" else "unreadable", f"not {encoding} as the page says: {e}"


class _Page(HTMLParser):
    """The visible text of a page as (line, starts a block, ends a block)
    lines for `paragraphs`, its <title>, first <h1> and <meta> fields."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[tuple[str, bool, bool]] = []
        self.meta: dict[str, object] = {}
        self.title = self.first_h1 = ""
        self._line: list[str] = []
        self._hidden = 0  # depth inside elements never shown
        self._pre = 0
        self._naming: str | None = None  # "title" or "h1" while the first of it is read
        self._name: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "meta":
            self._meta(dict(attrs))
        if tag in _BLOCKS:
            self._end_line()
        if tag in _VOID:
            return
        if tag in _HIDDEN:
            self._hidden += 1
        if tag == "pre":
            self._pre += 1
        if (tag == "title" and not self.title) or (tag == "h1" and not self.first_h1):
            self._naming, self._name = tag, []

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN and self._hidden:
            self._hidden -= 1
        if tag in _BLOCKS:
            self._end_line()
        if tag == "pre" and self._pre:
            self._pre -= 1
        if tag == self._naming:
            setattr(self, "title" if tag == "title" else "first_h1", " ".join("".join(self._name).split()))
            self._naming = None

    def handle_data(self, data: str) -> None:
        if self._naming is not None and not self._hidden:
            self._name.append(data)
            if self._naming == "title":
                return  # a title is not body text
        if self._hidden:
            return
        if self._pre:
            *done, rest = data.split("\n")
            for part in done:
                self._line.append(part)
                self._end_line()
            self._line.append(rest)
        else:
            self._line.append(data)

    def close(self) -> None:
        super().close()
        self._end_line()

    def _end_line(self) -> None:
        self.lines.append((" ".join("".join(self._line).split()), True, True))
        self._line = []

    def _meta(self, attrs: dict[str, str | None]) -> None:
        name, content = (attrs.get("name") or "").lower(), attrs.get("content")
        if name in _META and content and content.strip() and name not in self.meta:
            value = " ".join(content.split())
            self.meta[name] = [k.strip() for k in value.split(",") if k.strip()] if name == "keywords" else value
