"""One shard's store: an LMDB environment of documents and unit records, and
its vectors as one contiguous float16 array.

A shard holds documents 0..n-1 (ordinals local to the shard) and their vectors
0..V-1 in document order, so vector ids are the FAISS ids of the shard's index
and `offsets[d]:offsets[d+1]` are document d's vectors.

`vectors.f16` (.npy, float16 (V, dim)) is memory-mapped: stage 2 gathers a
candidate's rows without a copy or a read transaction. An index built with
`store="codes"` drops it once the shard's ANN index is committed; stage 2
then decodes the index's codes (`decoder`: over IVF, rows of the shard's
memory-mapped standalone codes, `ann.CODES_FILE`). Indexes written before this file
existed keep each document's vectors under `vec/<ord>` in LMDB; they are read
as they are. LMDB keys:

    doc/<ord>    JSON {id, title, text, sentences, metadata}
    sen/<ord>    int32 (n, 2): first and last sentence of each unit
    unit/<ord>   int32 packed [kind, nspans, a1, b1, ...] per unit
    id/<doc id>  ordinal, for lookups by id
    meta/<field>\0<value>  int32 ordinals of the documents whose metadata
                 field holds that value (JSON-canonical; each element of a
                 list), for `where=` filters
    offsets      int64 (n_docs + 1): vector id -> document (the vid -> unit map)
    info         JSON {docs, vectors, dim, sentences}
"""
from __future__ import annotations

import datetime
import json
import os
import struct
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lmdb
import numpy as np

from propdex.encoders.units import Document, Encoded, Kind, Unit

from . import mapped, records

LMDB_DIR = "meta.lmdb"
VECTORS = "vectors.f16"


def _key(prefix: bytes, ordinal: int) -> bytes:
    return prefix + struct.pack(">I", ordinal)


Scalar = str | int | float | bool | None


