"""Streamed corpus readers: files in their original formats to `Document`s.

`read_corpus` yields one record per input record, in a deterministic order: a
`Document` for what should be indexed and a `Skip` saying why for everything
else, so the indexer can count skips and a resumed build can skip the first N
records. Bad user data never raises: it becomes a `Skip`. Only a path that does
not exist or whose format cannot be detected raises `ValueError`, before any
record is read.

Formats are detected from content (compressed files are opened by their magic
bytes, whatever their name), falling back to the file name only when a
compressed file is too damaged to read its beginning. Plain text and Markdown
are the exception: they have no telling content, so their names say it
(TEXT_SUFFIXES), and a folder of notes reads without a `--format`.
"""
from __future__ import annotations

import bz2
import gzip
import html
import io
import json
import logging
import os
import re
import xml.etree.ElementTree as ET
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import mwparserfromhell
from mwparserfromhell.nodes import (
    ExternalLink,
    Heading,
    HTMLEntity,
    Node,
    Tag,
    Text,
    Wikilink,
)

from propdex.encoders.provenance import sha256_file
from propdex.encoders.text import Span, sentence_spans_from_list, split_sentences
from propdex.encoders.units import Document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Skip:
    """An input record that is not indexed, and why.

    `reason` is a slug: "empty", "invalid_utf8", "malformed_json",
    "missing_field", "truncated_bz2" (any truncated or corrupt compressed
    stream, bz2 or gzip), "malformed_xml" (one page of a MediaWiki dump),
    "too_large", "bad_id" (a lone surrogate, or more than
    MAX_ID_BYTES bytes: LMDB keys hold 511), "redirect", "namespace" or
    "unreadable" (a file that cannot be opened or parsed as a whole). `source` is
    "path:line" for line-based formats, "path#id" for records with an id, or
    the path for a whole file.
    """

    reason: str
    source: str
    detail: str = ""


Record = Document | Skip
FORMATS = ("jsonl", "beir", "hotpotqa", "propsegment", "mediawiki", "wikiextractor", "text")
# Files read as `text` by their name, whatever they begin with (a note may open with "{" or "<").
TEXT_SUFFIXES = (".txt", ".text", ".md", ".markdown", ".rst")
# LMDB keys hold at most 511 bytes, and a document's key is "id/" + its id.
MAX_ID_BYTES = 500

_CLUSTER_FILE = re.compile(r"document_clusters\.[^.]+\.json(?:\.bz2|\.gz)?")
_SNIFF_BYTES = 64 * 1024
_BZ2_MAGIC = re.compile(rb"BZh[1-9](1AY&SY|\x17rE8P\x90)")
# Errors a damaged bz2/gzip stream raises while being read.
_STREAM_ERRORS = (EOFError, OSError, zlib.error)


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


class _FileSkip(Exception):
    """A whole file cannot be read; carries the Skip to report for it."""

    def __init__(self, skip: Skip) -> None:
        super().__init__(skip.detail)
        self.skip = skip


# ---------------------------------------------------------------- public API


