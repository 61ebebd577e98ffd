"""manifest.json: the commit point of an index, written aside and renamed into place.

A shard exists for readers only once a manifest listing it has been renamed
over the previous one, like a Lucene commit: a build killed at any moment
leaves the last manifest, and everything it lists, intact.

Two views of one file:
- `Manifest` (typed) is what the indexer reads and writes, through
  `Manifest.read` and `Manifest.write` only.
- `read_manifest` is the raw view, a plain dict, for readers outside the
  indexer (the searcher, `propdex info`, eval); it stays the parsed JSON.

The JSON stays what it has always been, byte for byte: a manifest read and
written again is the same file, because older indexes must keep opening and
a commit must not rewrite what it did not change. So every record keeps the
keys it does not know, and the order its keys were first set in (the order
a plain dict would have).
"""
from __future__ import annotations

import json
import os
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum, StrEnum
from pathlib import Path
from typing import Any, ClassVar, TypeVar

# Re-exported: the index records the same provenance as the trained weights.
from propdex.encoders.provenance import library_versions, sha256_file  # noqa: F401

__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "AnnIndex", "Backbone", "Counts", "Lexical", "Manifest", "Merged",
           "Part", "Record", "Settings", "Shard", "Status", "Timings", "library_versions", "read_manifest",
           "sha256_file", "write_manifest"]

MANIFEST = "manifest.json"
FORMAT = "propdex-index"
FORMAT_VERSION = 3
# Version 2 adds shards of standalone codes (`ann.CODES_FILE`), which a
# reader of version 1 would take for FAISS files; version 3, codes rows that
# end in their scale (`AnnIndex.scaled_codes`), which a reader of version 2
# would take for damaged codes. A manifest says 2 or 3 only once it lists
# such a shard, so every other index stays readable by the versions before.


class Status(StrEnum):
    """Where a build stands; each phase commits the next status, so a re-run
    resumes at the phase a killed build was in."""

    ENCODING = "encoding"  # shards are encoded and committed one at a time
    ENCODED = "encoded"  # a part of a build, stopped after encoding: `propdex merge` goes on
    TRAINING = "training"  # every shard is encoded: the ANN index is trained next
    ADDING = "adding"  # each shard gets its ANN index file
    LEXICAL = "lexical"  # BM25 is built over every document
    COMPLETE = "complete"  # searchable; add/delete/compact commit new generations


def read_manifest(directory: Path) -> dict[str, Any]:
    """The raw view: the manifest as parsed JSON, checked to be a propdex
    manifest this version can read. Callers outside the indexer index it as
    a dict; the indexer itself reads `Manifest.read`."""
    path = Path(directory) / MANIFEST
    if not Path(directory).is_dir():
        raise ValueError(f"no index at {directory}: directory does not exist")
    if not path.is_file():
        raise ValueError(f"no index at {directory}: {MANIFEST} missing (not a propdex index, or its build never committed a shard)")
    try:
        manifest = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ValueError(f"{path} is not valid JSON: the index is damaged") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ValueError(f"{path} is not a propdex manifest")
    if manifest.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"index format version {manifest['version']} is newer than this propdex supports ({FORMAT_VERSION})")
    return manifest


def write_manifest(directory: Path, manifest: dict[str, Any]) -> None:
    """Commit `manifest` (raw): written aside, fsynced, renamed over the last
    one and the directory fsynced, so a crash leaves the old or the new one."""
    tmp = Path(directory) / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, Path(directory) / MANIFEST)
    _fsync_dir(Path(directory))


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- typed records that keep their JSON as it was -----------------------------------

R = TypeVar("R", bound="Record")


def later(default: Any = None) -> Any:
    """A field written only once something sets it (a key a plain dict would
    gain later): until then it reads as `default` and is not in the JSON."""
    return field(default=default, metadata={"later": True})


def nested(kind: type, *, many: bool = False, later: bool = False) -> Any:
    """A field holding a record (or a list of them: `many`)."""
    meta = {"record": kind, "many": many, "later": later}
    return field(default_factory=list, metadata=meta) if many and not later else field(default=None, metadata=meta)


