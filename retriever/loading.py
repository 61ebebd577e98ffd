"""Opening a committed index for search, and what a searcher holds of it.

A searcher holds, for every shard with an ANN index, its store (documents,
units, vectors), the index and which of its documents are deleted; the
encoder the index was built with; and the index's BM25. Everything is
checked on opening (files, counts, encoder, backbone weights): an index that
would be misread is refused before any query sees it.

Across shards a document is addressed by its key, shard << 32 | ordinal, so
that stage 1's candidates of every shard sort and deduplicate as integers.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import lmdb
import numpy as np

from propdex.encoders import Document, encoder_from_config, recorded_config
from propdex.indexer import ann, binary, integrity, lexical
from propdex.indexer.decoding import CodesDecoder
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import ShardStore, listed_store, read_deleted

if TYPE_CHECKING:
    from propdex.encoders import Encoder

log = logging.getLogger(__name__)

T = TypeVar("T")
ORDINALS = 0xFFFFFFFF  # a key's low 32 bits: the document's ordinal in its shard
OPEN_TRIES = 3


@dataclass
class Shard:
    name: str
    store: ShardStore
    index: Any  # faiss.Index or ann.HnswIndex
    live: np.ndarray | None = None  # bool per document; None: none is deleted
    # Stage 2's map of the query vectors into the space the shard's vectors decode to: store="codes" behind
    # OPQ rotates them; store="binary" takes their hashing heads' scores (None: the vectors as they are).
    rotate: Any = None
    # The trained IVF codec whose transform and coarse lists the shard's index shares with every shard of the
    # index (store="codes"): stage 1 maps and assigns a query once for all of them (None: the shard searches alone).
    codec: Any = None

    def vector_mask(self, docs: np.ndarray | None) -> np.ndarray | None:
        """Per vector, whether its document is in the bool mask `docs` (None: every vector)."""
        return None if docs is None else np.repeat(docs, np.diff(self.store.offsets))


def shard_of(key: int) -> int:
    return key >> 32


def ordinal_of(key: int) -> int:
    return key & ORDINALS


# -- opening ----------------------------------------------------------------------------
def open_committed(path: Path, open_commit: Callable[[dict[str, Any]], T]) -> T:
    """`open_commit(manifest)` for the index's current commit. A writer that
    commits while this reader opens the commit before may remove some of its
    files: the reader then opens the new commit instead, and gives up only
    when the commit it failed on is still the current one (a damaged index)."""
    for attempt in range(OPEN_TRIES):
        manifest = read_manifest(path)
        try:
            return open_commit(manifest)
        except (ValueError, OSError, lmdb.Error):
            if attempt == OPEN_TRIES - 1 or read_manifest(path) == manifest:
                raise
    raise AssertionError("unreachable")


def check_index(path: Path, manifest: dict[str, Any]) -> None:
    """Refuse a damaged index; warn that an unfinished one is searched as far as it is built."""
    problems = integrity.check(path, manifest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"index {path} is damaged: {problems[0]}{more}; `propdex verify {path}` lists every problem")
    if manifest["status"] != "complete":
        log.warning("index %s is not complete (%s): searching its finished shards only; re-run the build to finish it", path, manifest["status"])


def query_encoder(manifest: dict[str, Any], encoder: "Encoder | None", device: str, runtime: str) -> "Encoder":
    """The encoder the index was built with (`encoder`, or one made from the
    manifest): queries must land in the documents' vector space, so another
    configuration or other backbone weights are refused."""
    if encoder is None:
        encoder = encoder_from_config(manifest["encoder"], device=device, runtime=runtime)
    if encoder.config() != recorded_config(manifest["encoder"]):
        raise ValueError(f"encoder {encoder.config()} does not match the index's {manifest['encoder']}")
    if encoder.backbone.weights_hash != manifest["backbone"]["weights_sha256"]:
        raise ValueError(f"backbone {encoder.backbone.name!r} here has other weights than the index was built with")
    return encoder


def open_shards(path: Path, manifest: dict[str, Any], mmap: bool, device: Any = None) -> list[Shard]:
    """Every shard that has an ANN index, checked against its manifest entry;
    on any failure the stores opened so far are closed again. Stage 2
    decodes standalone IVF-PQ codes by table lookups (`CodesDecoder`), on a
    torch `device` (a GPU) where one is given, else on the CPU; codes the
    tables do not decode, FAISS decodes on the CPU."""
    shards: list[Shard] = []
    codecs = _Codecs(path, manifest, device)
    try:
        for entry in manifest["shards"]:
            if entry["index"] is not None:
                shards.append(_open_shard(path, manifest, entry, mmap, codecs))
        return shards
    except BaseException:
        close_shards(shards)
        raise


def close_shards(shards: Sequence[Shard]) -> None:
    for shard in shards:
        shard.store.close()


def open_bm25(path: Path, manifest: dict[str, Any], shards: Sequence[Shard]) -> lexical.BM25 | None:
    """The index's BM25 (None: built without one): the segment of every
    opened shard, memory-mapped on opening, with the shard's deletions
    (`Shard.live`) left out. A writer's later commit adds segments and
    deletions; this reader keeps the view it opened."""
    info = manifest.get("lexical")
    if not info:
        return None
    if info.get("dir"):  # an index from before segments
        return lexical.Bm25sIndex.load(path / info["dir"])
    entries = {e["name"]: e for e in manifest["shards"]}
    segments = []
    for shard in shards:
        segment = entries[shard.name].get("bm25")
        if not segment:
            raise ValueError(f"{path}: shard {shard.name} has no BM25 segment; the index is damaged")
        segments.append(lexical.Segment.load(path / shard.name / segment))
    return lexical.BM25(segments, [s.live for s in shards], {k: info[k] for k in ("method", "k1", "b", "analyzer") if k in info})


class _Codecs:
    """The trained index that standalone codes are read through, and the
    pair codebook that decodes them for stage 2: read once, for every shard."""

    def __init__(self, path: Path, manifest: dict[str, Any], device: Any = None) -> None:
        self.path, self.manifest, self.device = path, manifest, device
        self.codec: Any = None
        self.decoding: Any = None
        self._tables: CodesDecoder | None = None
        self._tried = False  # whether the tables were built (or found not to fit the codec)
        self._rotations: list[Any] = []  # the shared rotation, once a shard has made it (it may be None)

    def read(self) -> None:
        if self.codec is None:
            self.codec = ann.read_faiss(self.path / self.manifest["index"]["trained"])
            self.decoding = ann.decoding_codec(self.codec)

    def rotation(self, rotate: Any) -> Any:
        """The first shard's query rotation, for every shard decoded through the same codec."""
        if not self._rotations:
            self._rotations.append(rotate)
        return self._rotations[0]

    def tables(self) -> CodesDecoder | None:
        """The codec's table decoder, on `device` where there is one (None: codes it does not decode)."""
        if not self._tried:
            self._tried = True
            try:
                self._tables = CodesDecoder(self.codec, self.manifest["index"].get("vector_norm"), self.device)
            except ValueError as e:
                if self.device is not None:
                    log.warning("stage 2 decodes on the CPU: %s", e)
        return self._tables

    def binary(self) -> binary.BinaryCodec:
        if self.codec is None:
            self.codec = binary.read_codec(self.path / self.manifest["index"]["trained"])
        return self.codec


