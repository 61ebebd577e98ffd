"""hnswlib as a stage-1 backend: building a shard's graph, and searching it
behind the small part of FAISS's search API the searcher uses.
"""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .faiss_setup import threads


def _hnswlib():
    try:
        import hnswlib
    except ImportError:
        raise ValueError("the hnsw backend needs hnswlib: pip install 'propdex[hnsw]'") from None
    return hnswlib


def build_hnsw(chunks: Iterable[np.ndarray], n: int, dim: int, path: Path, m: int = 16, ef_construction: int = 200):
    hnswlib = _hnswlib()

    index = hnswlib.Index(space="ip", dim=dim)
    index.init_index(max_elements=max(n, 1), ef_construction=ef_construction, M=m, random_seed=0)
    start = 0
    for chunk in chunks:
        index.add_items(chunk, np.arange(start, start + len(chunk)))
        start += len(chunk)
    index.save_index(str(path))


class HnswIndex:
    """hnswlib behind the small part of FAISS's search API the searcher uses."""

    def __init__(self, path: Path, dim: int, n: int) -> None:
        hnswlib = _hnswlib()

        self.index = hnswlib.Index(space="ip", dim=dim)
        self.index.load_index(str(path), max_elements=max(n, 1))
        self.ntotal = n

    def set_ef(self, ef: int) -> None:
        self.index.set_ef(ef)

    def search(self, queries: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        k = min(k, self.ntotal if allowed is None else int(allowed.sum()))
        if k == 0:
            return np.zeros((len(queries), 0), np.float32), np.full((len(queries), 0), -1, np.int64)
        self.index.set_ef(max(k, 64))
        keep = None if allowed is None else (lambda label: bool(allowed[label]))
        while True:
            try:
                labels, distances = self.index.knn_query(queries, k=k, filter=keep, num_threads=threads() or -1)
                return 1.0 - distances, labels.astype(np.int64)  # hnswlib 'ip' distance is 1 - <q, x>
            except RuntimeError:  # a filter the graph walk could not satisfy k times over
                if k == 1:
                    return np.zeros((len(queries), 0), np.float32), np.full((len(queries), 0), -1, np.int64)
                k //= 2