class Record:
    """A JSON object with typed fields. It remembers which keys are present
    and in what order (as read, then as first set), and the keys it does not
    know, so `to_json` gives back exactly what `from_json` was given plus
    what was set since."""

    JSON_NAMES: ClassVar[dict[str, str]] = {}  # field -> JSON key, where a key is no Python name

    def __post_init__(self) -> None:
        object.__setattr__(self, "_extra", {})
        object.__setattr__(self, "_keys", [self._key(f.name) for f in fields(self) if not f.metadata.get("later")])

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        keys = self.__dict__.get("_keys")
        if keys is not None and name in self._field_names() and self._key(name) not in keys:
            keys.append(self._key(name))

    def __eq__(self, other: object) -> bool:
        """Equal as JSON objects (key order aside), as the dicts were."""
        return isinstance(other, Record) and self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    @classmethod
    def _key(cls, name: str) -> str:
        return cls.JSON_NAMES.get(name, name)

    @classmethod
    def _field_names(cls) -> set[str]:
        return {f.name for f in fields(cls)}

    def has(self, name: str) -> bool:
        """Is the key present (even as null)?"""
        return self._key(name) in self._keys

    def pop(self, name: str, default: Any = None) -> Any:
        """Remove the key, returning its value (`default` where absent); set again, it goes last."""
        if not self.has(name):
            return default
        value = getattr(self, name)
        self._keys.remove(self._key(name))
        default_value = next(f for f in fields(self) if f.name == name).default
        object.__setattr__(self, name, None if default_value is MISSING else default_value)
        return value

    @classmethod
    def from_json(cls: type[R], raw: dict[str, Any]) -> R:
        known = {cls._key(f.name): f for f in fields(cls)}
        record = cls(**{f.name: _decode(f, raw[key]) for key, f in known.items() if key in raw})
        record._keys[:] = list(raw)
        record._extra.update({k: v for k, v in raw.items() if k not in known})
        return record

    def to_json(self) -> dict[str, Any]:
        names = {self._key(f.name): f.name for f in fields(self)}
        return {key: _encode(getattr(self, names[key])) if key in names else self._extra[key] for key in self._keys}

    def copy(self: R) -> R:
        return type(self).from_json(self.to_json())


def _decode(f: Any, value: Any) -> Any:
    kind = f.metadata.get("record")
    if value is None:
        return value
    if "enum" in f.metadata:
        return f.metadata["enum"](value)
    if kind is None:
        return value
    return [kind.from_json(v) for v in value] if f.metadata["many"] else kind.from_json(value)


def _encode(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, Enum):
        return value.value
    return value


@dataclass(eq=False)
class Backbone(Record):
    name: str | None = None
    source: str | None = None
    weights_sha256: str | None = None
    runtime: str | None = None


@dataclass(eq=False)
class Settings(Record):
    """How the index is laid out (`settings.IndexSettings`, as recorded)."""

    shard_docs: int | None = None
    factory: str | None = None
    backend: str | None = None
    bm25: bool | None = None
    store: str | None = None
    code_bytes: int | None = None
    bits: int | None = later()
    hashing: str | None = later()
    training: str | None = later()


@dataclass(eq=False)
class AnnIndex(Record):
    """The trained ANN index every shard's index file is filled from."""

    backend: str | None = None
    factory: str | None = None
    metric: str | None = None
    trained: str | None = None  # file name (None: HNSW trains nothing)
    vector_norm: float | None = later()
    scaled_codes: bool | None = later()  # standalone codes rows end in their scale (codes.scaled): set where vector_norm is
    trained_sha256: str | None = later()
    trained_bytes: int | None = later()
    trained_on: int | None = later()
    train_s: float | None = later()
    training: str | None = later()  # full or quick (factory.training)
    hashing: dict[str, Any] | None = later()  # store="binary": {method, bits, weights_sha256}
    retrained: dict[str, Any] | None = later()  # re-trained at a compact: {from (the factory before), generation}


