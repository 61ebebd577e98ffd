"""Pure scoring functions: exact late-interaction scores and their aggregation.

Every score here is one formula, sum_i max_{j in G} <q_i, d_j>, for a group G
of a document's vectors: the whole document (MaxSim), one sentence, or one
unit. With a single query vector it is simply the best unit in the group.
Cross-Thought first turns its block inner products into attention weights
(`attention`); the groups then take the best unit's weight the same way.
"""
from __future__ import annotations

import numpy as np


def similarities(queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """(m, n) inner products; float16 storage is widened to float32 first."""
    return queries.astype(np.float32, copy=False) @ vectors.astype(np.float32, copy=False).T


def block_logits(query: np.ndarray, vectors: np.ndarray, blocks: int) -> np.ndarray:
    """(blocks, n) inner products of one query vector with n vectors, block by
    block (Cross-Thought: a block is one slot and head, its product a logit)."""
    q = query.astype(np.float32, copy=False).reshape(blocks, -1)
    v = vectors.astype(np.float32, copy=False).reshape(len(vectors), blocks, -1)
    return np.einsum("be,nbe->bn", q, v)


def attention(logits: np.ndarray) -> np.ndarray:
    """Cross-Thought's alpha: per block, the softmax of the (blocks, n) logits
    over the n candidates, then the mean over blocks: (n,)."""
    if logits.shape[1] == 0:
        return np.zeros(0, np.float32)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)).mean(axis=0).astype(np.float32)


def maxsim(sim: np.ndarray) -> float:
    """Sum over query vectors of the best document vector (ColBERT's MaxSim)."""
    if sim.shape[1] == 0:
        return float("-inf")
    return float(sim.max(axis=1).sum())


def group_maxsim(sim: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """MaxSim restricted to each group of columns: (n_groups,) scores.

    `groups[j]` is the group of column j; groups with no column score -inf.
    """
    best = np.full((sim.shape[0], n_groups), -np.inf, dtype=np.float32)
    if sim.shape[1]:
        order = np.argsort(groups, kind="stable")
        sorted_groups = groups[order]
        starts = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
        best[:, sorted_groups[starts]] = np.maximum.reduceat(sim[:, order], starts, axis=1)
    return best.sum(axis=0)


def sentence_columns(unit_sentences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand units over the sentences they cover: (column index, sentence) pairs.

    A passage unit covering sentences 3..5 counts for each of them, so a
    sentence's score is the best unit that contains it.
    """
    first, last = unit_sentences[:, 0], unit_sentences[:, 1]
    spans = last - first + 1
    columns = np.repeat(np.arange(len(first)), spans)
    offsets = np.arange(len(columns)) - np.repeat(np.cumsum(spans) - spans, spans)
    return columns, np.repeat(first, spans) + offsets


def sentence_scores(sim: np.ndarray, unit_sentences: np.ndarray, n_sentences: int) -> np.ndarray:
    columns, sentences = sentence_columns(unit_sentences)
    return group_maxsim(sim[:, columns], sentences, n_sentences)


def unit_scores(sim: np.ndarray) -> np.ndarray:
    """A unit's score: its best match over the query vectors."""
    return sim.max(axis=0) if sim.shape[0] else np.zeros(sim.shape[1], np.float32)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first (ties by index)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return part[np.lexsort((part, -scores[part]))]


def approximate_doc_scores(
    hit_scores: np.ndarray, hit_docs: np.ndarray, n_query_vectors: int, query_of_hit: np.ndarray, floor: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Stage-1 MaxSim estimate per candidate document, from ANN hits only.

    For query vector i and document d the estimate is the best hit of i in d;
    where i found nothing in d it is imputed with i's weakest retrieved score
    (`floor[i]`), an upper bound on what was missed (as XTR imputes). Returns
    (candidate doc keys, estimated scores).
    """
    docs, inverse = np.unique(hit_docs, return_inverse=True)
    best = np.repeat(floor[:, None], len(docs), axis=1).astype(np.float32)
    np.maximum.at(best, (query_of_hit, inverse), hit_scores)
    return docs, best.sum(axis=0)