def detect_format(path: str | Path) -> str:
    """The format of a file or directory, by content; `ValueError` if unknown."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file or directory")
    if path.is_dir():
        fmt, error = _directory_format(path), None
        if fmt is None:
            for file in _walk(path):
                if isinstance(file, Skip):
                    continue
                fmt, error = _sniff(file)
                if fmt is not None:
                    break
    else:
        fmt, error = _sniff(path)
    if fmt is None:
        why = f"unreadable ({error})" if error else "not one of " + ", ".join(FORMATS)
        raise ValueError(f"{path}: cannot detect the corpus format: {why}")
    return fmt


def read_corpus(
    paths: Sequence[str | Path],
    format: str | None = None,
    *,
    max_chars: int = 2_000_000,
) -> Iterator[Record]:
    """Stream the records of `paths` (files or directories) in order.

    `format` forces one format for all paths; by default each path's format is
    detected. Paths are checked here, so a bad path or an undetectable format
    raises `ValueError` at the call, not halfway through a build. Texts longer
    than `max_chars` are skipped as "too_large".
    """
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
    return _read_plan(plan, format is not None, max_chars)


# ------------------------------------------------------- files and detection


def _read_plan(
    plan: list[tuple[Path, str]], forced: bool, max_chars: int
) -> Iterator[Record]:
    for path, fmt in plan:
        if path.is_file():
            yield from _read_file(path, fmt, max_chars)
        else:
            yield from _read_directory(path, fmt, forced, max_chars)


def _read_directory(path: Path, fmt: str, forced: bool, max_chars: int) -> Iterator[Record]:
    for file, file_fmt in _directory_plan(path, fmt, forced):
        if isinstance(file, Skip):
            yield file
            continue
        error = None
        if file_fmt is None:
            file_fmt, error = _sniff(file)
        if file_fmt is not None:
            yield from _read_file(file, file_fmt, max_chars)
        elif error:
            yield _broken_file(file, 0, error)
        else:
            yield Skip("unreadable", str(file), "unknown format")


def _directory_plan(path: Path, fmt: str, forced: bool) -> list[tuple[Path | Skip, str | None]]:
    """The files a directory is read from, in order, each with its format
    (None: sniffed from its content when it is read), and a Skip in place of
    an entry that cannot be read."""
    if fmt == "beir" and (path / "corpus.jsonl").is_file():
        return [(path / "corpus.jsonl", "jsonl")]
    if fmt == "propsegment":
        # Sorted names put dev before test.
        clusters = sorted(p for p in path.iterdir() if _CLUSTER_FILE.fullmatch(p.name))
        if clusters:
            return [(file, "propsegment") for file in clusters]
    return [(file, None if isinstance(file, Skip) or not forced else fmt) for file in _walk(path)]


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


def _walk(directory: Path, seen: set[Path] | None = None) -> Iterator[Path | Skip]:
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
            yield from _walk(entry, seen)
        elif entry.is_file():
            yield entry
        elif entry.is_symlink():
            yield Skip("unreadable", str(entry), "broken symbolic link")
        else:
            yield Skip("unreadable", str(entry), "not a regular file (a FIFO, socket or device)")


def _directory_format(path: Path) -> str | None:
    if (path / "corpus.jsonl").is_file():
        return "beir"
    if any(_CLUSTER_FILE.fullmatch(p.name) for p in path.iterdir()):
        return "propsegment"
    return None


def _read_file(path: Path, fmt: str, max_chars: int) -> Iterator[Record]:
    """Records of one file; a file that breaks off ends in a Skip, not an error."""
    reader = _READERS["jsonl" if fmt == "beir" else fmt]
    count = 0
    try:
        for record in reader(path, max_chars):
            count += 1
            yield record
    except _FileSkip as e:
        yield e.skip
    except ET.ParseError as e:
        yield Skip("unreadable", str(path), f"after {count} records: XML error: {e}")
    except DamagedMembers as e:
        for offset, error in e.members:
            yield Skip("truncated_bz2", str(path), f"after {count} records: the bz2 member at byte {offset} is lost ({error})")
    except _STREAM_ERRORS as e:
        yield _broken_file(path, count, str(e) or type(e).__name__)
    log.debug("%s: %d records as %s", path, count, fmt)


def _broken_file(path: Path, count: int, error: str) -> Skip:
    """The Skip for a file that broke off after `count` records."""
    reason = "truncated_bz2" if _is_compressed(path) else "unreadable"
    return Skip(reason, str(path), f"after {count} records: {error}")


def _compression(path: Path) -> str | None:
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


def _is_compressed(path: Path) -> bool:
    try:
        return _compression(path) is not None
    except OSError:
        return False


def _open_binary(path: Path) -> BinaryIO:
    """Open a file for reading bytes, decompressing bz2 and gzip transparently."""
    compression = _compression(path)
    if compression == "bz2":
        return io.BufferedReader(_Bz2Members(path))
    if compression == "gzip":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _sniff(path: Path) -> tuple[str | None, str | None]:
    """(format or None, error met while reading the file's beginning or None)."""
    if _CLUSTER_FILE.fullmatch(path.name):
        return "propsegment", None
    if _is_text_name(path):
        return "text", None
    head = b""
    error = None
    try:
        with _open_binary(path) as f:
            # Small reads keep whatever a damaged stream yields before it breaks.
            while len(head) < _SNIFF_BYTES and (chunk := f.read(8192)):
                head += chunk
    except _STREAM_ERRORS as e:
        error = str(e) or type(e).__name__
    fmt = _format_of_head(head)
    if fmt is None and error is not None:
        fmt = _format_of_name(path)
    return fmt, error


def _bare_name(path: Path) -> Path:
    """The file's name without a compression suffix: notes.md for notes.md.gz."""
    return Path(re.sub(r"\.(bz2|gz)$", "", path.name))


def _is_text_name(path: Path) -> bool:
    return _bare_name(path).suffix.lower() in TEXT_SUFFIXES


def _format_of_head(head: bytes) -> str | None:
    start = head.decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
    if start.startswith("<mediawiki") or (start.startswith("<?xml") and "<mediawiki" in start):
        return "mediawiki"
    if re.match(r"<doc\s", start):
        return "wikiextractor"
    if start.startswith("["):
        if '"source_dataset"' in start and '"sentence_text"' in start:
            return "propsegment"
        if '"supporting_facts"' in start or '"context"' in start:
            return "hotpotqa"
        return None
    if start.startswith("{"):
        return "jsonl"
    return None


def _format_of_name(path: Path) -> str | None:
    """A guess from the name, for files whose content cannot be read."""
    name = _bare_name(path).name
    if name.endswith(".jsonl"):
        return "jsonl"
    if ".xml" in name:  # dump names go on after .xml: "...xml-p10p30302.bz2"
        return "mediawiki"
    if re.fullmatch(r"wiki_\d+", name):
        return "wikiextractor"
    return None


def _document(
    doc_id: str,
    text: str,
    title: str,
    source: str,
    max_chars: int,
    sentences: Iterable[Span] | None = None,
    metadata: dict[str, Any] | None = None,
) -> Record:
    """A Document, or the Skip for an empty or oversized text or an id the
    index cannot key. Lone surrogates (JSON "\\ud800" escapes) in a text or
    title become U+FFFD, with a warning naming the record, and the document
    says so (`repairs`), for the manifest to count."""
    if not text.strip():
        return Skip("empty", source)
    if len(text) > max_chars:
        return Skip("too_large", source, f"{len(text)} characters > {max_chars}")
    if not _utf8(doc_id):
        return Skip("bad_id", source, "the id holds a lone surrogate (not Unicode text)")
    if len(doc_id.encode()) > MAX_ID_BYTES:
        return Skip("bad_id", source, f"the id is {len(doc_id.encode())} bytes long, more than {MAX_ID_BYTES}")
    repairs: tuple[str, ...] = ()
    if not (_utf8(text) and _utf8(title)):
        log.warning("%s: lone surrogates in the text or title replaced by U+FFFD", source)
        text, title, repairs = _repair(text), _repair(title), ("lone_surrogates",)
    spans = split_sentences(text) if sentences is None else sentences
    return Document(doc_id, text, title, tuple(spans), source=source, repairs=repairs, metadata=metadata or {})


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _repair(text: str) -> str:
    """Lone surrogates replaced, one U+FFFD each: offsets into the text stay valid."""
    return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)


