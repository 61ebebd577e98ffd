"""Stage-1 ANN indexes: FAISS (any factory string) or hnswlib, one file per shard.

All vectors are L2-normalised, so inner product is cosine similarity and
every index here searches by inner product.

This module reads and searches a shard's index; the rest of stage 1 lives
beside it, one job a module, and is re-exported here so that callers keep
using `ann.<name>`: `faiss_setup` (the library and its threads),
`factory` (which index a corpus gets), `trainer` (training and filling),
`codes` (standalone codes), `decoding` (stage 2 from codes) and `hnsw`.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .binary import BinaryIndex
from .codes import CODES_FILE, _fill, _four_bit, _on_quantizer_of, encode, fast_scan, holds_codes, index_from_codes, read_codes, row_bytes, scaled
from .decoding import _byte_codec, _decoder, common_norm, decoder, decoding_codec, scoring_decoder
from .factory import (BACKENDS, CODE_BYTES, FLAT_BELOW, MIN_CODE_BYTES, OPQ_ITERATIONS, QUICK_BELOW, TRAININGS, _lists, codes_factory,
                      default_factory, list_bytes, training, training_size)
from .faiss_setup import _NO_FAISS, _NoFaiss, apply_threads, faiss, require_faiss, set_threads
from .hnsw import HnswIndex, build_hnsw
from .trainer import _rotate_for_the_codes, fill, log, make_index, train

__all__ = [
    "Assignment", "BACKENDS", "CODES_FILE", "CODE_BYTES", "FLAT_BELOW", "HnswIndex", "MIN_CODE_BYTES", "OPQ_ITERATIONS", "QUICK_BELOW", "TRAININGS", "_NO_FAISS", "_NoFaiss", "_byte_codec",
    "_decoder", "_fill", "_four_bit", "_lists", "_on_quantizer_of", "_rotate_for_the_codes", "apply_threads", "assign", "build_hnsw",
    "codes_factory", "common_norm", "decoder", "decoding_codec", "default_factory", "encode", "faiss", "fast_scan", "fill",
    "holds_codes", "index_from_codes", "lists", "list_bytes", "log", "make_index", "quantizer_params", "read_codes", "read_faiss", "read_shard_index", "row_bytes",
    "require_faiss", "scaled", "scoring_decoder", "search", "search_assigned", "search_params", "set_threads", "standalone", "train", "training", "training_size",
    "write_faiss",
]


def read_shard_index(path: Path, dim: int, n: int, mmap: bool = False) -> Any:
    """A shard's stage-1 index file, by its name: hnswlib's (.hnsw) or FAISS's
    (standalone codes, `CODES_FILE`, are read with `read_codes` and their codec)."""
    return HnswIndex(path, dim, n) if path.name.endswith(".hnsw") else read_faiss(path, mmap)


def lists(index: Any) -> int:
    """An index's IVF lists (0 where it has none: Flat, HNSW)."""
    if isinstance(index, HnswIndex):
        return 0
    if isinstance(index, BinaryIndex):
        return index.nlist
    try:
        return int(faiss.extract_index_ivf(index).nlist)
    except RuntimeError:
        return 0


def standalone(index: Any) -> bool:
    """Whether store="codes" keeps a shard as FAISS standalone codes (IVF
    indexes, whose inverted lists would keep an 8-byte id beside every code)
    rather than as the FAISS index file itself (Flat: float32 vectors, no ids)."""
    return lists(index) > 0


def write_faiss(index: faiss.Index, path: Path) -> None:
    faiss.write_index(index, str(path))


def read_faiss(path: Path, mmap: bool = False) -> faiss.Index:
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP if mmap else 0)


