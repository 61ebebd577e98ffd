"""Records in, encoded batches out: what a shard is written from.

A writer pulls documents from a stream of records (counting what it skips),
cuts them into passages and encodes them a chunk at a time, so that a build's
memory grows neither with its shards nor with its documents' length.
"""
from __future__ import annotations

import ctypes
import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from propdex.encoders import Document, Encoded, Passage
from propdex.encoders.text import split_sentences

from .readers import Record, Skip
from .readers.base import COMMITTED, OTHER_PART, UNREAD, Kept, admitted
from .store import plain

if TYPE_CHECKING:
    from propdex.encoders import Encoder

# The writer's messages keep the logger name they have always had: users filter on it.
log = logging.getLogger(__package__ + ".build")

EXAMPLES_PER_REASON = 10
QUIET_SKIPS = {"redirect", "namespace"}  # expected in every dump: counted, not shouted

# Documents encoded and written at a time, fewer where they hold more than
# ENCODE_PASSAGES passages: a long document costs its passages, not more
# (a long Wikipedia article is thousands of token vectors; a chunk's
# passages bound what one encode call holds).
ENCODE_DOCS = 256
ENCODE_PASSAGES = 512

# What a shard is written from: documents, their encodings, passages read.
Batch = tuple[list[Document], list[Encoded], int]


def chunks(docs: list[Document], encoder: "Encoder") -> Iterator[tuple[list[Document], list[list[Passage]]]]:
    """`docs` with their passages, ENCODE_DOCS at a time or fewer holding
    ENCODE_PASSAGES passages (a longer document alone)."""
    chunk: list[Document] = []
    cut: list[list[Passage]] = []
    held = 0  # passages in `cut`
    for doc, ps in zip(docs, encoder.cut(docs)):
        if chunk and (len(chunk) == ENCODE_DOCS or held + len(ps) > ENCODE_PASSAGES):
            yield chunk, cut
            chunk, cut, held = [], [], 0
        chunk.append(doc)
        cut.append(ps)
        held += len(ps)
    if chunk:
        yield chunk, cut


def encoded(encoder: "Encoder", docs: list[Document], bar: tqdm | None = None) -> Iterator[Batch]:
    """`docs` encoded a chunk at a time (see `chunks`): (documents, their
    vectors and units, passages read)."""
    for chunk, passages_per_doc in chunks(docs, encoder):
        flat = [p for ps in passages_per_doc for p in ps]
        encoded_flat = iter(encoder.encode(flat))
        yield chunk, [concat([next(encoded_flat) for _ in ps], encoder.dim) for ps in passages_per_doc], len(flat)
        return_freed_memory()
        if bar is not None:
            bar.update(len(chunk))


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the OS. Each encode chunk allocates
    tensors of new shapes, and glibc keeps what they freed, so a build's
    resident set would grow far past its live data. Other C libraries:
    nothing to do."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def concat(parts: list[Encoded], dim: int) -> Encoded:
    """One document's encoding from its passages' (no passage: no vectors)."""
    if not parts:
        return Encoded(np.zeros((0, dim), np.float32), [])
    return Encoded(np.concatenate([p.vectors for p in parts]), [u for p in parts for u in p.units])


def take(stream: Iterator[Record | Kept], want: int, seen: set[str],
         kept: set[str] | None = None) -> tuple[list[Document], int, Counter, dict]:
    """Pull records until `want` documents are accepted (or the stream ends):
    (documents, records read, skips by reason, a few examples of each). An id
    in `seen` is skipped: one id, one document (`_intake`). A sync's `Kept`
    files are read records too: their ids go to `seen` and to `kept`; so does
    the id a skip names (a file there but unreadable this time), to `seen`
    alone, so a sync does not delete its earlier version."""
    docs: list[Document] = []
    skipped: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    n_inputs = 0
    while len(docs) < want:
        record = next(stream, None)
        if record is None:
            break
        n_inputs += 1
        if isinstance(record, Kept) and record.id not in seen:
            if kept is None:
                raise TypeError(f"{record.source}: a Kept record outside a sync")
            seen.add(record.id)
            kept.add(record.id)
            continue
        record = _intake(record, seen)
        if isinstance(record, Skip) and record.reason in UNREAD:
            raise ValueError(_UNREAD_MESSAGES[record.reason].format(record.source))
        if isinstance(record, Skip):
            _count_skip(record, skipped, examples)
            if record.id:
                seen.add(record.id)
            continue
        seen.add(record.id)
        docs.append(record)
    return docs, n_inputs, skipped, examples


_UNREAD_MESSAGES = {
    OTHER_PART: "{} was left to another part of the build: build the records of read_corpus(..., part=(i, n)) "
                "with the same part (IndexWriter.build(..., part=(i, n)))",
    COMMITTED: "{} was left unread as committed before, but this build has not committed it: read the input with "
               "read_corpus(..., start=writer.resume_at)",
}


def _intake(record: Record | Kept, seen: set[str]) -> Record:
    """A document as the writer takes it, whichever door it came in by (a
    reader, a dict, a Document handed in whole), or the Skip saying why not:
    an id taken before, the readers' gate (`admitted`), metadata as JSON
    holds it (`store.plain`: the store keeps it as JSON), and the readers'
    sentence split for a document given without one."""
    if isinstance(record, Skip):
        return record
    source = record.source or record.id
    if record.id in seen:  # met before, a Kept file's id too: one id, one document
        # A set of ids, not of where each came from: millions of sources would cost gigabytes.
        return Skip("duplicate_id", source, f"id {record.id!r} was taken by an earlier document")
    doc = admitted(record)
    if isinstance(doc, Skip):
        return doc
    if doc.metadata:
        metadata = plain(doc.metadata)
        try:
            json.dumps(metadata, ensure_ascii=False)
        except (TypeError, ValueError) as e:
            return Skip("bad_metadata", source, f"metadata must be JSON: {e}")
        doc = doc if metadata == doc.metadata else replace(doc, metadata=metadata)
    return doc if doc.sentences else replace(doc, sentences=tuple(split_sentences(doc.text)))


def _count_skip(record: Skip, skipped: Counter, examples: dict[str, list[str]]) -> None:
    skipped[record.reason] += 1
    if len(examples.setdefault(record.reason, [])) < EXAMPLES_PER_REASON:
        examples[record.reason].append(record.source)
    level = logging.DEBUG if record.reason in QUIET_SKIPS else logging.WARNING
    log.log(level, "skipped %s (%s)%s", record.source, record.reason, f": {record.detail}" if record.detail else "")


def skip_records(stream: Iterator[Record], n: int) -> None:
    """Advance past the `n` records committed shards already consumed (a
    stream read with `read_corpus(..., start=n)` leaves them unread)."""
    if not n:
        return
    with tqdm(desc="resume: passing over committed records", unit="record", total=n, dynamic_ncols=True) as bar:
        for _ in range(n):
            if next(stream, None) is None:
                break
            bar.update()

