"""Input files as byte streams: bz2 and gzip opened by their magic bytes.

A file is decompressed by what it holds, not what it is called, so a dump
renamed or a `.gz` without its suffix reads the same. A multistream bz2 file
(Wikipedia's dumps) loses only its damaged members' pages; closing it says
which were lost (`DamagedMembers`), after every record that could be read.
"""
from __future__ import annotations

import bz2
import gzip
import io
import json
import os
import re
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from .base import FileSkip, Skip
from .parallel import workers

_BZ2_MAGIC = re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")
_HEADER = re.compile(rb"BZh[1-9]1AY&SY")  # a stream that holds data begins so
_SCAN = 1 << 20  # bytes read at a time while looking for a stream header
# A bz2 file this large is decompressed by several threads (`_Bz2Members`), a range of RANGE_BYTES to twice
# that of it each (a Wikipedia multistream member is a few hundred kB); where no member begins in the second
# RANGE_BYTES of a range, the rest of the file is decompressed as it streams, so a range's bytes stay bounded.
PARALLEL_BYTES = 64 << 20
RANGE_BYTES = 1 << 20
# Errors a damaged bz2/gzip stream raises while being read.
STREAM_ERRORS = (EOFError, OSError, zlib.error)


class DamagedMembers(OSError):
    """Raised on closing a bz2 file whose damaged members were stepped over:
    (byte offset, error) per member lost."""

    def __init__(self, members: list[tuple[int, str]]) -> None:
        super().__init__(f"{len(members)} damaged bz2 member(s)")
        self.members = members


class _Bz2Members(io.RawIOBase):
    """The decompressed bytes of a bz2 file, member by member.

    Wikipedia's multistream dumps are thousands of bz2 streams of about 100
    pages each, concatenated. A damaged member costs its own pages only:
    reading steps to the next stream header after it and goes on, and
    closing the file raises `DamagedMembers`, naming each member lost (the
    reader has then yielded every record it could). A single-stream file
    cut short is one damaged member, as before.

    A file of PARALLEL_BYTES or more is decompressed by `threads` threads
    (bz2 lets go of the GIL), a range of whole members each (`_ranges`: cut
    at stream headers), answered in order: the same bytes and the same
    damage as one thread, at the cores' speed. Members too long to share
    out (a single-stream file) are decompressed as they stream, as by one
    thread. One thread decompresses a
    dump's XML at about 20 MB a second, which would otherwise bound the read
    of a machine whose cores render the pages."""

    _CHUNK = 1 << 16

    def __init__(self, path: Path, threads: int = 1) -> None:
        self._path = path
        self._file = open(path, "rb")
        self.damaged: list[tuple[int, str]] = []
        threads = threads if path.stat().st_size >= PARALLEL_BYTES else 1
        self._chunks = self._parallel(threads) if threads > 1 else _members(self._file, 0, None, self.damaged)
        self._pending, self._at = memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while self._at == len(self._pending):
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending, self._at = memoryview(chunk), 0
        n = min(len(buffer), len(self._pending) - self._at)
        buffer[:n] = self._pending[self._at : self._at + n]  # a view: a range's megabytes are not copied a read at a time
        self._at += n
        return n

    def close(self) -> None:
        """Closing says what was lost: every reader reads inside `with`, so
        the damage reaches it after the last record it could read."""
        self._chunks.close()  # a read stopped early: threads still queued are cancelled
        damaged, self.damaged = self.damaged, []
        self._file.close()
        super().close()
        if damaged:
            raise DamagedMembers(damaged)

    def _parallel(self, threads: int) -> Iterator[bytes]:
        pending: deque[Future[tuple[bytes, list[tuple[int, str]]]]] = deque()
        with ThreadPoolExecutor(threads, thread_name_prefix="propdex-bz2") as pool:
            try:
                for start, stop in _ranges(self._file):
                    if stop is None:  # no member begins near: the rest streams, as one thread reads it
                        while pending:
                            yield self._answer(pending.popleft())
                        yield from _members(self._file, start, None, self.damaged)
                        return
                    pending.append(pool.submit(_decompress_range, self._path, start, stop))
                    if len(pending) >= 2 * threads:
                        yield self._answer(pending.popleft())
                while pending:
                    yield self._answer(pending.popleft())
            finally:
                for future in pending:
                    future.cancel()

    def _answer(self, future: "Future[tuple[bytes, list[tuple[int, str]]]]") -> bytes:
        data, damaged = future.result()
        self.damaged += damaged
        return data


