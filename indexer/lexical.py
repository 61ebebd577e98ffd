"""BM25: the lexical index every propdex index carries beside its vectors.

Segments, as Lucene keeps them: each shard of an index holds a BM25 segment
of its own documents (`Segment`: every term's postings, document ids and
lengths, saved as .npy files and memory-mapped on load), written once when
the shard is and never changed. Collection statistics (live documents,
average length, each term's document frequency) are combined across the
segments when a searcher opens them, deletions honoured, so a document's
score is the one a single index built over the live documents gives it:
adding a document costs a segment of its size, not a rebuild of the corpus.

Analyzer (`analyze`): lowercase, runs of Unicode letters and digits, Lucene's
English stop words dropped, Porter-stemmed (PyStemmer) - the analysis
pyserini's and BEIR's BM25 baselines apply. A document is indexed as its
title and its text together, as those baselines index it.

Scoring: Lucene's BM25 (idf = ln(1 + (N - df + 0.5) / (df + 0.5)), tf part
tf / (tf + k1 (1 - b + b dl / avgdl)), the variant Lucene, Anserini and
Elasticsearch use) with BEIR's Elasticsearch parameters k1 = 1.2, b = 0.75,
computed in float32 as bm25s computes it (tested equal). `method="robertson"`
gives Robertson's idf ln((N - df + 0.5) / (df + 0.5)) floored at 0, whose
ranking equals rank-bm25's BM25Okapi (tested) wherever no query term is in
more than half of the documents. Indexes from before segments keep one
bm25s directory (`Bm25sIndex`), read as they were written.
"""
from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders.units import Document

from . import mapped

BM25_DIR = "bm25"
IDS = "doc_ids.json"
# Lucene's EnglishAnalyzer stop set (ENGLISH_STOP_WORDS_SET), the one pyserini uses.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)
WORDS = re.compile(r"[^\W_]+")
DEFAULTS = {"method": "lucene", "k1": 1.2, "b": 0.75}
ANALYZER = "lucene-english-porter"
PARAMS = {**DEFAULTS, "analyzer": ANALYZER}  # what an index records of its BM25


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    import Stemmer

    return Stemmer.Stemmer("porter")


def analyze(text: str) -> list[str]:
    """Index terms of a text: "The Runners' running!" -> ['runner', 'run']."""
    words = [w for w in WORDS.findall(text.lower()) if w not in STOP_WORDS]
    return _stemmer().stemWords(words) if words else []


def matching_terms(words: Iterable[str], terms: set[str]) -> set[str]:
    """The distinct analysed words (lower case, as `analyze` splits a text)
    whose stem is one of `terms`. A long article repeats its words and
    holds thousands of distinct ones, and stemming them cost more than the
    BM25 search that found it. Porter's rules rewrite a word's ending, never
    its first letter, and empty only "s": the words stemmed (each once) are
    those that begin as a term does, and the shortest."""
    heads = {t[:1] for t in terms}
    kept = [w for w in set(words) if (w[:1] in heads or len(w) <= 3) and w not in STOP_WORDS]
    return {w for w, stem in zip(kept, _stemmer().stemWords(kept)) if stem in terms} if kept else set()


def document_text(title: str, text: str) -> str:
    """What BM25 reads of a document: its title, then its text."""
    return f"{title}\n{text}" if title else text


def index_documents(docs: Iterable[Document], titles: bool = True) -> "BM25":
    """BM25 over documents as an index builds it (and eval's `bm25` system):
    each document's title, when its encoder reads titles, and its text."""
    return BM25.build((d.id, document_text(d.title if titles else "", d.text)) for d in docs)


SEGMENT_DIR = "bm25"  # a shard's segment, inside the shard's directory
_ARRAYS = ("lengths", "indptr", "docs", "tfs")


@dataclass(frozen=True)
class Segment:
    """BM25's postings over a fixed list of documents: for term t (column
    vocab[t]), the documents holding it are docs[indptr[t]:indptr[t+1]]
    (ascending) with its counts tfs[...] in them; lengths[i] is document
    i's number of index terms. Nothing in it depends on other documents."""

    ids: list[str]
    vocab: dict[str, int]
    lengths: np.ndarray  # int32 (n,)
    indptr: np.ndarray  # int64 (terms + 1,)
    docs: np.ndarray  # int32 (postings,)
    tfs: np.ndarray  # float32 (postings,)

    @classmethod
    def build(cls, docs: Iterable[tuple[str, str]]) -> "Segment":
        ids: list[str] = []
        counts: list[Counter[str]] = []
        lengths: list[int] = []
        for doc_id, text in docs:
            terms = analyze(text)
            ids.append(doc_id)
            counts.append(Counter(terms))
            lengths.append(len(terms))
        if len(set(ids)) != len(ids):
            raise ValueError("a BM25 segment needs unique document ids")
        terms = sorted({t for c in counts for t in c})
        vocab = {t: i for i, t in enumerate(terms)}
        col = np.fromiter((vocab[t] for c in counts for t in c), np.int64, count=sum(map(len, counts)))
        row = np.repeat(np.arange(len(ids), dtype=np.int32), [len(c) for c in counts])
        tf = np.fromiter((n for c in counts for n in c.values()), np.float32, count=len(col))
        order = np.lexsort((row, col))  # by term, then document
        indptr = np.zeros(len(terms) + 1, np.int64)
        np.cumsum(np.bincount(col, minlength=len(terms)), out=indptr[1:])
        return cls(ids, vocab, np.asarray(lengths, np.int32), indptr, row[order], tf[order])

    def __len__(self) -> int:
        return len(self.ids)

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        col = self.vocab.get(term)
        if col is None:
            return None
        a, b = int(self.indptr[col]), int(self.indptr[col + 1])
        return self.docs[a:b], self.tfs[a:b]

    def save(self, directory: Path) -> None:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        for name in _ARRAYS:
            np.save(directory / f"{name}.npy", getattr(self, name))
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        (directory / IDS).write_text(json.dumps({"ids": self.ids, "terms": terms}, ensure_ascii=False))

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "Segment":
        directory = Path(directory)
        meta = json.loads((directory / IDS).read_text())
        arrays = {name: mapped.load(directory / f"{name}.npy", mmap=mmap) for name in _ARRAYS}
        segment = cls(meta["ids"], {t: i for i, t in enumerate(meta["terms"])}, **arrays)
        if len(segment.lengths) != len(segment.ids) or len(segment.indptr) != len(meta["terms"]) + 1 \
                or len(segment.docs) != len(segment.tfs) or int(segment.indptr[-1]) != len(segment.docs):
            raise ValueError(f"{directory}: BM25 segment arrays disagree in length; the segment is damaged")
        return segment


