"""Paths to one stream of records: `read_corpus`, and what it reads.

`read_corpus` yields one record per input record, in a deterministic order
(paths as given, a folder's files in sorted name order), so a resumed build
can skip the first N records and meet the same ones. Paths and formats are
checked before any record is read, so a bad path raises at the call, not
halfway through a build; a file that breaks off later ends in a Skip, not an
error. `fingerprint` names the same files in the same order, for a resumed
build to check its inputs against.

A file read whole as one document (WHOLE_FILES: a note, a PDF, a page) is
stamped with its size and modification time, taken before it is read, so
that `read_changed` can tell a sync which files have not changed since the
index read them without reading them again.
"""
from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from propdex.encoders.provenance import sha256_file

from . import beir, docx, hotpotqa, html, jsonl, mediawiki, notebook, pdf, propsegment, text, wikiextractor
from .base import COMMITTED, FORMATS, OTHER_PART, FileSkip, Kept, Record, Skip
from .detect import detect_format, sniff, walk
from .streams import STREAM_ERRORS, DamagedMembers, is_compressed

log = logging.getLogger(__name__)

# One reader per format: indexing, training and eval all read through these.
READERS: dict[str, Callable[[Path, int], Iterator[Record]]] = {
    "jsonl": jsonl.read,
    "json": jsonl.read_json,
    "beir": beir.read,
    "hotpotqa": hotpotqa.read,
    "propsegment": propsegment.read,
    "mediawiki": mediawiki.read,
    "wikiextractor": wikiextractor.read,
    "text": text.read,
    "pdf": pdf.read,
    "html": html.read,
    "docx": docx.read,
    "notebook": notebook.read,
}
# Formats that read a file as one document whose id is the file's absolute path (text.file_id).
WHOLE_FILES = frozenset({"text", "pdf", "html", "docx", "notebook"})
# The stamp a sync compares: None when the index holds no such document, or one read before stamps.
StampOf = Callable[[str], str | None]


def read_corpus(
    paths: Sequence[str | Path],
    format: str | None = None,
    *,
    max_chars: int = 2_000_000,
    part: tuple[int, int] | None = None,
    start: int = 0,
) -> Iterator[Record]:
    """Stream the records of `paths` (files or directories) in order.

    `format` forces one format for all paths; by default each path's format is
    detected. Paths are checked here, so a bad path or an undetectable format
    raises `ValueError` at the call, not halfway through a build. Texts longer
    than `max_chars` are skipped as "too_large". `part=(i, n)` reads for part
    i of n of a build (`IndexWriter.build(..., part=(i, n))`, which keeps
    records i, i + n, ...): a record of another part that can be told apart
    before it is read (a whole file, a dump's page) is left unread, an
    OTHER_PART skip in its place, so n parts do not each render a whole dump.
    `start=n` leaves the first n records unread in the same way (a COMMITTED
    skip in place of each that can be told apart): what a resumed build
    passes over, having committed them before it stopped
    (`IndexWriter.resume_at`), so a build killed far into a dump or a
    folder of PDFs does not parse them all again.
    """
    return _read_plan(_plan(paths, format), format is not None, _Read(max_chars, part=part, start=start))  # type: ignore[return-value]  # no Kept without stamp_of


def read_changed(paths: Sequence[str | Path], stamp_of: StampOf, format: str | None = None, *,
                 max_chars: int = 2_000_000) -> Iterator[Record | Kept]:
    """`read_corpus` for a sync: a file read whole (WHOLE_FILES) whose size
    and modification time make the stamp `stamp_of(its id)` gives (the one
    its stored document was read at) is not read again; a `Kept` stands for
    it. The stamps must be equal, not merely older: a file put back from a
    backup is read again. A file touched but not edited is read, and found
    unchanged by the index."""
    return _read_plan(_plan(paths, format), format is not None, _Read(max_chars, stamp_of=stamp_of))


@dataclass
class _Read:
    """How one read goes: its limit, a sync's stamps, a part's share, the
    records a resumed build committed, and how many records it has yielded
    so far (where the next one falls in the stream, which decides whether
    it is read)."""

    max_chars: int
    stamp_of: StampOf | None = None
    part: tuple[int, int] | None = None
    start: int = 0
    done: int = 0

    def unread(self, ahead: int = 0) -> str | None:
        """Why the record `ahead` places after the next is left unread
        (COMMITTED, OTHER_PART), or None: it is read."""
        at = self.done + ahead
        if at < self.start:
            return COMMITTED
        if self.part is not None and at % self.part[1] != self.part[0]:
            return OTHER_PART
        return None

    @property
    def selective(self) -> bool:
        """Whether this read leaves any record unread."""
        return self.part is not None or self.start > 0


def _plan(paths: Sequence[str | Path], format: str | None) -> list[tuple[Path, str]]:
    """Each path with its format, checked: a bad path raises here, at the call."""
    if format is not None and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    plan: list[tuple[Path, str]] = []
    for p in paths:
        path = Path(p)
        if not path.exists():
            raise ValueError(f"{path}: no such file or directory")
        if not (path.is_file() or path.is_dir()):
            raise ValueError(f"{path}: not a regular file or directory")
        plan.append((path, format or detect_format(path)))
    return plan


