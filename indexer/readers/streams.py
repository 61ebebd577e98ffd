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
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from .base import FileSkip, Skip

_BZ2_MAGIC = re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")
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
    cut short is one damaged member, as before."""

    _HEADER = re.compile(rb"BZh[1-9]1AY&SY")
    _CHUNK = 1 << 16

    def __init__(self, path: Path) -> None:
        self._file = open(path, "rb")
        self._chunks = self._decompressed()
        self._pending = b""
        self.damaged: list[tuple[int, str]] = []

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = chunk
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        """Closing says what was lost: every reader reads inside `with`, so
        the damage reaches it after the last record it could read."""
        damaged, self.damaged = self.damaged, []
        self._file.close()
        super().close()
        if damaged:
            raise DamagedMembers(damaged)

    def _decompressed(self) -> Iterator[bytes]:
        member = position = 0  # where the current member starts; the next byte to feed
        decompressor = bz2.BZ2Decompressor()
        while True:
            self._file.seek(position)
            block = self._file.read(self._CHUNK)
            if not block:
                if position > member:
                    self.damaged.append((member, "truncated: the file ends inside this member"))
                return
            try:
                out = decompressor.decompress(block)
            except (OSError, EOFError) as e:
                self.damaged.append((member, str(e) or type(e).__name__))
                member = position = self._next_header(member + 1)
                if position < 0:
                    return
                decompressor = bz2.BZ2Decompressor()
                continue
            if out:
                yield out
            if decompressor.eof:
                member = position = position + len(block) - len(decompressor.unused_data)
                decompressor = bz2.BZ2Decompressor()
            else:
                position += len(block)

    def _next_header(self, start: int) -> int:
        """Offset of the first stream header at or after `start`; -1 if none."""
        overlap = 9  # a header may straddle two chunks
        while True:
            self._file.seek(start)
            block = self._file.read(self._CHUNK)
            if len(block) < 10:
                return -1
            found = self._HEADER.search(block)
            if found:
                return start + found.start()
            start += len(block) - overlap


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
        return io.BufferedReader(_Bz2Members(path))
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
