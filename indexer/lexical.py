"""BM25: the lexical index every propdex index carries beside its vectors.

The scoring core is bm25s (a document-term score matrix in scipy's sparse
CSC layout, saved as .npy files and memory-mapped on load); this module adds
what a retrieval engine needs around it: the analyzer, document ids, a
top-k that honours exclusions, and a crash-safe place in the index directory.

Analyzer (`analyze`): lowercase, runs of Unicode letters and digits, Lucene's
English stop words dropped, Porter-stemmed (PyStemmer) - the analysis
pyserini's and BEIR's BM25 baselines apply. A document is indexed as its
title and its text together, as those baselines index it.

Scoring: Lucene's BM25 (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), the
variant Lucene, Anserini and Elasticsearch use) with BEIR's Elasticsearch
parameters k1 = 1.2, b = 0.75. `method="robertson"` gives Robertson's idf
ln((N - df + 0.5) / (df + 0.5)) floored at 0, whose ranking equals
rank-bm25's BM25Okapi (tested) wherever no query term is in more than half
of the documents.
"""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders.units import Document

BM25_DIR = "bm25"
IDS = "doc_ids.json"
# Lucene's EnglishAnalyzer stop set (ENGLISH_STOP_WORDS_SET), the one pyserini uses.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
WORDS = re.compile(r"[^\W_]+")
DEFAULTS = {"method": "lucene", "k1": 1.2, "b": 0.75}


@lru_cache(maxsize=1)
def _bm25s() -> Any:
    import bm25s

    # bm25s sets its logger to DEBUG on import: its "Building index" lines are noise here.
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    return bm25s


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("porter")


def analyze(text: str) -> list[str]:
    """Index terms of a text: "The Runners' running!" -> ['runner', 'run']."""
    words = [w for w in WORDS.findall(text.lower()) if w not in STOP_WORDS]
    return _stemmer().stemWords(words) if words else []


def document_text(title: str, text: str) -> str:
    """What BM25 reads of a document: its title, then its text."""
    return f"{title}\n{text}" if title else text


def index_documents(docs: Iterable[Document], titles: bool = True) -> "BM25":
    """BM25 over documents as an index builds it (and eval's `bm25` system):
    each document's title, when its encoder reads titles, and its text."""
    return BM25.build((d.id, document_text(d.title if titles else "", d.text)) for d in docs)


class BM25:
    """BM25 over a fixed collection of (id, text) pairs."""

    def __init__(self, model: Any, ids: Sequence[str], params: dict[str, Any]) -> None:
        self.model = model
        self.ids = list(ids)
        self.params = params

    @classmethod
    def build(cls, docs: Iterable[tuple[str, str]], *, method: str = DEFAULTS["method"], k1: float = DEFAULTS["k1"],
              b: float = DEFAULTS["b"]) -> "BM25":
        bm25s = _bm25s()

        ids: list[str] = []
        terms: list[list[str]] = []
        for doc_id, text in docs:
            ids.append(doc_id)
            terms.append(analyze(text))
        if not ids:
            raise ValueError("a BM25 index needs at least one document")
        if len(set(ids)) != len(ids):
            raise ValueError("a BM25 index needs unique document ids")
        model = bm25s.BM25(method=method, k1=k1, b=b)
        # Term ids in sorted order ("" first, for documents with no index term,
        # which stay rows of zeros), not the order of a set of strings: two
        # builds of one corpus write the same files.
        vocab = {"": 0} | {t: i for i, t in enumerate(sorted({t for doc in terms for t in doc} - {""}), 1)}
        model.index(([[vocab[t] for t in doc] for doc in terms], vocab), show_progress=False)
        return cls(model, ids, {"method": method, "k1": k1, "b": b, "analyzer": "lucene-english-porter"})

    def __len__(self) -> int:
        return len(self.ids)

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document, in index order."""
        ids = self.model.get_tokens_ids(analyze(query))
        if not ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float32)

    def search(self, query: str, k: int, exclude: Iterable[str] = (), mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The top `k` (id, score) with a positive score, best first; ties go to
        the earlier document. Ids in `exclude`, and documents whose `mask`
        (bool per document, in index order) is False, are passed over."""
        scores = self.scores(query)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        return top_k(scores, self.ids, k, exclude)

    # -- on disk ---------------------------------------------------------------
    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save(str(directory), show_progress=False)
        (directory / IDS).write_text(json.dumps({"params": self.params, "ids": self.ids}, ensure_ascii=False))

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "BM25":
        bm25s = _bm25s()

        directory = Path(directory)
        meta = json.loads((directory / IDS).read_text())
        model = bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False, verbosity=0)
        if model.scores["num_docs"] != len(meta["ids"]):
            raise ValueError(f"{directory}: {model.scores['num_docs']} scored documents for {len(meta['ids'])} ids; the BM25 index is damaged")
        return cls(model, meta["ids"], meta["params"])


def top_k(scores: np.ndarray, ids: Sequence[str], k: int, exclude: Iterable[str] = ()) -> list[tuple[str, float]]:
    """The `k` best (id, score) with score > 0, best first, ties by position."""
    excluded = set(exclude)
    positive = np.flatnonzero(scores > 0)
    want = min(len(positive), k + len(excluded))
    if want <= 0:
        return []
    if want < len(positive):
        threshold = np.partition(scores[positive], len(positive) - want)[len(positive) - want]
        positive = positive[scores[positive] >= threshold]
    order = positive[np.lexsort((positive, -scores[positive]))]
    out = []
    for i in order:
        if ids[i] in excluded:
            continue
        out.append((ids[i], float(scores[i])))
        if len(out) == k:
            break
    return out
