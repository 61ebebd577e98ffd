"""What a path holds: its format, and the files of a folder.

Formats are detected from content (compressed files are opened by their
magic bytes, whatever their name), because corpora are renamed, split and
compressed freely; the file name is the fallback only when a compressed
file is too damaged to read its beginning. Plain text and Markdown are the
exception: they have no telling content, so their names say it
(TEXT_SUFFIXES), and a folder of notes reads without a `--format`. An HTML
page is known by its name (HTML_SUFFIXES) or by how it opens, a Word
document by its name (DOCX_SUFFIXES: a zip opens as any zip does), a
Jupyter notebook by its name (it opens as any JSON document does).
"""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from . import beir, propsegment
from .base import FORMATS, TEXT_SUFFIXES, Skip
from .docx import DOCX_SUFFIXES
from .html import HTML_SUFFIXES
from .notebook import NOTEBOOK_SUFFIXES
from .streams import STREAM_ERRORS, bare_name, open_binary

_SNIFF_BYTES = 64 * 1024
# Formats a file's name says, whatever it begins with (the name without a compression suffix).
# A JSON Lines file is never read whole, even if its first line is bad.
_NAMED = {suffix: fmt for suffixes, fmt in ((TEXT_SUFFIXES, "text"), ((".jsonl", ".ndjson"), "jsonl"), (HTML_SUFFIXES, "html"),
                                            (DOCX_SUFFIXES, "docx"), (NOTEBOOK_SUFFIXES, "notebook")) for suffix in suffixes}


def detect_format(path: str | Path) -> str:
    """The format of a file or directory, by content; `ValueError` if unknown.

    A folder is BEIR or PropSegment by the files that make one; any other
    folder has the format of its first file whose format can be told."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    if path.is_dir():
        fmt, error, files = directory_format(path), None, 0
        if fmt is None:
            for file in walk(path):
                if isinstance(file, Skip):
                    continue
                files += 1
                fmt, error = sniff(file)
                if fmt is not None:
                    break
            if not files:
                raise ValueError(f"{path}: the folder holds no files to read")
    else:
        fmt, error = sniff(path)
    if fmt is None:
        why = f"unreadable ({error})" if error else "not one of " + ", ".join(FORMATS)
        raise ValueError(f"{path}: cannot detect the corpus format: {why}")
    return fmt


def directory_format(path: Path) -> str | None:
    """beir or propsegment for a folder that is one as a whole, else None."""
    if beir.corpus_file(path) is not None:
        return "beir"
    if any(propsegment.CLUSTER_FILE.fullmatch(p.name) for p in path.iterdir()):
        return "propsegment"
    return None


def walk(directory: Path, seen: set[Path] | None = None) -> Iterator[Path | Skip]:
    """Non-hidden files under `directory`, recursively, in sorted name order;
    a Skip for what cannot be read as a file (a broken link, a FIFO or
    device, a directory met again through a link loop)."""
    seen = set() if seen is None else seen
    real = directory.resolve()
    if real in seen:
        yield Skip("unreadable", str(directory), "directory already read (a symbolic link loop)")
        return
    seen.add(real)
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            yield from walk(entry, seen)
        elif entry.is_file():
            yield entry
        elif entry.is_symlink():
            yield Skip("unreadable", str(entry), "broken symbolic link")
        else:
            yield Skip("unreadable", str(entry), "not a regular file (a FIFO, socket or device)")


def sniff(path: Path) -> tuple[str | None, str | None]:
    """(format or None, error met while reading the file's beginning or None)."""
    if propsegment.CLUSTER_FILE.fullmatch(path.name):
        return "propsegment", None
    if (named := _NAMED.get(bare_name(path).suffix.lower())) is not None:
        return named, None
    head, error = _head(path)
    fmt = _format_of_head(head)
    if fmt is None and error is not None:
        fmt = _format_of_name(path)
    return fmt, error


def _head(path: Path) -> tuple[bytes, str | None]:
    """(the file's first bytes, decompressed, or what a damaged stream
    yields before it breaks; the error that broke it or None)."""
    head = b""
    error = None
    try:
        with open_binary(path) as f:
            # Small reads keep whatever a damaged stream yields before it breaks.
            while len(head) < _SNIFF_BYTES and (chunk := f.read(8192)):
                head += chunk
    except STREAM_ERRORS as e:
        error = str(e) or type(e).__name__
    return head, error


def _format_of_head(head: bytes) -> str | None:
    """The format a file's beginning shows: PDF's magic, an HTML page's opening, XML roots for the wiki formats,
    a JSON array's telling keys for HotpotQA and PropSegment (any other
    array is a JSON document), an object a line for JSON Lines (an object
    over many lines is a JSON document); None for anything else."""
    if head.startswith(b"%PDF-"):
        return "pdf"
    start = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if start.startswith("<mediawiki") or (start.startswith("<?xml") and "<mediawiki" in start):
        return "mediawiki"
    if re.match(r"<doc\s", start):
        return "wikiextractor"
    if re.match(r"<!doctype\s+html|<html[\s>]", start, re.I):
        return "html"
    if start.startswith("["):
        if '"source_dataset"' in start and '"sentence_text"' in start:
            return "propsegment"
        if '"supporting_facts"' in start or '"context"' in start:
            return "hotpotqa"
        return "json"
    if start.startswith("{"):
        return "jsonl" if _one_object_a_line(start) else "json"
    return None


def _one_object_a_line(start: str) -> bool:
    """Whether a file opening with `start` ("{...") is JSON Lines: its first
    line is a whole object, or longer than the sniffed bytes (a long
    record); else it is one JSON document spread over lines."""
    first, newline, _ = start.partition("\n")
    if not newline:
        return True
    try:
        return isinstance(json.loads(first), dict)
    except json.JSONDecodeError:
        return False


def _format_of_name(path: Path) -> str | None:
    """A guess from the name, for files whose content cannot be read."""
    name = bare_name(path).name
    if name.endswith(".jsonl"):
        return "jsonl"
    if ".xml" in name:  # dump names go on after .xml: "...xml-p10p30302.bz2"
        return "mediawiki"
    if re.fullmatch(r"wiki_\d+", name):
        return "wikiextractor"
    return None