def _open_shard(path: Path, manifest: dict[str, Any], entry: dict[str, Any], mmap: bool, codecs: _Codecs) -> Shard:
    store = listed_store(path, entry)
    shard = Shard(entry["name"], store, None)
    try:
        file = path / entry["name"] / entry["index"]
        codes = scales = None
        if ann.holds_codes(file):
            codecs.read()
            codes, scales = ann.read_codes(file, codecs.codec, bool(manifest["index"].get("scaled_codes")))
        if binary.holds_bits(file):
            index = binary.BinaryIndex(codecs.binary(), binary.read_rows(file, codecs.binary()))
            store.decoder, shard.rotate = index.decoder, index.codec.hashing.query
            store.decoded_dim = index.bits
        elif codes is not None:
            index = ann.index_from_codes(codecs.codec, codes)
            shard.codec = codecs.codec
        else:
            index = ann.read_shard_index(file, store.dim, entry["vectors"], mmap)
        counts = (len(store), int(store.info["vectors"]), index.ntotal)
        if counts != (entry["docs"], entry["vectors"], entry["vectors"]):
            raise ValueError(f"index {path} is damaged: {entry['name']} holds {counts[0]} documents, {counts[1]} stored and "
                             f"{counts[2]} indexed vectors, its manifest {entry['docs']} and {entry['vectors']}")
        shard.index = index
        if not store.has_vectors and not binary.holds_bits(file):  # store="codes": stage 2 decodes the index's codes
            # Standalone codes decode through their codec; stage 1 may scan them in another layout.
            store.decoder, rotate = ann.scoring_decoder(index if codes is None else codecs.decoding, codes,
                                                        manifest["index"].get("vector_norm"), scales)
            # Shards that share a codec share its rotation: stage 2 rotates a query once for all of them.
            shard.rotate = rotate if codes is None else codecs.rotation(rotate)
            if codes is not None and codecs.tables() is not None:
                store.decoder = codecs.tables().reader(codes, scales)
        if entry.get("deleted"):
            shard.live = np.ones(len(store), dtype=bool)
            shard.live[read_deleted(path / entry["name"] / entry["deleted"])] = False
        return shard
    except BaseException:
        store.close()
        raise


# -- documents by id ----------------------------------------------------------------------
def key_of(shards: Sequence[Shard], doc_id: str) -> int | None:
    """The live document's key, or None where no shard holds it (an updated
    document's earlier version is deleted)."""
    for s, shard in enumerate(shards):
        ordinal = shard.store.ordinal(doc_id)
        if ordinal is not None and (shard.live is None or shard.live[ordinal]):
            return (s << 32) | ordinal
    return None


def document_at(shards: Sequence[Shard], key: int) -> Document:
    return shards[shard_of(key)].store.document(ordinal_of(key))


def locate(shards: Sequence[Shard], doc_ids: Sequence[str], allowed: Sequence[np.ndarray | None] | None = None) -> np.ndarray:
    """Keys of the listed documents that the index holds (and the per-shard
    masks `allowed` let through), in the order given, each once."""
    keys = [key_of(shards, d) for d in dict.fromkeys(doc_ids)]
    keys = [k for k in keys if k is not None and _allows(allowed, k)]
    return np.array(keys, dtype=np.int64)


def _allows(allowed: Sequence[np.ndarray | None] | None, key: int) -> bool:
    if allowed is None:
        return True
    mask = allowed[shard_of(key)]
    return mask is None or bool(mask[ordinal_of(key)])