def search_params(index: Any, nprobe: int, selector: "faiss.IDSelector | None" = None) -> "faiss.SearchParameters | None":
    """Per-call search parameters that probe `nprobe` IVF lists and consider
    only the ids `selector` lets through, or None where neither applies. Per
    call, not set on the index: a query's nprobe must not change what
    concurrent or later queries probe."""
    if not isinstance(index, faiss.Index):
        return None
    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        inner = search_params(index.index, nprobe, selector)
        if inner is None:
            return None
        params = faiss.SearchParametersPreTransform(index_params=inner)
        params.referenced_objects = [inner]  # SWIG keeps a raw pointer: keep the Python object alive
        return params
    if isinstance(index, faiss.IndexIVF):
        # At most every list: FAISS's fast-scan IVF sizes its buffers by the nprobe asked for, not the lists it has.
        nprobe = min(nprobe, int(index.nlist))
        params = faiss.SearchParametersIVF(nprobe=nprobe, sel=selector) if selector is not None else faiss.SearchParametersIVF(nprobe=nprobe)
        graph = quantizer_params(index, nprobe)
        if graph is not None:
            params.quantizer_params = graph
            params.referenced_objects = [graph]
        return params
    if selector is None:
        return None
    if isinstance(index, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(sel=selector)
    return faiss.SearchParameters(sel=selector)


def quantizer_params(ivf: Any, nprobe: int) -> "faiss.SearchParametersHNSW | None":
    """Where an IVF index finds its lists through a graph (`IVF65536_HNSW32`),
    the graph's search parameters that return `nprobe` lists: an HNSW search
    keeps only its efSearch best candidates, so asked for more lists than
    that (every list, where a filter leaves too few vectors) it would return
    a few hundred and silently skip the rest. None for a flat quantizer."""
    quantizer = faiss.downcast_index(ivf.quantizer)
    if not isinstance(quantizer, faiss.IndexHNSW):
        return None
    return faiss.SearchParametersHNSW(efSearch=max(int(quantizer.hnsw.efSearch), min(nprobe, int(ivf.nlist))))


@dataclass(frozen=True)
class Assignment:
    """Queries mapped through a trained codec's transform and assigned to
    its `nprobe` nearest IVF lists, once for every shard whose index shares
    the codec (`index_from_codes`): a shard's own `search` would map and
    assign them again, a fixed cost per shard that grows an index's search
    time with its shard count rather than its size."""

    mapped: np.ndarray  # (n, d) float32: the queries past the codec's transform
    lists: np.ndarray  # (n, nprobe) int64: nearest lists first, -1 past the last list
    distances: np.ndarray  # (n, nprobe) float32: to those lists' centroids


def assign(codec: Any, queries: np.ndarray, nprobe: int) -> Assignment:
    """`queries` mapped and assigned to their `nprobe` nearest lists of the IVF codec `codec`."""
    apply_threads()
    x = np.ascontiguousarray(queries, dtype=np.float32)
    typed = faiss.downcast_index(codec)
    if isinstance(typed, faiss.IndexPreTransform):
        for i in range(typed.chain.size()):
            x = np.ascontiguousarray(typed.chain.at(i).apply(x), dtype=np.float32)
    ivf = faiss.extract_index_ivf(typed)
    distances, lists_ = ivf.quantizer.search(x, min(nprobe, int(ivf.nlist)), params=quantizer_params(ivf, nprobe))
    return Assignment(x, lists_.astype(np.int64), distances.astype(np.float32))


def search_assigned(index: Any, assigned: Assignment, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`search` of an index made by `index_from_codes` from the codec that
    `assigned` was made with: only the probed lists of this shard are scanned."""
    apply_threads()
    n = len(assigned.mapped)
    scores, ids = np.empty((n, k), np.float32), np.empty((n, k), np.int64)
    selector = _selector(allowed)  # a local: FAISS reads it through a raw pointer while it searches
    ivf = faiss.extract_index_ivf(index)
    ivf.search_preassigned_c(
        n, faiss.swig_ptr(assigned.mapped), k, faiss.swig_ptr(assigned.lists), faiss.swig_ptr(assigned.distances),
        faiss.swig_ptr(scores), faiss.swig_ptr(ids), False, search_params(ivf, assigned.lists.shape[1], selector))
    return scores, ids


def _selector(allowed: np.ndarray | None) -> "faiss.IDSelector | None":
    """FAISS's ID selector of the vectors `allowed` (bool per vector) lets
    through, holding its bitmap (None: all)."""
    if allowed is None:
        return None
    bitmap = np.packbits(allowed, bitorder="little")
    selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bitmap))
    selector.referenced_objects = [bitmap]  # FAISS reads the bitmap through a raw pointer
    return selector


# FAISS 1.15.1's fast-scan search has returned no hit at all for a query at
# k = 3 (heap results, a freshly built index): FAISS is asked for at least this many.
FEWEST_HITS = 8


def search(index: Any, queries: np.ndarray, k: int, nprobe: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(scores, ids) of each query's k nearest vectors, -1 ids where fewer
    exist; `allowed` (bool per vector) restricts the search to those vectors
    inside the index (FAISS's ID selectors, hnswlib's filter), so a filter
    never costs hits the way dropping them afterwards would."""
    x = np.ascontiguousarray(queries, dtype=np.float32)
    if isinstance(index, HnswIndex):
        return index.search(x, k, allowed)
    if isinstance(index, BinaryIndex):
        return index.search(x, k, nprobe, allowed)
    apply_threads()
    selector = _selector(allowed)  # a local: FAISS reads it through a raw pointer while it searches
    params = search_params(index, nprobe, selector)
    asked = max(k, FEWEST_HITS)
    scores, ids = index.search(x, asked, params=params) if params is not None else index.search(x, asked)
    return scores[:, :k], ids[:, :k]