def _load_json(path: Path) -> object:
    """A whole JSON file, decoded strictly; _FileSkip if it is not valid JSON."""
    with _open_binary(path) as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise _FileSkip(Skip("invalid_utf8", str(path), str(e))) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _FileSkip(Skip("malformed_json", str(path), str(e))) from None


# --------------------------------------------------------------------- JSONL


def _read_jsonl(path: Path, max_chars: int) -> Iterator[Record]:
    """One JSON object per line with `id`/`_id`, `text` and optional `title`."""
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue  # blank lines are not records
            yield _jsonl_record(raw, f"{path}:{lineno}", max_chars)


def _jsonl_record(raw: bytes, source: str, max_chars: int) -> Record:
    try:
        line = raw.decode("utf-8").lstrip("\ufeff")
    except UnicodeDecodeError as e:
        return Skip("invalid_utf8", source, str(e))
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        return Skip("malformed_json", source, str(e))
    if not isinstance(obj, dict):
        return Skip("malformed_json", source, f"a JSON {type(obj).__name__}, not an object")
    return record_from_dict(obj, source, max_chars)


def record_from_dict(obj: dict[str, Any], source: str, max_chars: int = 2_000_000) -> Record:
    """A JSONL record's object as a Document (or the Skip saying why not):
    `id` or `_id` (string or integer), `text`, optional `title`, and any
    other fields as metadata. The Python API's `Index.add` reads dicts here."""
    doc_id = obj.get("_id", obj.get("id"))
    # bool is an int, but a boolean id is a data error, not a number.
    if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
        return Skip("missing_field", source, "no string or integer id/_id")
    text = obj.get("text")
    if not isinstance(text, str):
        return Skip("missing_field", source, "no string text")
    title = obj.get("title")
    metadata = _metadata(obj)
    try:
        json.dumps(metadata, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        return Skip("bad_metadata", source, f"metadata must be JSON: {e}")
    return _document(str(doc_id), text, title if isinstance(title, str) else "", source, max_chars, metadata=metadata)


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    """Every field of a JSONL record besides id, text and title; a BEIR
    record's `metadata` object is opened up into its fields (the record's
    own fields win a clash)."""
    nested = obj.get("metadata")
    fields = dict(nested) if isinstance(nested, dict) else {}
    if nested is not None and not isinstance(nested, dict):
        fields["metadata"] = nested
    fields.update((k, v) for k, v in obj.items() if k not in ("_id", "id", "text", "title", "metadata"))
    return fields


# ------------------------------------------------------------------ HotpotQA


def _read_hotpotqa(path: Path, max_chars: int) -> Iterator[Record]:
    """One Document per distinct context title; the first occurrence wins.

    The text is the paragraph's sentences joined so that sentence i of the
    Document is HotpotQA's sentence i (supporting facts index them).
    """
    data = _load_json(path)
    if not isinstance(data, list):
        raise _FileSkip(Skip("missing_field", str(path), "not a list of questions"))
    seen: set[str] = set()
    for qi, question in enumerate(data):
        context = question.get("context") if isinstance(question, dict) else None
        if not isinstance(context, list):
            yield Skip("missing_field", f"{path}#question {qi}", "no context")
            continue
        for paragraph in context:
            if not _is_paragraph(paragraph):
                yield Skip("missing_field", f"{path}#question {qi}", "bad context paragraph")
                continue
            title, sentences = paragraph
            if title in seen:
                continue
            seen.add(title)
            text, spans = sentence_spans_from_list(sentences)
            yield _document(title, text, title, f"{path}#{title}", max_chars, spans)


def _is_paragraph(paragraph: object) -> bool:
    """Whether `paragraph` is [title, [sentence, ...]] with strings."""
    return (
        isinstance(paragraph, list)
        and len(paragraph) == 2
        and isinstance(paragraph[0], str)
        and bool(paragraph[0])
        and isinstance(paragraph[1], list)
        and all(isinstance(s, str) for s in paragraph[1])
    )


# --------------------------------------------------------------- PropSegment


PROPSEGMENT_WIKI = "SOURCE_WIKI_CLUSTERS"  # news clusters (SOURCE_NEWSHEAD) carry no text


def _read_propsegment(path: Path, max_chars: int) -> Iterator[Record]:
    """Documents of the Wikipedia clusters of a document_clusters.*.json file."""
    for cluster_id, doc in _propsegment_wiki_documents(_load_json(path), path):
        yield _propsegment_document(doc, cluster_id, path, max_chars)


def _propsegment_wiki_documents(data: object, path: Path) -> Iterator[tuple[object, object]]:
    """(cluster id, document record) of every Wikipedia cluster's documents."""
    if not isinstance(data, list):
        raise _FileSkip(Skip("missing_field", str(path), "not a list of clusters"))
    for cluster in data:
        if isinstance(cluster, dict) and cluster.get("source_dataset") == PROPSEGMENT_WIKI:
            for doc in cluster.get("documents") or ():
                yield cluster.get("cluster_id"), doc


@dataclass(frozen=True)
class PropSegmentSentence:
    """A sentence of a Wikipedia cluster: its text and the data's tokens."""

    cluster_id: str
    doc_id: str
    index: int
    record: dict[str, Any]  # {"sentence_text", "tokens": [{"text", "character_offset_of_token_in_sentence"}...]}

    @property
    def text(self) -> str:
        return self.record["sentence_text"]


class PropSegment:
    """PropSegment v1: the one reader of its files (document_clusters,
    propositions and relationships .{split}.json), for the index (documents,
    through `read_corpus`), the segmenter's training (segmentations) and
    eval (atomic-fact retrieval from the relationships). Files are read on
    first use, strictly (a malformed file is a ValueError naming it)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ValueError(f"{self.folder}: no PropSegment folder there")
        self._files: dict[str, object] = {}

    def file(self, name: str) -> Path:
        path = self.folder / name
        if not path.is_file():
            raise ValueError(f"{path}: missing from the PropSegment folder")
        return path

    def _json(self, name: str) -> list[Any]:
        if name not in self._files:
            try:
                data = _load_json(self.file(name))
            except _FileSkip as e:
                raise ValueError(f"{e.skip.source}: {e.skip.detail}") from None
            if not isinstance(data, list):
                raise ValueError(f"{self.folder / name}: not a JSON list of records")
            self._files[name] = data
        return self._files[name]  # type: ignore[return-value]

    def sentences(self, split: str) -> dict[tuple[str, int], PropSegmentSentence]:
        """The split's Wikipedia sentences by (document id, sentence index), in file order."""
        name = f"document_clusters.{split}.json"
        try:
            documents = list(_propsegment_wiki_documents(self._json(name), self.folder / name))
        except _FileSkip as e:
            raise ValueError(f"{e.skip.source}: {e.skip.detail}") from None
        return {
            (str(doc["document_id"]), i): PropSegmentSentence(str(cluster_id), str(doc["document_id"]), i, sent)
            for cluster_id, doc in documents for i, sent in enumerate(doc["sentences"])
        }

    def segmentations(self, split: str) -> list[dict[str, Any]]:
        """propositions.{split}.json: per sentence, the raters' segmentation responses."""
        return self._json(f"propositions.{split}.json")

    def relationships(self, split: str) -> list[dict[str, Any]]:
        """relationships.{split}.json: hypothesis/premise proposition pairs with the raters' relations."""
        return self._json(f"relationships.{split}.json")


def _propsegment_document(doc: object, cluster_id: object, path: Path, max_chars: int) -> Record:
    if not isinstance(doc, dict) or doc.get("document_id") is None:
        return Skip("missing_field", str(path), "document without document_id")
    source = f"{path}#{doc['document_id']}"
    text = doc.get("document")
    sentences = [s.get("sentence_text") if isinstance(s, dict) else None for s in doc.get("sentences") or ()]
    if not isinstance(text, str) or not all(isinstance(s, str) for s in sentences):
        return Skip("missing_field", source, "no document text or sentence_text")
    spans = _locate(text, sentences)
    if spans is None:
        # Keep the data's sentence indices valid, even if the text changes.
        log.warning("%s: sentences not found in the document text; joining them", source)
        text, spans = sentence_spans_from_list(sentences)
    return _document(str(doc["document_id"]), text, f"cluster {cluster_id}", source, max_chars, spans)


def _locate(text: str, sentences: list[str]) -> list[Span] | None:
    """Stripped spans of `sentences` found in order in `text`, or None."""
    spans: list[Span] = []
    pos = 0
    for sentence in sentences:
        stripped = sentence.strip()
        start = text.find(stripped, pos)
        if start < 0:
            return None
        pos = start + len(stripped)
        spans.append((start, pos))
    return spans


# ----------------------------------------------------------- MediaWiki dumps


def _read_mediawiki(path: Path, max_chars: int) -> Iterator[Record]:
    """Pages of a MediaWiki XML export, streamed; articles rendered to text.

    Each `<page>...</page>` is cut from the byte stream and parsed on its own
    (in XML text a literal "<page>" is escaped, so the tags are unambiguous),
    so one malformed page is one skip and the pages after it are still read;
    a page that breaks off where another begins (what a damaged member of a
    multistream dump leaves) is one skip too, and the next page is whole."""
    count = number = 0
    buffer, inside = b"", False
    with _open_binary(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            buffer += block
            while True:
                if not inside:
                    start = buffer.find(b"<page>")
                    if start < 0:
                        buffer = buffer[-len(b"<page>"):]  # a tag may straddle two blocks
                        break
                    buffer, inside, number = buffer[start:], True, number + 1
                end = buffer.find(b"</page>")
                if end < 0:
                    break
                restart = buffer.rfind(b"<page>", 1, end)
                if restart > 0:
                    # A page broken off (a lost bz2 member) runs into the next: the
                    # broken one is the skip, the next is read.
                    count += 1
                    yield Skip("malformed_xml", f"{path}#page {number}", "the page breaks off where another begins")
                    buffer, number = buffer[restart:], number + 1
                    continue
                end += len(b"</page>")
                page, buffer, inside = buffer[:end], buffer[end:], False
                try:
                    # Parsed apart from the root, the page's tags carry no namespace.
                    record = _page_record(ET.fromstring(page), "", path, max_chars)
                except ET.ParseError as e:
                    record = Skip("malformed_xml", f"{path}#page {number}", f"XML error: {e}")
                count += 1
                yield record
    if inside:
        yield Skip("unreadable", str(path), f"after {count} records: the file ends inside page {number}")


_REDIRECT_TEXT = re.compile(r"\s*#redirect", re.IGNORECASE)


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
    return _document(page_id, render_wikitext(wikitext), title, source, max_chars)


# Tags whose content is not prose.
_DROP_TAGS = frozenset(
    """ref references table gallery math chem ce timeline imagemap score graph
    mapframe maplink templatedata syntaxhighlight source pre inputbox
    categorytree includeonly hiero""".split()
)
_BLOCK_TAGS = frozenset("br hr li dt dd ul ol dl p div blockquote tr".split())
_DROP_LINK_NAMESPACES = frozenset({"file", "image", "category", "media"})
_INTERLANGUAGE = re.compile(r"[a-z]{2,3}(?:-[a-z]+)*")
# Marks a line that starts a block of its own (heading, list item) rather than
# continuing a paragraph. NUL cannot occur in XML text, so never in a dump.
_OWN_LINE = "\x00"
# Trailing sections that are lists of citations and links, not prose.
_DROP_SECTIONS = frozenset(
    {
        "references", "notes", "notes and references", "footnotes", "citations",
        "sources", "bibliography", "further reading", "see also", "external links",
    }
)


def render_wikitext(wikitext: str) -> str:
    """Plain prose from wikitext: link text kept; templates, refs, tables,
    files, categories and comments dropped; headings on their own line."""
    out: list[str] = []
    # Bold/italic quotes are removed in _clean: parsing them into tags is slow.
    _render(mwparserfromhell.parse(_strip_dropped(wikitext), skip_style_tags=True).nodes, out)
    return _clean("".join(out))


_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
_DROPPED_ELEMENT = re.compile(
    rf"<({'|'.join(sorted(_DROP_TAGS))})\b[^>]*?/>|<({'|'.join(sorted(_DROP_TAGS))})\b[^>]*>.*?</\2\s*>",
    re.DOTALL | re.IGNORECASE,
)
_TEMPLATE_BRACES = re.compile(r"(?P<open>\{\{)|\}\}")
_TABLE_BRACES = re.compile(r"^[ \t]*(?:(?P<open>\{\|)|\|\})", re.MULTILINE)


def _strip_dropped(wikitext: str) -> str:
    """Remove comments, non-prose elements, templates and tables before parsing.

    mwparserfromhell builds a Python node for everything inside templates and
    refs, which is most of the cost of parsing an article; what is removed
    here would be dropped from the output anyway.
    """
    text = _COMMENT.sub("", wikitext)
    text = _DROPPED_ELEMENT.sub("", text)
    text = _strip_balanced(text, _TEMPLATE_BRACES)
    return _strip_balanced(text, _TABLE_BRACES)


def _strip_balanced(text: str, braces: re.Pattern[str]) -> str:
    """Remove outermost balanced open...close regions of `braces` (an "open"
    group marks openers). An opener never closed is left for the parser."""
    out: list[str] = []
    depth = 0
    kept_until = 0
    region_start = 0
    for m in braces.finditer(text):
        if m.group("open"):
            if depth == 0:
                region_start = m.start()
            depth += 1
        elif depth:
            depth -= 1
            if depth == 0:
                out.append(text[kept_until:region_start])
                kept_until = m.end()
    out.append(text[kept_until:])
    return "".join(out)


def _render(nodes: Iterable[Node], out: list[str]) -> None:
    dropping_level = 0  # inside a dropped section of this heading level
    for node in nodes:
        if isinstance(node, Heading):
            if dropping_level and node.level > dropping_level:
                continue
            heading = _plain(node.title.nodes).strip()
            dropping_level = node.level if heading.lower() in _DROP_SECTIONS else 0
            if not dropping_level:
                out.append(f"\n\n{_OWN_LINE}{heading}\n")
        elif dropping_level:
            continue
        elif isinstance(node, Text):
            out.append(node.value)
        elif isinstance(node, Wikilink):
            _render_link(node, out)
        elif isinstance(node, ExternalLink):
            if node.title is not None:  # a bare URL is not prose
                _render(node.title.nodes, out)
        elif isinstance(node, Tag):
            _render_tag(node, out)
        elif isinstance(node, HTMLEntity):
            out.append(node.normalize())
        # Templates, arguments and comments are dropped.


def _plain(nodes: Iterable[Node]) -> str:
    out: list[str] = []
    _render(nodes, out)
    return "".join(out)


def _render_link(link: Wikilink, out: list[str]) -> None:
    title = str(link.title).strip()
    prefix, colon, _ = title.partition(":")
    prefix = prefix.strip().lower()
    if colon and (prefix in _DROP_LINK_NAMESPACES or (link.text is None and _INTERLANGUAGE.fullmatch(prefix))):
        return
    if link.text is not None and str(link.text).strip():
        _render(link.text.nodes, out)
    else:
        out.append(_plain(link.title.nodes).strip().lstrip(":"))


def _render_tag(tag: Tag, out: list[str]) -> None:
    name = str(tag.tag).strip().lower()
    if name in _DROP_TAGS:
        return
    if name in _BLOCK_TAGS or tag.wiki_markup:  # list items, <br>, <p>...
        # Wiki list markup already starts a line, except ";term:definition".
        at_line_start = not out or out[-1].endswith("\n")
        out.append(_OWN_LINE if at_line_start else "\n" + _OWN_LINE)
    if tag.contents is not None:
        _render(tag.contents.nodes, out)


_MAGIC_WORD = re.compile(r"__[A-Z]+__")
_STYLE_QUOTES = re.compile(r"'{2,}")
_SPACES = re.compile(r"[ \t\u00a0\u2009\u200b]+")
_EMPTY_PARENS = re.compile(r"\([\s,;:]*\)")
_SPACE_BEFORE_PUNCT = re.compile(r" +(?=[,.;:!?)])")
# "( ; born 1947" once a pronunciation template is gone.
_PUNCT_AFTER_OPEN = re.compile(r"\([\s,;:]+")
_LINE_WITH_WORDS = re.compile(r"\w")


def _clean(text: str) -> str:
    """Tidy what dropped markup leaves behind: stray spaces and quotes, empty
    parentheses, lines without words. A single newline inside a paragraph is
    a space, as MediaWiki renders it; at most one blank line separates blocks."""
    text = _STYLE_QUOTES.sub("", _MAGIC_WORD.sub("", text))

    def lines() -> Iterator[tuple[str, bool, bool]]:
        for raw in text.splitlines():
            own_line = raw.lstrip().startswith(_OWN_LINE)
            line = _SPACES.sub(" ", raw.replace(_OWN_LINE, ""))
            line = _PUNCT_AFTER_OPEN.sub("(", _EMPTY_PARENS.sub("", line))
            yield _SPACE_BEFORE_PUNCT.sub("", line).strip(), own_line, own_line

    return _paragraphs(lines())


def _paragraphs(lines: Iterable[tuple[str, bool, bool]]) -> str:
    """Lines, each with whether it starts and whether it ends a block of its
    own, to paragraphs, one a line: a line joins the one before unless it
    starts a block or that one ended one; a line without a word ends a
    paragraph and is dropped, so one blank line at most separates blocks."""
    out: list[str] = []
    joinable = False  # whether the last line is paragraph text a line may continue
    for line, starts, ends in lines:
        if not _LINE_WITH_WORDS.search(line):
            if out and out[-1]:
                out.append("")
            joinable = False
            continue
        if joinable and not starts:
            out[-1] += " " + line
        else:
            out.append(line)
        joinable = not ends
    return "\n".join(out).strip()


# ------------------------------------------------------------ WikiExtractor


_DOC_START = re.compile(r"<doc\s+([^>]*)>\s*$")
_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')


def _read_wikiextractor(path: Path, max_chars: int) -> Iterator[Record]:
    """`<doc id url title>` ... `</doc>` blocks of WikiExtractor output."""
    attrs: dict[str, str] | None = None  # of the open <doc>, None outside one
    body: list[str] = []
    bad_line: str | None = None  # first decoding error inside the open <doc>
    with _open_binary(path) as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                bad_line = bad_line or f"line {lineno}: {e}"
                continue
            start = _DOC_START.match(line)
            if start:
                if attrs is not None:
                    yield Skip("unreadable", _doc_source(path, attrs), "<doc> without </doc>")
                attrs = {k: html.unescape(v) for k, v in _ATTRIBUTE.findall(start.group(1))}
                body, bad_line = [], None
            elif line.strip() == "</doc>" and attrs is not None:
                yield _wikiextractor_record(attrs, body, bad_line, path, max_chars)
                attrs = None
            elif attrs is not None:
                body.append(line)
    if attrs is not None:
        yield Skip("unreadable", _doc_source(path, attrs), "<doc> without </doc>")


def _doc_source(path: Path, attrs: dict[str, str]) -> str:
    return f"{path}#{attrs.get('id', '?')}"


def _wikiextractor_record(
    attrs: dict[str, str], body: list[str], bad_line: str | None, path: Path, max_chars: int
) -> Record:
    source = _doc_source(path, attrs)
    if bad_line is not None:
        return Skip("invalid_utf8", source, bad_line)
    if not attrs.get("id"):
        return Skip("missing_field", source, "<doc> without id")
    title = attrs.get("title", "")
    # WikiExtractor repeats the title (HTML-escaped) as the first body line.
    if body and html.unescape(body[0]).strip() == title.strip():
        body = body[1:]
    extra = {k: v for k, v in attrs.items() if k not in ("id", "title")}  # url, revid
    return _document(attrs["id"], "".join(body).strip(), title, source, max_chars, metadata=extra)


# ------------------------------------------------------ plain text and Markdown


_MARKUP_SUFFIXES = (".md", ".markdown", ".rst")
_FRONT_MATTER = re.compile(r"---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|$)", re.S)
_FRONT_TITLE = re.compile(r"^title:[ \t]*(.*?)[ \t]*$", re.M)
_ATX_HEADING = re.compile(r"[ \t]{0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_UNDERLINE = re.compile(r"[ \t]*(?:=+|-+|~+|\^+|\*+|#+)[ \t]*$")
# Lines of lightweight markup that stand alone: headings, list items, quotes, table rows.
_BLOCK_START = re.compile(r"[ \t]*(?:#{1,6}[ \t]|[-*+][ \t]|\d{1,9}[.)][ \t]|>|\|)")
_FENCE = re.compile(r"[ \t]*(?:```|~~~)")
_IMAGE_OR_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_WIKILINK = re.compile(r"\[\[(?:[^\]|\n]*\|)?([^\]|\n]*)\]\]")
# A plain-text line at least this long that does not end a sentence was wrapped, not ended.
_WRAP_WIDTH = 40


def _read_text(path: Path, max_chars: int) -> Iterator[Record]:
    yield _text_record(path, max_chars)


def _text_record(path: Path, max_chars: int) -> Record:
    """One Document per file: a note, a README, a chapter (TEXT_SUFFIXES).

    The id is the file's absolute path, so a file keeps its id however the
    command line names it, and `propdex add --update` replaces it. The title
    is front matter's `title:`, else a heading on the first line (`# Title`,
    or a line underlined with `=` or `-`), else the file's name without its
    suffix. Sentences end at line breaks, so lines are unwrapped first: in
    Markdown and reStructuredText a paragraph's lines join (as they render),
    except lines that stand alone (headings, list items, quotes, table rows,
    code); in plain text a line joins the one before only when that one is
    long and ends without punctuation, so hard-wrapped prose joins up and a
    list of short lines stays a list. Links keep their text, not their URL.
    """
    source = str(path)
    with _open_binary(path) as f:
        data = f.read(4 * max_chars + 1)  # UTF-8 spends at most 4 bytes a character
    if len(data) > 4 * max_chars:
        return Skip("too_large", source, f"more than {4 * max_chars} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return Skip("invalid_utf8", source, str(e))
    markup = _bare_name(path).suffix.lower() in _MARKUP_SUFFIXES
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    title, lines = _text_title(lines, markup)
    body = _unwrap(lines, markup)
    if markup:
        body = _WIKILINK.sub(r"\1", _IMAGE_OR_LINK.sub(r"\1", body))
    return _document(os.path.abspath(path), body, title or _bare_name(path).stem, source, max_chars)


def _text_title(lines: list[str], markup: bool) -> tuple[str, list[str]]:
    """(the title a file gives itself or "", the lines after it)."""
    if markup and lines and lines[0].rstrip() == "---" and (front := _FRONT_MATTER.match(text := "\n".join(lines))):
        lines = text[front.end():].split("\n")
        if (title := _FRONT_TITLE.search(front.group(1) or "")) and title.group(1).strip("\"'"):
            return title.group(1).strip("\"'"), lines
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        return "", lines
    if markup and (heading := _ATX_HEADING.fullmatch(lines[first])) and heading.group(1):
        return heading.group(1), lines[first + 1:]
    following = lines[first + 1] if first + 1 < len(lines) else ""
    if following.strip() and _UNDERLINE.fullmatch(following) and following.strip()[0] in "=-":
        return lines[first].strip(), lines[first + 2:]
    return "", lines


def _unwrap(lines: list[str], markup: bool) -> str:
    """Paragraphs on one line each (`_paragraphs`): in markup, every line
    but a heading, list item, quote, table row or line of code continues
    its paragraph; in plain text, a line continues only a long one that
    does not end a sentence. Code fences themselves are dropped."""
    def marked() -> Iterator[tuple[str, bool, bool]]:
        fenced = False
        for raw in lines:
            line = _SPACES.sub(" ", raw).strip()
            if _FENCE.match(raw):
                fenced = not fenced
                yield "", True, True  # a fence ends the paragraph before it
            elif fenced:
                yield line, True, True
            elif heading := _ATX_HEADING.fullmatch(raw):
                yield heading.group(1), True, True
            else:
                yield line, _BLOCK_START.match(raw) is not None, False  # a list item or quote goes on in its next line

    def plain() -> Iterator[tuple[str, bool, bool]]:
        for raw in lines:
            line = _SPACES.sub(" ", raw).strip()
            yield line, False, len(line) < _WRAP_WIDTH or line[-1:] in (".", "!", "?", ":", ";")

    return _paragraphs(marked() if markup else plain())


_READERS = {
    "jsonl": _read_jsonl,
    "hotpotqa": _read_hotpotqa,
    "propsegment": _read_propsegment,
    "mediawiki": _read_mediawiki,
    "wikiextractor": _read_wikiextractor,
    "text": _read_text,
}
