"""Stage 1: candidate generation.

Every query vector is sent to every shard's ANN index (shards in parallel,
one ANN call for a whole batch of queries), and keeps its best hits over
all shards: an index split into many shards (a living index's small
segments) finds what one shard of the same vectors would, and pays for
each shard only the scan of its own lists, since shards that share a codec
share one mapping and list assignment of the queries (`ann.assign`). Each
document the hits fall in gets an estimate of its MaxSim score: a query
vector that did not reach the document is imputed its weakest hit, the
most it can have missed. Stage 2 re-scores the documents with the best
estimates.

Deletions and `where=` filters act here, as ID selectors over the vectors a
search may return, so that they never crowd out the documents that may be
returned; where a filter leaves few vectors, stage 1 is skipped and stage 2
scores all of their documents (the searcher decides: `allowed_vectors`).
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from propdex.indexer import ann

from . import scoring
from .loading import Shard
from .settings import SearchSettings

# nprobe that probes every list of any index.
EVERY_LIST = 1 << 30

# Per shard: (scores, document ordinals, positions in the document) of each
# query vector's hits, one row a query vector (-inf, -1, -1 where a row has
# fewer hits than columns).
ShardHits = tuple[np.ndarray, np.ndarray, np.ndarray]


def default_nprobe(query_vectors: int, lists: int = 4096, pooled: float = 1.0) -> int:
    """IVF lists probed per query vector unless asked. The vectors of a
    multi-vector query find a document together, so each may miss what the
    others find: 1/256 of the lists, at least 4 and at most 16, times the
    token states a stored vector pools (`Encoder.pooled_tokens`: 4 for
    nuggets at r = 0.25), since a query token's nearest lists hold tokens
    like it, not the means they went into. A one-vector
    query must find every candidate by itself, and a proposition's vector
    lies near its passage's and its siblings', in other lists: 512 lists,
    or all of a smaller index's."""
    if query_vectors > 1:
        probes = round(min(16, max(4, lists // 256)) * max(1.0, pooled))
        return min(probes, lists) if lists else probes
    return min(512, max(lists, 128))


def default_candidates(k: int, query_vectors: int, rerank: int, vectors_per_doc: float) -> int:
    """Stage-1 hits per query vector unless asked. A multi-vector query
    spreads its budget over its vectors: 64 each. A one-vector query must
    name its `rerank` documents by itself, and where a document holds many
    vectors (propositions) its hits crowd onto a few documents' units: it
    asks for up to 16 hits a document it re-scores, never fewer than 100 or
    10k."""
    if query_vectors > 1:
        return 64
    return max(100, 10 * k, rerank * min(16, math.ceil(vectors_per_doc)))


def default_rerank(query_vectors: int = 1) -> int:
    """Stage 1's best documents that stage 2 re-scores and ranks first,
    unless asked (`rerank`). Asked for more than half as many, stage 2
    scores up to 2k and ranks the others after them: the first page never
    changes with k (Vespa's second phase keeps a fixed rerank-count for the
    same reason), and a deep ranking's top 10 is a top 10's. A multi-vector
    query ranks 32 first: the fewer of stage 1's near-misses MaxSim sees,
    the fewer it ranks in by accident, and stage 2 is most of a query's
    time. A one-vector query ranks 64, as PLAID decompresses 64 of its 256
    candidates."""
    return 32 if query_vectors > 1 else 64


@dataclass(frozen=True)
class Depths:
    """How deep the two stages go for one batch of queries."""

    first: int  # stage 1's best documents that stage 2 ranks first
    rescored: int  # documents stage 2 re-scores: `first`, and at least 2k so that a page never changes with k
    per_vector: int  # ANN hits per query vector and shard
    nprobe: int  # IVF lists probed per query vector

    @classmethod
    def of(cls, st: SearchSettings, query_vectors: int, vectors_per_doc: float, nprobe: int | None, lists: int,
           pooled: float) -> "Depths":
        """The call's settings, else the searcher's `nprobe`, else the
        defaults for the batch's longest query (`query_vectors` vectors)."""
        first = st.rerank or default_rerank(query_vectors)
        rescored = max(first, 2 * st.k)
        per_vector = st.candidates or default_candidates(st.k, query_vectors, rescored, vectors_per_doc)
        return cls(first, rescored, per_vector, st.nprobe or nprobe or default_nprobe(query_vectors, lists, pooled))


def allowed_vectors(vector_masks: Sequence[np.ndarray | None]) -> int:
    """How many vectors the per-shard masks let through. A shard without a
    mask is not counted: a filter gives every shard one."""
    return sum(int(m.sum()) for m in vector_masks if m is not None)


def allowed_keys(shards: Sequence[Shard], allowed: Sequence[np.ndarray | None]) -> np.ndarray:
    """The keys of every document the per-shard masks allow (None: all)."""
    keys = [(np.int64(s) << 32) | np.flatnonzero(np.ones(len(sh.store), bool) if m is None else m)
            for s, (sh, m) in enumerate(zip(shards, allowed))]
    return np.concatenate(keys) if keys else np.zeros(0, np.int64)


def query_rows(hits: Sequence[ShardHits], rows: slice) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """One query's rows of a batch's hits, as (shard, scores, ordinals, positions)."""
    return [(s, *(part[rows] for part in h)) for s, h in enumerate(hits)]


def best_documents(m: int, hits: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray]], n: int,
                   window: int | None = None) -> np.ndarray:
    """The `n` documents (keys) with the best MaxSim estimates from the hits
    of a query's `m` vectors, best first; with `window`, a document's
    estimate is its best window's, each window `window` consecutive vectors
    (stage 2 packs whole sentences; an estimate need not)."""
    keys, scores, query_of, windows = [], [], [], []
    for shard, s, d, at in hits:
        valid = d >= 0
        keys.append((np.int64(shard) << 32) | d[valid])
        scores.append(s[valid])
        query_of.append(np.nonzero(valid)[0])
        if window:
            windows.append(at[valid] // window)
    keys_all = np.concatenate(keys) if keys else np.zeros(0, np.int64)
    if len(keys_all) == 0:
        return keys_all
    scores_all = np.concatenate(scores)
    query_all = np.concatenate(query_of)
    docs, approx = scoring.approximate_doc_scores(scores_all, keys_all, m, query_all, _floor(m, query_all, scores_all),
                                                  np.concatenate(windows) if window else None)
    return docs[np.argsort(-approx, kind="stable")[:n]]


def hit_units(hits: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray]], keys: np.ndarray) -> dict[int, np.ndarray]:
    """For each document of `keys` that a hit fell in, the sorted positions
    of its units that were hit: stage 2 scores the windows around them."""
    key_parts, at_parts = [], []
    for shard, _, d, at in hits:
        valid = d >= 0
        key_parts.append((np.int64(shard) << 32) | d[valid])
        at_parts.append(at[valid])
    found = np.concatenate(key_parts) if key_parts else np.zeros(0, np.int64)
    at_all = np.concatenate(at_parts) if at_parts else np.zeros(0, np.int64)
    wanted = np.isin(found, keys)
    found, at_all = found[wanted], at_all[wanted]
    order = np.lexsort((at_all, found))
    found, at_all = found[order], at_all[order]
    starts = scoring.run_starts(found)
    return {key: np.unique(part) for key, part in zip(found[starts].tolist(), np.split(at_all, starts[1:]))}