class BM25:
    """BM25 over segments, documents in segment order. `live[i]` (bool per
    document of segment i, or None: all) leaves deleted documents out of
    the statistics and the scores, as if the index had been built without
    them."""

    def __init__(self, segments: Sequence[Segment], live: Sequence[np.ndarray | None] | None = None,
                 params: dict[str, Any] | None = None) -> None:
        self.segments = list(segments)
        self.live = list(live) if live is not None else [None] * len(self.segments)
        self.params = {**PARAMS, **(params or {})}
        self.ids = [d for seg in self.segments for d in seg.ids]
        self.offsets = np.cumsum([0, *map(len, self.segments)])
        self.documents = sum(len(s) if m is None else int(m.sum()) for s, m in zip(self.segments, self.live))
        total = sum(int(s.lengths.sum() if m is None else s.lengths[m].sum()) for s, m in zip(self.segments, self.live))
        self.avgdl = total / self.documents if self.documents else 0.0

    @classmethod
    def build(cls, docs: Iterable[tuple[str, str]], *, method: str = DEFAULTS["method"], k1: float = DEFAULTS["k1"],
              b: float = DEFAULTS["b"]) -> "BM25":
        segment = Segment.build(docs)
        if not len(segment):
            raise ValueError("a BM25 index needs at least one document")
        return cls([segment], params={"method": method, "k1": k1, "b": b})

    def __len__(self) -> int:
        return len(self.ids)

    def idf(self, df: int) -> float:
        n = self.documents
        if self.params["method"] == "robertson":
            return math.log(max((n - df + 0.5) / (df + 0.5), 1.0))
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def scores(self, query: str) -> np.ndarray:
        """The BM25 score of every document, in index order (0 for a deleted one).
        A term repeated in the query counts each time, as bm25s counts it."""
        scores = np.zeros(len(self.ids), dtype=np.float32)
        parts: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}  # a term's postings and scores, made once however often it comes
        for term in analyze(query):
            if term not in parts:
                parts[term] = self._term_scores(term)
            for rows, part in parts[term]:
                scores[rows] += part
        return scores

    def _term_scores(self, term: str) -> list[tuple[np.ndarray, np.ndarray]]:
        """(rows in index order, float32 scores) of the documents holding
        `term`, a pair a segment (none where no live document holds it)."""
        k1, b = self.params["k1"], self.params["b"]
        found = [(i, p) for i, seg in enumerate(self.segments) if (p := seg.postings(term)) is not None]
        df = sum(len(d) if self.live[i] is None else int(np.count_nonzero(self.live[i][d])) for i, (d, _) in found)
        if not df:
            return []
        idf = np.float64(np.float32(self.idf(df)))  # bm25s keeps idf in float32, the rest in float64
        out = []
        for i, (docs, tfs) in found:
            tf = tfs.astype(np.float64)
            part = (idf * (tf / (k1 * ((1 - b) + b * self.segments[i].lengths[docs] / self.avgdl) + tf))).astype(np.float32)
            if self.live[i] is not None:
                part = np.where(self.live[i][docs], part, np.float32(0))
            out.append((self.offsets[i] + docs, part))
        return out

    def search(self, query: str, k: int, exclude: Iterable[str] = (), mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The top `k` (id, score) with a positive score, best first; ties go to
        the earlier document. Ids in `exclude`, and documents whose `mask`
        (bool per document, in index order) is False, are passed over."""
        scores = self.scores(query)
        if mask is not None:
            scores = np.where(mask, scores, 0.0)
        return top_k(scores, self.ids, k, exclude)


class Bm25sIndex(BM25):
    """An index's BM25 from before segments: one bm25s directory over the
    live documents, its scores precomputed, read as written."""

    def __init__(self, model: Any, ids: Sequence[str], params: dict[str, Any]) -> None:
        self.model, self.ids, self.params = model, list(ids), params
        self.documents = len(self.ids)

    def scores(self, query: str) -> np.ndarray:
        ids = self.model.get_tokens_ids(analyze(query))
        if not ids:
            return np.zeros(len(self.ids), dtype=np.float32)
        return np.asarray(self.model.get_scores_from_ids(ids), dtype=np.float32)

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> "Bm25sIndex":
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it sets DEBUG on import
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
