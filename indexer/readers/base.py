"""What every reader yields: a `Document`, or a `Skip` saying why not.

Bad user data never raises: a record that cannot be indexed becomes a Skip,
so the indexer can count skips by reason and a resumed build can skip the
first N records of the same stream. `document` is the one gate every reader
passes its records through, so the rules on empty, oversized and unkeyable
records hold alike for every format.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from propdex.encoders.text import Span, split_sentences
from propdex.encoders.units import Document

log = logging.getLogger(__name__)

FORMATS = ("jsonl", "json", "beir", "hotpotqa", "propsegment", "mediawiki", "wikiextractor", "text", "pdf", "html", "docx", "notebook")
# Files read as `text` by their name, whatever they begin with (a note may open with "{" or "<").
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".rst")
# LMDB keys hold at most 511 bytes, and a document's key is "id/" + its id.
MAX_ID_BYTES = 500
# Skips standing in for records a read leaves unread: another part of a build
# reads it (`read_corpus(part=...)`; that part's build drops it), or the
# committed shards of a resumed build consumed it (`read_corpus(start=...)`;
# the build passes over it). A build meets neither as a record.
OTHER_PART = "other_part"
COMMITTED = "committed"
UNREAD = (OTHER_PART, COMMITTED)


@dataclass(frozen=True)
class Skip:
    """An input record that is not indexed, and why.

    `reason` is a slug: "empty", "invalid_utf8", "malformed_json",
    "missing_field", "truncated_bz2" (any truncated or corrupt compressed
    stream, bz2 or gzip), "malformed_xml" (one page of a MediaWiki dump),
    "too_large", "bad_sentences" (spans a format gave that do not fit the
    text), "bad_id" (a lone surrogate, or more than
    MAX_ID_BYTES bytes: LMDB keys hold 511), "redirect", "namespace" or
    "unreadable" (a file that cannot be opened or parsed as a whole). `source` is
    "path:line" for line-based formats, "path#id" for records with an id, or
    the path for a whole file. `id` is the id the record would have had,
    where it is known (a file read whole: its absolute path), so that a sync
    keeps the earlier version of a file it could not read this time instead
    of taking it for deleted.
    """

    reason: str
    source: str
    detail: str = ""
    id: str = ""


Record = Document | Skip


@dataclass(frozen=True)
class Kept:
    """A file an index holds as it is now, not read again: its document
    `id` was read from a file of the same size and modification time
    (`Document.stamp`). Only a sync's read (`corpus.read_changed`) yields it."""

    id: str
    source: str


class FileSkip(Exception):
    """A whole file cannot be read; carries the Skip to report for it.

    Raised from inside a reader's generator, so the file's one Skip comes
    after whatever records were read before the damage showed."""

    def __init__(self, skip: Skip) -> None:
        super().__init__(skip.detail)
        self.skip = skip


def document(
    doc_id: str,
    text: str,
    title: str,
    source: str,
    max_chars: int,
    sentences: Iterable[Span] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Record:
    """A Document, or the Skip for an empty or oversized text, sentence spans
    that do not fit it, or an id the index cannot key (`admitted`, which
    also repairs lone surrogates)."""
    if not text.strip():
        return Skip("empty", source)
    if len(text) > max_chars:
        return Skip("too_large", source, f"{len(text)} characters > {max_chars}")
    spans = split_sentences(text) if sentences is None else sentences
    try:
        doc = Document(doc_id, text, title, tuple(spans), source=source, metadata=metadata or {})
    except ValueError as e:  # sentence spans a format gave that do not fit its text
        return Skip("bad_sentences", source, str(e))
    return admitted(doc)


def admitted(doc: Document) -> Document | Skip:
    """The gate every document passes, a reader's record or one handed in
    whole (the Python API, `IndexWriter.build`): blank text and an id the
    index cannot key are skips; lone surrogates (JSON "\\ud800" escapes) in
    the text or title become U+FFFD, one for one so spans stay valid, with a
    warning naming the record, and the document says so (`repairs`), for the
    manifest to count."""
    source = doc.source or doc.id
    if not doc.text.strip():
        return Skip("empty", source)
    if (bad := _bad_id(doc.id)) is not None:
        return Skip("bad_id", source, bad)
    if _utf8(doc.text) and _utf8(doc.title):
        return doc
    log.warning("%s: lone surrogates in the text or title replaced by U+FFFD", source)
    return replace(doc, text=_repair(doc.text), title=_repair(doc.title), repairs=(*doc.repairs, "lone_surrogates"))


def _bad_id(doc_id: str) -> str | None:
    """Why the index cannot key `doc_id`, or None."""
    if not _utf8(doc_id):
        return "the id holds a lone surrogate (not Unicode text)"
    if len(doc_id.encode()) > MAX_ID_BYTES:
        return f"the id is {len(doc_id.encode())} bytes long, more than {MAX_ID_BYTES}"
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _repair(text: str) -> str:
    """Lone surrogates replaced, one U+FFFD each: offsets into the text stay valid."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