def _floor(m: int, query_of: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each query vector's weakest hit over all shards: it bounds what the vector missed (0 where it has none)."""
    floor = np.full(m, np.inf, dtype=np.float32)
    np.minimum.at(floor, query_of, scores)
    floor[~np.isfinite(floor)] = 0.0
    return floor


class CandidateGeneration:
    """Stage 1 over a searcher's shards, one thread a shard."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self.shards = shards
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(len(shards), os.cpu_count() or 1)))
        self._codecs = {id(s.codec): s.codec for s in shards if s.codec is not None}  # shared by their shards

    def search(self, vectors: np.ndarray, per_vector: int, nprobe: int, masks: Sequence[np.ndarray | None]) -> list[ShardHits]:
        """Each query vector's `per_vector` best ANN hits over all shards, per
        shard, among the vectors each shard's mask allows (None: all)."""
        assigned = {key: ann.assign(codec, vectors, nprobe) for key, codec in self._codecs.items()}
        hits = self._pool.map(lambda shard, mask: _shard_hits(shard, vectors, per_vector, nprobe, mask, assigned.get(id(shard.codec))),
                              self.shards, masks)
        return best_over_shards(list(hits), per_vector)

    def candidates(self, vectors: np.ndarray, hits: Sequence[tuple[int, np.ndarray, np.ndarray, np.ndarray]], n: int, enough: int,
                   per_vector: int, masks: Sequence[np.ndarray | None], window: int | None) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """The `n` best documents for a query from its hits, and the
        positions of each one's units that the hits fell on (`hit_units`).
        Where a filter left the probed lists too few allowed vectors to name
        `enough` documents, every list is probed: a filter never starves a page."""
        chosen = best_documents(len(vectors), hits, n, window)
        if len(chosen) < enough and any(m is not None for m in masks):
            hits = [(s, *h) for s, h in enumerate(self.search(vectors, per_vector, EVERY_LIST, masks))]
            chosen = best_documents(len(vectors), hits, n, window)
        return chosen, hit_units(hits, chosen)

    def close(self) -> None:
        self._pool.shutdown()


def best_over_shards(hits: list[ShardHits], k: int) -> list[ShardHits]:
    """The shards' hits with only each query vector's `k` best over all
    shards left (the others -inf, -1, -1): what one shard holding every
    vector would return, ties at the k-th score kept."""
    if len(hits) < 2:
        return hits
    scores = np.concatenate([h[0] for h in hits], axis=1)
    if scores.shape[1] <= k:
        return hits
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1 : k]
    out = []
    for s, docs, at in hits:
        keep = s >= kth
        out.append((np.where(keep, s, -np.inf).astype(np.float32), np.where(keep, docs, -1), np.where(keep, at, -1)))
    return out


def _shard_hits(shard: Shard, vectors: np.ndarray, per_vector: int, nprobe: int, mask: np.ndarray | None,
                assigned: ann.Assignment | None) -> ShardHits:
    """One shard's hits, through the queries' shared list assignment where its codec has one."""
    n = min(per_vector, shard.index.ntotal if mask is None else int(mask.sum()))
    if n == 0:
        empty = np.zeros((len(vectors), 0), np.int64)
        return np.zeros((len(vectors), 0), np.float32), empty, empty
    if assigned is not None:
        scores, ids = ann.search_assigned(shard.index, assigned, n, mask)
    else:
        scores, ids = ann.search(shard.index, vectors, n, nprobe, mask)
    valid = ids >= 0
    docs = np.where(valid, shard.store.doc_of_vectors(np.where(valid, ids, 0)), -1)
    at = np.where(valid, ids - shard.store.offsets[np.maximum(docs, 0)], -1)
    return np.where(valid, scores, -np.inf).astype(np.float32), docs, at