@dataclass(eq=False)
class Shard(Record):
    """One shard: its LMDB store, float16 copy, ANN index file and tombstones."""

    name: str = ""
    inputs: int = 0  # input records consumed (a resumed build skips them)
    docs: int = 0
    sentences: int = 0
    vectors: int = 0
    passages: int | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    skipped_examples: dict[str, list[str]] = field(default_factory=dict)
    repaired: dict[str, int] | None = None
    lmdb_sha256: str | None = None
    lmdb_bytes: int | None = None
    stored: str | None = None
    stored_sha256: str | None = None
    stored_bytes: int | None = None
    encode_s: float | None = None
    index: str | None = None
    index_sha256: str | None = None
    index_bytes: int | None = later()
    add_s: float | None = later()
    deleted: str | None = later()  # tombstone file: ordinals of deleted documents
    deleted_docs: int | None = later()
    deleted_sha256: str | None = later()
    deleted_bytes: int | None = later()
    bm25: str | None = later()  # the shard's BM25 segment (lexical.Segment), a directory inside it
    bm25_files: dict[str, str] | None = later()  # the segment's files, each with its sha256

    @property
    def live_docs(self) -> int:
        return self.docs - (self.deleted_docs or 0)


@dataclass(eq=False)
class Counts(Record):
    inputs: int = 0
    documents: int = 0
    deleted: int = 0
    sentences: int = 0
    vectors: int = 0
    skipped: int = 0


@dataclass(eq=False)
class Timings(Record):
    encode_s: float = 0.0
    train_s: float = 0.0
    add_s: float = 0.0
    peak_rss_mb: float = 0.0  # the largest resident set any run of this build reached


@dataclass(eq=False)
class Part(Record):
    """This index is part `id` of `of` of one build (`--num-shards/--shard-id`)."""

    id: int = 0
    of: int = 1


@dataclass(eq=False)
class Merged(Record):
    """A part's shard a merge has committed, and the name it has here."""

    JSON_NAMES: ClassVar[dict[str, str]] = {"as_": "as"}
    part: int = 0
    shard: str = ""
    as_: str = ""


@dataclass(eq=False)
class Lexical(Record):
    """The BM25 index: live documents, parameters (kept as the lexical module
    reports them), the build's seconds, and how many shards hold a segment
    (`segments`). An index from before segments has instead one directory
    (`dir`) and each of its files' sha256."""

    dir: str = ""
    documents: int = 0
    files: dict[str, str] = field(default_factory=dict)
    build_s: float | None = None
    segments: int | None = later()

    @classmethod
    def of(cls, dir: str, documents: int, params: dict[str, Any], files: dict[str, str], build_s: float) -> "Lexical":
        return cls.from_json({"dir": dir, "documents": documents, **params, "files": files, "build_s": build_s})


@dataclass(eq=False)
class Manifest(Record):
    format: str = FORMAT
    version: int = 1  # raised by the commit that lists the first standalone codes (2), or scaled ones (3)
    status: Status = field(default=Status.ENCODING, metadata={"enum": Status})
    encoder: dict[str, Any] = field(default_factory=dict)  # the encoder's own config
    backbone: Backbone | None = nested(Backbone)
    settings: Settings | None = nested(Settings)
    inputs: dict[str, Any] = field(default_factory=dict)  # what a build reads: paths, format, file fingerprints
    index: AnnIndex | None = nested(AnnIndex)
    shards: list[Shard] = nested(Shard, many=True)
    part: Part | None = nested(Part, later=True)
    generation: int | None = later()  # a living index's commits, counted
    merged: list[Merged] | None = nested(Merged, many=True, later=True)
    counts: Counts | None = nested(Counts, later=True)
    skipped: dict[str, int] | None = later()
    repaired: dict[str, int] | None = later()  # documents a reader changed (lone surrogates -> U+FFFD)
    timings: Timings | None = nested(Timings, later=True)
    versions: dict[str, str] | None = later()
    updated: str | None = later()
    lexical: Lexical | None = nested(Lexical, later=True)

    @classmethod
    def read(cls, directory: Path) -> "Manifest":
        return cls.from_json(read_manifest(directory))

    def write(self, directory: Path) -> None:
        write_manifest(directory, self.to_json())

    def shard(self, name: str) -> Shard:
        return next(s for s in self.shards if s.name == name)
