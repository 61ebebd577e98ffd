"""The lexical side of a search: BM25 rankings, their fusion with the dense
ranking, and the second hop for multi-hop questions.

Everything here runs over an index's persisted BM25 (`indexer.lexical`) and
ranked lists; the Searcher calls it for `hybrid`, `bm25` and `hops=2`, and
`propdex eval` calls the same functions for its `bm25`, `A+bm25` and
`:hops=2` systems, so a figure on the scoreboard is a figure for the search
a user runs.

A `where=` filter reaches BM25 as a mask over its documents
(`LexicalMasks`); deletions need none, since BM25 is rebuilt over the live
documents at every commit.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from propdex.encoders import Document
from propdex.indexer import lexical

from . import fusion
from .hits import Hit, lexical_hit

if TYPE_CHECKING:
    from .loading import Shard
    from .rescoring import Row
    from .settings import Level

# Hybrid search fuses the dense and the BM25 ranking of this many documents each.
FUSION_DEPTH = 100
# Filters whose BM25 masks a searcher keeps (a server asks the same few again and again).
KEPT_MASKS = 8


@dataclass(frozen=True)
class Lexical:
    """An index's BM25 as a retriever. `document(id)` is the live document
    with that id, or None; `holds(id)` says whether there is one (an
    incomplete index, or an updated document's earlier version, has none):
    BM25 never answers with a document the index lacks."""

    bm25: lexical.BM25
    document: Callable[[str], Document | None]
    holds: Callable[[str], bool]

    def ranking(self, query: str, k: int, skip: Iterable[str] = (), mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """BM25's best `k` (document id, score) for the query, best first."""
        return [(d, s) for d, s in self.bm25.search(query, k, exclude=skip, mask=mask) if self.holds(d)]

    def hop(self, question: str, seed: str, k: int, skip: Iterable[str] = (), mask: np.ndarray | None = None) -> list[tuple[str, float]]:
        """The second hop's documents: BM25 asked with the question and the
        text of the first hop's best document `seed` (which it never returns)."""
        doc = self.document(seed)
        if doc is None:
            return []
        return self.ranking(fusion.hop_query(question, doc.text), k, {*skip, seed}, mask)


def hop_order(first: Sequence[Hashable], second: Iterable[Hashable], k: int) -> list[Hashable]:
    """The k places of a two-hop ranking: the first hop's, with every
    fusion.HOP_EVERY-th place given to the second hop's best not yet placed
    (`second` is read only as far as the places need)."""
    return fusion.interleave(first, second, k=k)


def fuse_with_lexical(dense: Sequence[tuple[Hashable, float]], lexical_run: Sequence[tuple[str, float]],
                      doc_of: Callable[[Hashable], str] | None, method: str = "rrf") -> list[tuple[Hashable, float]]:
    """The dense run fused with BM25's document run, best first.

    At document level (`doc_of` None) both are runs of documents and a
    document either one found can be fused in. Below it, the dense run holds
    sentences or units, each taking its document's share of BM25's run: the
    fused items are the dense ones, re-ordered (ties keep the dense order)."""
    if doc_of is None:
        return fusion.fuse([list(dense), list(lexical_run)], method)
    own = fusion.contributions(dense, method)
    by_doc = fusion.contributions(lexical_run, method)
    scored = [(item, own[item] + by_doc.get(doc_of(item), 0.0)) for item, _ in dense]
    return sorted(scored, key=lambda t: -t[1])


def fused_rows(rows: Sequence["Row"], doc_of: Sequence[str], lexical_run: Sequence[tuple[str, float]], level: "Level", k: int,
               method: str, rescore: Callable[[list[str]], list[str]]) -> list["Row"]:
    """The best k of stage 2's rows fused with BM25's document run
    (`fuse_with_lexical`), as rows; `doc_of[ci]` is candidate ci's document.

    At document level a document only BM25 found may win a place: the dense
    side scores it then, for its sentence: `rescore(ids)` adds those it
    finds as candidates after the others, and returns their ids in order."""
    if level != "doc":
        fused = fuse_with_lexical([((ci, j), score) for score, ci, j in rows], lexical_run, lambda row: doc_of[row[0]], method)
        return [(score, ci, j) for (ci, j), score in fused[:k]]
    fused = fuse_with_lexical([(doc_of[ci], score) for score, ci, _ in rows], lexical_run, None, method)[:k]
    by_doc = {doc_of[ci]: (ci, j) for _, ci, j in rows}
    missing = [d for d, _ in fused if d not in by_doc]
    if missing:
        for i, doc_id in enumerate(rescore(missing)):
            by_doc[doc_id] = (len(doc_of) + i, 0)
    return [(score, *by_doc[d]) for d, score in fused if d in by_doc]


def unscored(lexical_run: Sequence[tuple[str, float]], scored: Iterable[str], k: int) -> list[str]:
    """BM25's best k documents that the dense side has not scored. Below
    document level their sentences must be scored to be fused at all."""
    have = set(scored)
    return [d for d, _ in lexical_run[:k] if d not in have]


def lexical_hits(search: Lexical, query: str, k: int, skip: set[str], mask: np.ndarray | None) -> list[Hit]:
    """BM25's best k documents as hits (`bm25=True`)."""
    terms = set(lexical.analyze(query))
    return [_lexical_hit(search, rank, doc_id, score, terms)
            for rank, (doc_id, score) in enumerate(search.ranking(query, k, skip, mask), start=1)]


def second_hop(search: Lexical, query: str, hits: list[Hit], k: int, level: "Level", skip: set[str], mask: np.ndarray | None,
               best_sentences: Callable[[list[str]], list[Hit]]) -> list[Hit]:
    """The first hop's `hits` with BM25's second hop from the best of them
    placed in (`hop_order`). At sentence level a hop document offers its best
    sentence for the question (`best_sentences(ids)`, in the order given),
    in BM25's order and with its BM25 score; its hits say `hop=2`."""
    seed = hits[0].doc_id
    second = dict(search.hop(query, seed, k + 1, skip, mask))
    if level == "sentence":
        first = {(h.doc_id, h.sentence_index): h for h in hits}
        offered: dict[tuple[str, int], Hit] = {}

        def offers() -> Iterator[tuple[str, int]]:
            # Scored a batch at a time, as the places reach them: finding a document's best
            # sentence scores every sentence of it, and most of the hop's documents get no place.
            ids, batch = list(second), k // fusion.HOP_EVERY + 2
            for a in range(0, len(ids), batch):
                for h in best_sentences(ids[a : a + batch]):
                    offered[h.doc_id, h.sentence_index] = replace(h, score=second[h.doc_id], hop=2)
                    yield h.doc_id, h.sentence_index

        return [replace(first.get(key) or offered[key], rank=rank)
                for rank, key in enumerate(hop_order(list(first), offers(), k), start=1)]
    by_doc = {h.doc_id: h for h in hits}
    seed_doc = search.document(seed)
    assert seed_doc is not None  # a hit comes from a shard
    terms = set(lexical.analyze(fusion.hop_query(query, seed_doc.text)))
    # Hits are built only for the second hop's documents that get a place.
    return [replace(by_doc[d], rank=rank, hop=1) if d in by_doc else replace(_lexical_hit(search, rank, d, second[d], terms), hop=2)
            for rank, d in enumerate(hop_order(list(by_doc), list(second), k), start=1)]


def _lexical_hit(search: Lexical, rank: int, doc_id: str, score: float, terms: set[str]) -> Hit:
    doc = search.document(doc_id)
    assert doc is not None  # BM25's rankings hold only the documents the index holds
    return lexical_hit(rank, doc, score, terms)


class LexicalMasks:
    """Which of BM25's documents pass a `where` filter, per filter; the last
    KEPT_MASKS filters' masks are kept, as a filter is checked against every
    document BM25 holds."""

    def __init__(self, shards: Sequence["Shard"]) -> None:
        self.shards = shards
        self._masks: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def mask(self, bm25: Callable[[], lexical.BM25], allowed: Sequence[np.ndarray | None], where: object) -> np.ndarray | None:
        """The mask for `where` (None: no filter), given the per-shard masks
        of the documents it allows; `bm25()` is the index's BM25."""
        if not where:
            return None
        key = json.dumps(where, sort_keys=True)
        with self._lock:
            if key not in self._masks:
                ids = {doc_id for shard, mask in zip(self.shards, allowed) if mask is not None and mask.any()
                       for doc_id, o in shard.store.id_ordinals() if mask[o]}
                if len(self._masks) >= KEPT_MASKS:
                    self._masks.pop(next(iter(self._masks)))
                index = bm25()
                self._masks[key] = np.fromiter((d in ids for d in index.ids), dtype=bool, count=len(index))
            return self._masks[key]
