"""MediaWiki XML exports (Wikipedia dumps): articles rendered to prose.

Pages are streamed: each `<page>...</page>` is cut from the byte stream and
parsed on its own (in XML text a literal "<page>" is escaped, so the tags
are unambiguous), so a dump of any size reads in little memory and one
malformed page is one Skip while the pages after it are still read.
Redirects and pages outside the article namespace are skipped: they are not
articles. A dump of POOL_BYTES or more is rendered by worker processes
(`parallel.ordered`), in order: wikitext rendering is a build's slowest
step on a GPU machine.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from functools import partial
from itertools import chain
from pathlib import Path

from . import parallel
from .base import Record, Skip, document
from .streams import open_binary
from .wikitext import render_wikitext

_PAGE, _END = b"<page>", b"</page>"
_BLOCK = 1 << 20
_REDIRECT_TEXT = re.compile(r"\s*#redirect", re.IGNORECASE)
# A dump file this large (as stored, compressed or not) is rendered by worker processes: below it, starting
# them costs more than they save.
POOL_BYTES = 64 << 20


def read(path: Path, max_chars: int, unread: Callable[[int], str | None] | None = None) -> Iterator[Record]:
    """Pages of a MediaWiki XML export, streamed; articles rendered to text.

    A page that breaks off where another begins (what a damaged member of a
    multistream dump leaves) is one skip too, and the next page is whole. A
    file that ends inside a page ends in a Skip, after the file is closed
    (closing a damaged dump reports its lost members instead). A page that
    `unread(k)` (k: the page's place in the file, from 0) leaves unread, for
    another part of a build or one a resumed build committed, is not parsed:
    a skip with the reason it gives stands in."""
    cutter = _PageCutter()
    count, n_workers = 0, parallel.workers() if path.stat().st_size >= POOL_BYTES else 1
    pages = _cut(path, cutter)
    if unread is not None:
        pages = ((number, unread(k) or page) for k, (number, page) in enumerate(pages))
    step = partial(_numbered_page, path=path, max_chars=max_chars)
    if n_workers > 1:  # a resumed build's committed pages are answered here: no worker has anything to do for them
        for numbered in pages:
            if not isinstance(numbered[1], str):
                pages = chain([numbered], pages)
                break
            count += 1
            yield step(numbered)
    for record in parallel.ordered(step, pages, n_workers) if n_workers > 1 else map(step, pages):
        count += 1
        yield record
    if cutter.inside:
        yield Skip("unreadable", str(path), f"after {count} records: the file ends inside page {cutter.number}")


def _cut(path: Path, cutter: "_PageCutter") -> Iterator[tuple[int, bytes | None]]:
    with open_binary(path) as f:
        for block in iter(lambda: f.read(_BLOCK), b""):
            yield from cutter.feed(block)


class _PageCutter:
    """Cuts `<page>...</page>` out of blocks of bytes, across block ends.

    `number` counts the pages begun (1 for the first); `inside` says whether
    the bytes fed so far end inside a page."""

    def __init__(self) -> None:
        self.buffer, self.inside, self.number = b"", False, 0

    def feed(self, block: bytes) -> Iterator[tuple[int, bytes | None]]:
        """(page number, the page's bytes) of every page the block completes;
        None for a page broken off where another begins. The buffer is read
        from an offset and cut once a block, not once a page: a block holds
        dozens of pages, and copying what follows each would be most of the
        work."""
        buffer, at = self.buffer + block, 0
        try:
            while True:
                if not self.inside:
                    start = buffer.find(_PAGE, at)
                    if start < 0:
                        at = max(at, len(buffer) - len(_PAGE))  # a tag may straddle two blocks
                        return
                    at, self.inside, self.number = start, True, self.number + 1
                end = buffer.find(_END, at)
                if end < 0:
                    return
                restart = buffer.rfind(_PAGE, at + 1, end)
                if restart > 0:
                    # A page broken off (a lost bz2 member) runs into the next: the
                    # broken one is the skip, the next is read.
                    yield self.number, None
                    at, self.number = restart, self.number + 1
                    continue
                end += len(_END)
                page, at, self.inside = buffer[at:end], end, False
                yield self.number, page
        finally:
            self.buffer = buffer[at:]


def _numbered_page(numbered: tuple[int, bytes | str | None], path: Path, max_chars: int) -> Record:
    return _page(numbered[1], numbered[0], path, max_chars)


def _page(page: bytes | str | None, number: int, path: Path, max_chars: int) -> Record:
    """The record of one cut page: a Skip for a broken or malformed one, or
    for one left unread (`page` is then the reason, a str)."""
    if isinstance(page, str):
        return Skip(page, f"{path}#page {number}")
    if page is None:
        return Skip("malformed_xml", f"{path}#page {number}", "the page breaks off where another begins")
    try:
        # Parsed apart from the root, the page's tags carry no namespace.
        return _page_record(ET.fromstring(page), "", path, max_chars)
    except ET.ParseError as e:
        return Skip("malformed_xml", f"{path}#page {number}", f"XML error: {e}")


def _page_record(page: ET.Element, ns: str, path: Path, max_chars: int) -> Record:
    page_id = (page.findtext(ns + "id") or "").strip()
    title = page.findtext(ns + "title") or ""
    source = f"{path}#{page_id or title}"
    wikitext = page.findtext(f"{ns}revision/{ns}text") or ""
    if page.find(ns + "redirect") is not None or _REDIRECT_TEXT.match(wikitext):
        return Skip("redirect", source, title)
    namespace = (page.findtext(ns + "ns") or "0").strip()
    if namespace != "0":
        return Skip("namespace", source, f"ns {namespace}: {title}")
    if not page_id:
        return Skip("missing_field", source, "page without id")
    return document(page_id, render_wikitext(wikitext), title, source, max_chars)