def _members(f: BinaryIO, start: int, stop: int | None, damaged: list[tuple[int, str]]) -> Iterator[bytes]:
    """Decompressed bytes of the members of open bz2 file `f` that begin at
    `start` or after it and before `stop` (None: to the end), fed a _CHUNK at
    a time from each member's first byte; a damaged member is noted in
    `damaged` as (its offset, the error) and reading goes on at the next
    stream header after it."""
    member = position = start  # where the current member starts; the next byte to feed
    decompressor = bz2.BZ2Decompressor()
    while True:
        f.seek(position)
        block = f.read(_Bz2Members._CHUNK)
        if not block:
            if position > member:
                damaged.append((member, "truncated: the file ends inside this member"))
            return
        try:
            out = decompressor.decompress(block)
        except (OSError, EOFError) as e:
            damaged.append((member, str(e) or type(e).__name__))
            member = position = _next_header(f, member + 1)
            if position < 0 or (stop is not None and position >= stop):
                return
            decompressor = bz2.BZ2Decompressor()
            continue
        if out:
            yield out
        if decompressor.eof:
            member = position = position + len(block) - len(decompressor.unused_data)
            if stop is not None and position >= stop:
                return
            decompressor = bz2.BZ2Decompressor()
        else:
            position += len(block)


def _decompress_range(path: Path, start: int, stop: int) -> tuple[bytes, list[tuple[int, str]]]:
    """One thread's share of `_Bz2Members._parallel`: the members that begin in [start, stop)."""
    damaged: list[tuple[int, str]] = []
    with open(path, "rb") as f:
        return b"".join(_members(f, start, stop, damaged)), damaged


def _ranges(f: BinaryIO) -> Iterator[tuple[int, int | None]]:
    """[start, stop) byte ranges of a bz2 file, from RANGE_BYTES to twice
    that long, cut at stream headers, so that each begins a member; the
    last is what is left, and its stop None where that is longer (no header
    to cut at: one long member). (Ten bytes of compressed data could look
    like a header, about one chance in 2^80 a byte; the recovery from a
    damaged member trusts headers the same way.)"""
    total = os.fstat(f.fileno()).st_size
    start = 0
    while start < total:
        if total - start <= 2 * RANGE_BYTES:
            yield start, total
            return
        stop = _next_header(f, start + RANGE_BYTES, start + 2 * RANGE_BYTES)
        yield start, (None if stop < 0 else stop)
        if stop < 0:
            return
        start = stop


def _next_header(f: BinaryIO, start: int, before: int | None = None) -> int:
    """Offset of the first stream header at or after `start` (and before
    `before`, where given); -1 if none."""
    overlap = 9  # a header may straddle two blocks
    while before is None or start < before:
        f.seek(start)
        block = f.read(_SCAN if before is None else min(_SCAN, before - start + overlap))
        if len(block) < 10:
            return -1
        found = _HEADER.search(block)
        if found and (before is None or start + found.start() < before):
            return start + found.start()
        start += len(block) - overlap
    return -1


def compression(path: Path) -> str | None:
    """bz2 or gzip by magic number (the stream header and, for bz2, the first
    block's or the end-of-stream marker), so text that merely starts with
    "BZh" is text."""
    with open(path, "rb") as f:
        magic = f.read(10)
    if _BZ2_MAGIC.match(magic):
        return "bz2"
    if magic[:3] == b"\x1f\x8b\x08":  # gzip, deflate: the only method gzip writes
        return "gzip"
    return None


def is_compressed(path: Path) -> bool:
    """Whether the file is bz2 or gzip; False for one that cannot be opened."""
    try:
        return compression(path) is not None
    except OSError:
        return False


def open_binary(path: Path) -> BinaryIO:
    """Open a file for reading bytes, decompressing bz2 and gzip transparently."""
    kind = compression(path)
    if kind == "bz2":
        return io.BufferedReader(_Bz2Members(path, workers()))
    if kind == "gzip":
        return gzip.open(path, "rb")
    return open(path, "rb")


def bare_name(path: Path) -> Path:
    """The file's name without a compression suffix: notes.md for notes.md.gz."""
    return Path(re.sub(r"\.(bz2|gz)$", "", path.name))


def load_json(path: Path) -> object:
    """A whole JSON file, decoded strictly; FileSkip if it is not valid JSON."""
    with open_binary(path) as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise FileSkip(Skip("invalid_utf8", str(path), str(e))) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FileSkip(Skip("malformed_json", str(path), str(e))) from None
