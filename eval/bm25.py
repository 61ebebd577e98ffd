"""The reference BM25: rank-bm25's BM25Okapi over (id, text) pairs.

propdex's BM25 is `indexer.lexical` (bm25s, persisted in every index, used by
the `bm25` eval system and by `search --bm25/--hybrid`); this module keeps
rank-bm25 as the reference it is checked against, and serves the nugget RR
task (eval.rr), whose published figures were measured with it.

Tokenizer: lowercase, then every maximal run of Unicode letters/digits is a
token (`[^\\W_]+`); punctuation, underscores and whitespace separate tokens.
No stemming and no stop words: the baseline stays plain and reproducible
(BM25's idf already discounts frequent words).

Parameters are rank-bm25's defaults (k1=1.5, b=0.75, epsilon=0.25: a term
whose idf would be negative gets epsilon * mean idf instead).

Speed: rank-bm25's `get_scores` loops in Python over every document for every
query token (O(|query| * N) dict look-ups): about 50 ms per SciFact query
(5k documents, 14 s for the 300 test queries). `scores` therefore computes the
same formula from postings built once from rank-bm25's own statistics (idf,
document lengths, average length), touching only documents that contain a
query term; the result equals `get_scores` exactly (tested), at well under a
millisecond per query on SciFact.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np
from rank_bm25 import BM25Okapi

_TOKEN = re.compile(r"[^\W_]+")


def tokenize(text: str) -> list[str]:
    """Lowercased runs of letters and digits: "Hello, World-2!" -> hello world 2."""
    return _TOKEN.findall(text.lower())


class BM25Index:
    """BM25 over a fixed collection of (id, text) pairs."""

    def __init__(self, docs: Iterable[tuple[str, str]], k1: float = 1.5, b: float = 0.75):
        pairs = list(docs)
        if not pairs:
            raise ValueError("BM25Index needs at least one document")
        self.ids = [i for i, _ in pairs]
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("duplicate document ids")
        # rank-bm25 divides by the mean document length: keep it non-zero.
        bm25 = BM25Okapi([tokenize(t) or [""] for _, t in pairs], k1=k1, b=b)
        self._bm25 = bm25
        # Postings term -> (document indices, term frequencies), and the
        # per-document length normalisation exactly as rank-bm25 computes it.
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for i, freqs in enumerate(bm25.doc_freqs):
            for term, tf in freqs.items():
                entry = postings.setdefault(term, ([], []))
                entry[0].append(i)
                entry[1].append(tf)
        self._postings = {
            t: (np.asarray(d, dtype=np.int64), np.asarray(f, dtype=np.int64))
            for t, (d, f) in postings.items()
        }
        doc_len = np.array(bm25.doc_len)
        self._norm = bm25.k1 * (1 - bm25.b + bm25.b * doc_len / bm25.avgdl)

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (in insertion order) for `query`.

        Same value as rank-bm25's `get_scores(tokenize(query))`: a repeated
        query token counts again, a token absent from the corpus adds 0.
        """
        bm25 = self._bm25
        score = np.zeros(len(self.ids))
        for term in tokenize(query):
            posting = self._postings.get(term)
            idf = bm25.idf.get(term) or 0
            if posting is None or not idf:
                continue
            docs, tf = posting
            score[docs] += idf * (tf * (bm25.k1 + 1) / (tf + self._norm[docs]))
        return score

    def reference_scores(self, query: str) -> np.ndarray:
        """rank-bm25's own (slow) `get_scores`, to check `scores` against."""
        return np.asarray(self._bm25.get_scores(tokenize(query)), dtype=np.float64)

    def search(
        self, query: str, k: int, exclude: Iterable[str] | None = None
    ) -> list[tuple[str, float]]:
        """The top `k` (id, score), best first; ties by insertion order.

        Ids in `exclude` are left out (k results are still returned if the
        collection has enough documents).
        """
        excluded = set(exclude or ())
        scores = self.scores(query)
        n = len(scores)
        want = min(n, k + len(excluded))
        if want <= 0:
            return []
        if want < n:
            # the want-th best score; keep every document tied with it so the
            # cut is decided by insertion order, not by argpartition's whim
            threshold = scores[np.argpartition(-scores, want - 1)[want - 1]]
            top = np.flatnonzero(scores >= threshold)
        else:
            top = np.arange(n)
        # best score first, then lower index first (stable, deterministic)
        top = top[np.lexsort((top, -scores[top]))]
        out = []
        for i in top:
            doc_id = self.ids[i]
            if doc_id in excluded:
                continue
            out.append((doc_id, float(scores[i])))
            if len(out) == k:
                break
        return out
