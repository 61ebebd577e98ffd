"""The lexical side of a search: BM25 rankings, their fusion with the dense
ranking, and the second hop for multi-hop questions.

Everything here runs over an index's persisted BM25 (`indexer.lexical`) and
ranked lists; the Searcher calls it for `hybrid`, `bm25` and `hops=2`, and
`propdex eval` calls the same functions for its `bm25`, `A+bm25` and
`:hops=2` systems, so a figure on the scoreboard is a figure for the search
a user runs.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from propdex.encoders import Document
from propdex.indexer import lexical

from . import fusion

# Hybrid search fuses the dense and the BM25 ranking of this many documents each.
FUSION_DEPTH = 100


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


def hop_order(first: Sequence[Hashable], second: Sequence[Hashable], k: int) -> list[Hashable]:
    """The places of a two-hop ranking: the first hop's, with every
    fusion.HOP_EVERY-th place given to the second hop's best not yet placed."""
    return fusion.interleave(first, second)[:k]


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