def metadata_key(field: str, value: Scalar) -> bytes:
    """The LMDB key listing the documents whose `field` holds `value`.
    Integral floats key as integers: 2021.0 finds 2021, as == does."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return b"meta/" + field.encode() + b"\0" + json.dumps(value, ensure_ascii=False).encode()


def plain(value: Any) -> Any:
    """`value` as JSON holds it: numpy scalars and arrays as Python numbers
    and lists, dates and times as ISO 8601 strings (which sort as they do),
    inside lists, tuples and dicts too; anything else as it is. Metadata
    from pandas or numpy is then stored, and filtered on, like the same
    values read from JSONL."""
    if isinstance(value, np.generic | np.ndarray):
        return plain(value.tolist())
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def metadata_values(value: object) -> list[Scalar]:
    """The values a metadata field is found by: a scalar, or each scalar of a list."""
    items = value if isinstance(value, list) else [value]
    return [v for v in items if v is None or isinstance(v, (str, int, float, bool))]


def pack_units(units: Sequence[Unit]) -> tuple[np.ndarray, np.ndarray]:
    sentences = np.array([(u.sentence, u.last_sentence) for u in units], dtype=np.int32).reshape(-1, 2)
    packed: list[int] = []
    for u in units:
        packed += [int(u.kind), len(u.spans)]
        for a, b in u.spans:
            packed += [a, b]
    return sentences, np.array(packed, dtype=np.int32)


def unpack_units(doc_id: str, sentences: np.ndarray, packed: np.ndarray, which: Sequence[int] | None = None) -> list[Unit]:
    """The units of a document, or only those at positions `which` (in that order)."""
    width = _record_width(packed, len(sentences))
    if width:  # records of one size (a span each): the wanted rows in one gather
        at = slice(None) if which is None else np.asarray(which, dtype=np.int64)
        ranges, records = sentences[at].tolist(), packed.reshape(-1, width)[at].tolist()
        return [Unit(doc_id, first, tuple(zip(r[2::2], r[3::2])), Kind(r[0]), last) for (first, last), r in zip(ranges, records)]
    starts = _record_starts(packed, len(sentences))
    out = []
    for j in range(len(sentences)) if which is None else which:
        s = int(starts[j])
        kind, n = packed[s : s + 2].tolist()
        spans = packed[s + 2 : s + 2 + 2 * n].tolist()
        first, last = sentences[j].tolist()
        out.append(Unit(doc_id, first, tuple(zip(spans[::2], spans[1::2])), Kind(kind), last))
    return out


def _record_starts(packed: np.ndarray, n: int) -> np.ndarray:
    """Where each of the `n` unit records (kind, span count, spans) starts in
    `packed`, by walking their headers: records of different lengths."""
    flat = packed.tolist()
    starts, i = [], 0
    for _ in range(n):  # walk the headers
        starts.append(i)
        i += 2 + 2 * flat[i + 1]
    return np.asarray(starts, dtype=np.int64)


def _record_width(packed: np.ndarray, n: int) -> int:
    """The length of every one of the `n` unit records in `packed` where all
    have the same number of spans (a token, a run of tokens: one each), else
    0: then a record is found by arithmetic, since a hit reads a few units
    of a document of thousands."""
    if n and len(packed) % n == 0:
        width = len(packed) // n
        if width >= 2 and width % 2 == 0 and (packed[1::width] == (width - 2) // 2).all():
            return width
    return 0


@dataclass
class StoredDoc:
    ordinal: int
    doc: Document
    vectors: np.ndarray  # float16 (n, dim)
    unit_sentences: np.ndarray  # int32 (n, 2)


@dataclass(frozen=True)
class Rows:
    """The array a shard writer appends each vector's row to: the float16
    copy by default; a binary shard merged from others takes its codes'
    rows as they are (they cannot be encoded again), in its index file."""

    file: str
    width: int
    dtype: str


class ShardWriter:
    """A shard store written a batch of documents at a time, so that a
    shard's vectors and unit records are never in memory all at once: each
    `add` commits its documents to LMDB and appends their rows to the float16
    array (or the `rows` given), and `finish` writes what needs the whole
    shard (offsets, info, the metadata postings, the array's final shape),
    then syncs.

    The shard is whole only after `finish`; the caller writes it in a fresh
    directory aside (`<name>.tmp`) and renames it into place, so a killed
    build never leaves a shard half-written where a manifest could list it."""

    def __init__(self, path: Path, dim: int, rows: Rows | None = None) -> None:
        path.mkdir(parents=True)
        self.path, self.dim = path, dim
        self.env = lmdb.open(str(path / LMDB_DIR), map_size=64 << 20, subdir=True, lock=False)
        self.offsets = [0]
        self.sentences = 0
        self.by_value: dict[bytes, list[int]] = {}
        rows = rows or Rows(VECTORS, dim, "<f2")
        self.vectors = RowWriter(path / rows.file, rows.width, rows.dtype)

    def add(self, docs: Sequence[Document], encoded: Sequence[Encoded]) -> None:
        self._reserve(sum(len(d.text) * 4 + 8 * len(json.dumps(dict(d.metadata), ensure_ascii=False)) + e.vectors.shape[0] * 64
                          for d, e in zip(docs, encoded)))
        with self.env.begin(write=True) as txn:
            for doc, enc in zip(docs, encoded):
                i = len(self.offsets) - 1
                for field, value in doc.metadata.items():
                    for v in dict.fromkeys(metadata_values(value)):
                        self.by_value.setdefault(metadata_key(field, v), []).append(i)
                txn.put(_key(b"doc/", i), records.record(doc))
                sentences, packed = pack_units(enc.units)
                txn.put(_key(b"sen/", i), sentences.tobytes())
                txn.put(_key(b"unit/", i), packed.tobytes())
                txn.put(b"id/" + doc.id.encode(), struct.pack(">I", i))
                self.offsets.append(self.offsets[-1] + len(enc.units))
                self.sentences += len(doc.sentences)
                self.vectors.append(enc.vectors)

    def finish(self) -> dict:
        offsets = np.asarray(self.offsets, dtype=np.int64)
        info = {"docs": len(offsets) - 1, "vectors": int(offsets[-1]), "dim": self.dim, "sentences": self.sentences}
        self._reserve(offsets.nbytes + 8 * sum(len(k) + 4 * len(v) for k, v in self.by_value.items()))
        with self.env.begin(write=True) as txn:
            for key, ordinals in self.by_value.items():
                txn.put(key, np.array(ordinals, dtype=np.int32).tobytes())
            txn.put(b"offsets", offsets.tobytes())
            txn.put(b"info", json.dumps(info).encode())
        self.env.sync(True)
        self.env.close()
        self.vectors.finish()
        return info

    def close(self) -> None:
        """Release the files of a writer that will not finish (its directory is the caller's to remove)."""
        if self.vectors.close():
            self.env.close()

    def _reserve(self, payload: int) -> None:
        """Grow the LMDB map (with no transaction open) so `payload` bytes fit twice over."""
        info, stat = self.env.info(), self.env.stat()
        used = (info["last_pgno"] + 1) * stat["psize"]
        if used + 2 * payload + (16 << 20) > info["map_size"]:
            self.env.set_mapsize(2 * (used + 2 * payload) + (64 << 20))


class RowWriter:
    """A .npy array of `width` columns written a block of rows at a time
    (a shard's float16 copy, its codes): the header is rewritten with the
    row count by `finish`, which syncs. Until then the file is not a valid
    array of its rows, which is why its directory is written aside."""

    HEADER_BYTES = 128  # a .npy v1.0 header of fixed length, so finish() rewrites it in place

    def __init__(self, path: Path, width: int, dtype: str) -> None:
        self.width, self.dtype, self.rows = width, np.dtype(dtype), 0
        self.file = open(path, "wb")
        self.file.write(self._header())

    def append(self, rows: np.ndarray) -> None:
        if rows.size == 0:
            return
        if rows.ndim != 2 or rows.shape[1] != self.width:
            raise ValueError(f"rows of shape {rows.shape} appended to an array of {self.width} columns")
        self.file.write(np.ascontiguousarray(rows, dtype=self.dtype).tobytes())
        self.rows += len(rows)

    def finish(self) -> int:
        """Close the array; returns its row count."""
        self.file.seek(0)
        self.file.write(self._header())
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        return self.rows

    def close(self) -> bool:
        """Release the file of a writer that will not finish; whether it was still open."""
        if self.file.closed:
            return False
        self.file.close()
        return True

    def _header(self) -> bytes:
        body = repr({"descr": self.dtype.str, "fortran_order": False, "shape": (self.rows, self.width)})
        body = body.ljust(self.HEADER_BYTES - 11) + "\n"  # magic 6 + version 2 + length 2 + body + newline
        return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body.encode("latin1")


def write_deleted(path: Path, ordinals: Sequence[int]) -> None:
    """A shard's tombstones: the sorted ordinals of its deleted documents
    (written aside by the caller and committed by the manifest)."""
    with open(path, "wb") as f:
        np.save(f, np.unique(np.asarray(ordinals, dtype=np.int32)))
        f.flush()
        os.fsync(f.fileno())


def read_deleted(path: Path) -> np.ndarray:
    return np.load(path, allow_pickle=False).astype(np.int32)


# LMDB refuses a second open of one environment in a process, so the stores
# of one shard (a writer's and a searcher's, two searchers') share it.
_ENVS: dict[str, list] = {}  # resolved path -> [environment, users]
_ENVS_LOCK = threading.Lock()


def _open_env(path: Path) -> lmdb.Environment:
    key = str((path / LMDB_DIR).resolve())
    with _ENVS_LOCK:
        if key not in _ENVS:
            _ENVS[key] = [lmdb.open(key, readonly=True, lock=False, subdir=True, max_readers=256), 0]
        _ENVS[key][1] += 1
        return _ENVS[key][0]


def _close_env(env: lmdb.Environment) -> None:
    with _ENVS_LOCK:
        for key, entry in list(_ENVS.items()):
            if entry[0] is env:
                entry[1] -= 1
                if entry[1] == 0:
                    del _ENVS[key]
                    env.close()
                return


Decoder = Callable[[np.ndarray], np.ndarray]  # vector ids -> float32 (n, dim)


def listed_store(index: Path, entry: Mapping[str, Any]) -> "ShardStore":
    """The store of the shard a committed manifest entry (raw) lists, as it lists it."""
    return ShardStore(index / entry["name"], entry.get("stored", VECTORS))


class ShardStore:
    """Read access to one shard's store (read-only, safe to share across threads).

    `stored` is the float16 file the shard's committed entry lists (None:
    the shard keeps none, store="codes" or "binary"). A reader goes by the
    commit, never by what lies in the directory: a writer removes a dropped
    copy only after committing without it, so a file seen there may vanish
    before it is read. `decoder`, set by whoever opens the shard's ANN
    index, gives the vectors of a shard that keeps no float16 copy:
    `ann.decoder`."""

    def __init__(self, path: Path, stored: str | None = VECTORS) -> None:
        self.path = path
        self.env = _open_env(path)
        with self.env.begin() as txn:
            self.info = json.loads(txn.get(b"info"))
            self.offsets = np.frombuffer(txn.get(b"offsets"), dtype=np.int64)
            legacy = len(self) > 0 and txn.get(_key(b"vec/", 0)) is not None
        self.dim = int(self.info["dim"])
        self.decoder: Decoder | None = None
        self.decoded_dim = self.dim  # the width of what `decoder` gives (store="binary": its codes' bits)
        file = self._file = path / (stored or VECTORS)
        self._array = mapped.load(file) if stored and file.is_file() and self.info["vectors"] else None
        self._offset = 0 if self._array is None else mapped.data_offset(file, self._array)
        self._legacy = legacy and self._array is None
        if self._array is not None and self._array.shape != (self.info["vectors"], self.dim):
            raise ValueError(f"{file} holds {self._array.shape} vectors, the shard {self.info['vectors']} of dim {self.dim}: the index is damaged")

    @property
    def has_vectors(self) -> bool:
        """Whether the shard keeps its vectors (else stage 2 needs a decoder)."""
        return self._array is not None or self._legacy or not self.info["vectors"]

    def __len__(self) -> int:
        return int(self.info["docs"])

    def doc_of_vectors(self, vids: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.offsets, vids, side="right") - 1

    def ordinal(self, doc_id: str) -> int | None:
        with self.env.begin() as txn:
            raw = txn.get(b"id/" + doc_id.encode())
        return None if raw is None else struct.unpack(">I", raw)[0]

    def document(self, ordinal: int) -> Document:
        with self.env.begin() as txn:
            return records.document(txn.get(_key(b"doc/", ordinal)))

    def doc_id(self, ordinal: int) -> str:
        """A document's id, read without parsing the rest of its record."""
        with self.env.begin() as txn:
            return records.doc_id(txn.get(_key(b"doc/", ordinal)))

    def units(self, ordinal: int, which: Sequence[int] | None = None, doc_id: str | None = None) -> list[Unit]:
        """A document's unit records (all, or those at positions `which`);
        `doc_id` where the caller has read the document already."""
        with self.env.begin() as txn:
            if doc_id is None:
                doc_id = records.doc_id(txn.get(_key(b"doc/", ordinal)))
            sentences = np.frombuffer(txn.get(_key(b"sen/", ordinal)), dtype=np.int32).reshape(-1, 2)
            packed = np.frombuffer(txn.get(_key(b"unit/", ordinal)), dtype=np.int32)
        return unpack_units(doc_id, sentences, packed, which)

    def unit_sentences(self, ordinals: Sequence[int]) -> list[np.ndarray]:
        """Each document's (units, 2) first and last sentence of every unit."""
        with self.env.begin(buffers=True) as txn:
            return [np.frombuffer(txn.get(_key(b"sen/", o)), dtype=np.int32).reshape(-1, 2).copy() for o in ordinals]

    def vectors(self, ordinals: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(vectors, unit sentence ranges) of each document (`vector_rows`, `unit_sentences`)."""
        ordinals = list(ordinals)
        return list(zip(self.vector_rows(ordinals), self.unit_sentences(ordinals)))

    def vector_rows(self, ordinals: Sequence[int], rows: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Each document's vectors: float16 rows of the stored array (views
        of the memory map), or float32 rows decoded from the ANN index's
        codes in one call for all documents. With `rows`, document i's
        vectors at the positions `rows[i]` only (None: all of them), in
        their order: a decoded store decodes nothing else."""
        ordinals = list(ordinals)
        rows = list(rows) if rows is not None else [None] * len(ordinals)
        if self._legacy:
            with self.env.begin(buffers=True) as txn:
                whole = [np.frombuffer(txn.get(_key(b"vec/", o)), dtype=np.float16).reshape(-1, self.dim) for o in ordinals]
                return [(v if r is None else v[r]).copy() for v, r in zip(whole, rows)]
        starts, ends = self.offsets[ordinals], self.offsets[np.asarray(ordinals, dtype=np.int64) + 1]
        if self._array is not None:
            return [self._array[a:b] if r is None else self._array[a + r] for a, b, r in zip(starts.tolist(), ends.tolist(), rows)]
        if not self.info["vectors"]:
            return [np.zeros((0, self.decoded_dim), np.float16) for _ in ordinals]
        wanted = self.vector_ids(ordinals, rows)
        ids = np.concatenate(wanted or [np.zeros(0, np.int64)])
        flat = self.decode(ids) if len(ids) else np.zeros((0, self.decoded_dim), np.float32)
        bounds = np.concatenate([[0], np.cumsum([len(w) for w in wanted])]).astype(np.int64)
        return [flat[bounds[i] : bounds[i + 1]] for i in range(len(wanted))]

    def decode(self, ids: np.ndarray) -> np.ndarray:
        """The vectors of these ids, decoded from the ANN index's codes (a shard that keeps no vectors)."""
        if self.decoder is None:
            raise ValueError(f"{self.path} keeps no vectors (store=codes): open it with its ANN index's decoder")
        return self.decoder(ids)

    def vector_ids(self, ordinals: Sequence[int], rows: Sequence[np.ndarray | None] | None = None) -> list[np.ndarray]:
        """Each document's vector ids in this shard (int64), all of them or
        those at the positions `rows[i]` (None: all), in their order: what
        `decoder` takes."""
        ordinals = list(ordinals)
        rows = list(rows) if rows is not None else [None] * len(ordinals)
        starts, ends = self.offsets[ordinals], self.offsets[np.asarray(ordinals, dtype=np.int64) + 1]
        return [np.arange(a, b, dtype=np.int64) if r is None else a + np.asarray(r, dtype=np.int64)
                for a, b, r in zip(starts.tolist(), ends.tolist(), rows)]

    def iter_vectors(self, rows: int = 1 << 16) -> Iterator[np.ndarray]:
        """All vectors in vector-id order, about `rows` at a time (float32).
        The float16 file is read, not mapped: a whole scan (training, adds)
        would otherwise leave every page of it in this process's memory."""
        if self._array is not None:
            with open(self._file, "rb") as f:
                f.seek(self._offset)
                for start in range(0, len(self._array), rows):
                    n = min(rows, len(self._array) - start)
                    yield np.fromfile(f, dtype="<f2", count=n * self.dim).reshape(n, self.dim).astype(np.float32)
            return
        docs = max(1, rows // max(1, self.info["vectors"] // max(len(self), 1)))  # legacy or decoded: by documents
        for start in range(0, len(self), docs):
            parts = self.vector_rows(range(start, min(start + docs, len(self))))
            if parts:
                yield np.concatenate(parts).astype(np.float32)

    def matching(self, field: str, values: Sequence[Scalar]) -> np.ndarray:
        """Sorted ordinals of the documents whose `field` holds any of `values`."""
        with self.env.begin() as txn:
            parts = [np.frombuffer(raw, dtype=np.int32) for v in values if (raw := txn.get(metadata_key(field, v))) is not None]
        return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int32)

    def field_values(self, field: str) -> Iterator[tuple[Scalar, np.ndarray]]:
        """Every value a metadata field holds in this shard, with the
        ordinals of the documents that hold it (a cursor over its postings)."""
        prefix = b"meta/" + field.encode() + b"\0"
        with self.env.begin() as txn:
            cursor = txn.cursor()
            if not cursor.set_range(prefix):
                return
            for key, raw in cursor:
                if not key.startswith(prefix):
                    return
                yield json.loads(key[len(prefix):]), np.frombuffer(raw, dtype=np.int32)

    def doc_ids(self) -> Iterator[str]:
        for doc_id, _ in self.id_ordinals():
            yield doc_id

    def id_ordinals(self) -> Iterator[tuple[str, int]]:
        """(id, ordinal) of every document, in id order."""
        with self.env.begin() as txn:
            cursor = txn.cursor()
            if cursor.set_range(b"id/"):
                for key, value in cursor:
                    if not key.startswith(b"id/"):
                        break
                    yield key[3:].decode(), struct.unpack(">I", value)[0]

    def close(self) -> None:
        self._array = None
        if self.env is not None:
            _close_env(self.env)
            self.env = None