def fingerprint(paths: Sequence[str | Path], format: str | None = None) -> dict[str, dict[str, Any]]:
    """{path: {bytes, sha256}} of every file the paths are read from: what a
    resumed build checks its inputs against."""
    return {str(f.resolve()): {"bytes": f.stat().st_size, "sha256": sha256_file(f)} for f in input_files(paths, format)}


def input_files(paths: Sequence[str | Path], format: str | None = None) -> list[Path]:
    """Every file `read_corpus(paths, format)` reads, in the order it reads them."""
    files = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files += [f for f, _ in _directory_plan(path, format or detect_format(path), format is not None) if isinstance(f, Path)]
        elif path.is_file():
            files.append(path)
    return files


def _read_plan(plan: list[tuple[Path, str]], forced: bool, read: _Read) -> Iterator[Record | Kept]:
    for path, fmt in plan:
        for record in _read_file(path, fmt, read) if path.is_file() else _read_directory(path, fmt, forced, read):
            read.done += 1
            yield record


def _read_directory(path: Path, fmt: str, forced: bool, read: _Read) -> Iterator[Record | Kept]:
    """A folder's files in order, each in its own format unless one is forced."""
    for file, file_fmt in _directory_plan(path, fmt, forced):
        if isinstance(file, Skip):
            yield file
            continue
        error = None
        if file_fmt is None:
            file_fmt, error = sniff(file)
        if file_fmt is not None:
            yield from _read_file(file, file_fmt, read)
        elif error:
            yield _broken_file(file, 0, error)
        else:
            yield Skip("unreadable", str(file), "unknown format")


def _directory_plan(path: Path, fmt: str, forced: bool) -> list[tuple[Path | Skip, str | None]]:
    """The files a directory is read from, in order, each with its format
    (None: sniffed from its content when it is read), and a Skip in place of
    an entry that cannot be read. A BEIR folder is its corpus.jsonl and a
    PropSegment folder its cluster files: the rest are not documents."""
    if fmt == "beir" and (corpus := beir.corpus_file(path)) is not None:
        return [(corpus, "jsonl")]
    if fmt == "propsegment":
        clusters = propsegment.cluster_files(path)
        if clusters:
            return [(file, "propsegment") for file in clusters]
    return [(file, None if isinstance(file, Skip) or not forced else fmt) for file in walk(path)]


def _read_file(path: Path, fmt: str, read: _Read) -> Iterator[Record | Kept]:
    return _whole_file(path, fmt, read) if fmt in WHOLE_FILES else _records(path, fmt, read)


def _records(path: Path, fmt: str, read: _Read) -> Iterator[Record]:
    """Records of one file; a file that breaks off ends in a Skip, not an error."""
    count = 0
    reader = READERS[fmt]
    if fmt == "mediawiki" and read.selective:
        reader = partial(mediawiki.read, unread=partial(_Read.unread, replace(read)))  # a copy: counting from this file's start
    try:
        for record in reader(path, read.max_chars):
            count += 1
            yield record
    except FileSkip as e:
        yield e.skip
    except ET.ParseError as e:
        yield Skip("unreadable", str(path), f"after {count} records: XML error: {e}")
    except DamagedMembers as e:
        for offset, error in e.members:
            yield Skip("truncated_bz2", str(path), f"after {count} records: the bz2 member at byte {offset} is lost ({error})")
    except STREAM_ERRORS as e:
        yield _broken_file(path, count, str(e) or type(e).__name__)
    log.debug("%s: %d records as %s", path, count, fmt)


def _whole_file(path: Path, fmt: str, read: _Read) -> Iterator[Record | Kept]:
    """A file read as one document, stamped; or Kept, when `stamp_of` says
    the index read it at this very stamp. The stamp is taken before the file
    is read, so an edit made while it is read shows as a change next time."""
    reason = read.unread()
    if reason:
        yield Skip(reason, str(path))
        return
    doc_id = text.file_id(path)
    try:
        stat = path.stat()
        stamp = f"{stat.st_size}:{stat.st_mtime_ns}"
    except OSError:
        stamp = ""  # the reader says what is wrong with the file
    if stamp and read.stamp_of is not None and read.stamp_of(doc_id) == stamp:
        yield Kept(doc_id, str(path))
        return
    for record in _records(path, fmt, read):
        if isinstance(record, Skip):
            yield replace(record, id=doc_id)  # the file is there: a sync keeps what it held before
        else:
            yield replace(record, stamp=stamp) if stamp and record.id == doc_id else record


def _broken_file(path: Path, count: int, error: str) -> Skip:
    """The Skip for a file that broke off after `count` records."""
    reason = "truncated_bz2" if is_compressed(path) else "unreadable"
    return Skip(reason, str(path), f"after {count} records: {error}")
