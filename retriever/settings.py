"""SearchSettings: how one search runs, typed and validated once.

Each option is declared here once (encoders.options): the CLI's flags, the
server's request fields and GET parameters and eval's system options are
derived from these fields, and all of them, with the Python API's keywords,
become one of these before a query is encoded; a bad value is a ValueError
naming it. Settings belong to a call: nothing here changes the
Searcher, so one call's nprobe never leaks into the next.
"""
from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from propdex.encoders.options import check, option

from .filters import cli_clause, parse_where
from .fusion import METHODS as FUSIONS

Level = Literal["doc", "sentence", "unit"]
LEVELS = ("doc", "sentence", "unit")


def where_clause(text: str) -> tuple[str, str, object]:
    """A --where clause (FIELD=VALUE, FIELD>=VALUE, ...: retriever.filters.cli_clause), for argparse."""
    try:
        return cli_clause(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclass(frozen=True)
class SearchSettings:
    k: int = option(10, "number of results", minimum=1, flag="-k")
    level: Level = option("doc", "doc, sentence or unit (with --context: sentence)", choices=LEVELS)
    nprobe: int | None = option(None, "IVF lists probed per query vector (default: by the query's vector count, the index's "
                                      "lists and the tokens a stored vector pools: retriever.candidates.default_nprobe)", minimum=1)
    candidates: int | None = option(None, "ANN hits per query vector and shard", minimum=1)
    rerank: int | None = option(None, "stage 1's best documents re-scored exactly and ranked first (default: fewer for a "
                                      "multi-vector query than for one vector); up to 2k are re-scored, the rest ranked after "
                                      "them", minimum=1)
    hybrid: bool = option(False, "fuse the dense ranking with the index's BM25")
    fusion: str = option("rrf", "how hybrid fuses: rrf (reciprocal rank fusion) or minmax (sums of min-max normalised "
                                "scores)", choices=FUSIONS)
    bm25: bool = option(False, "answer from the index's BM25 alone (document level)")
    hops: int = option(1, "2: ask BM25 again with the question and the best document, for multi-hop questions "
                          "(document or sentence level)", choices=(1, 2))
    window: int | None = option(None, "a document scores by its best window of consecutive sentences of at most this "
                                      "many vectors (default: the encoder's passage; 0: the whole document, whose MaxSim "
                                      "favours long documents)")
    all_windows: bool = option(False, "stage 2 scores every window of a candidate document, not only those that stage 1's "
                                      "hits fell in (exact MaxSim over the whole document; slower on long documents)")
    where: Mapping[str, Any] | None = option(
        None, "keep documents whose metadata meets every condition: FIELD=VALUE (JSON: year=2021, tag='[\"a\",\"b\"]' "
              "for any of a list; else text), year>=2020, year<2024, team!=web, path^=/notes/ (a prefix); repeat to "
              "require several", action="append", metavar="FIELD=VALUE", type=where_clause)

    def __post_init__(self) -> None:
        check(self, skip=("where",))
        if self.window is not None and self.window < 0:
            raise ValueError(f"window must be 0 (the whole document) or a number of units, got {self.window}")
        if self.hops == 2 and self.level == "unit":
            raise ValueError("hops=2 ranks documents or sentences: use level='doc' or 'sentence'")
        if self.hybrid and self.bm25:
            raise ValueError("choose hybrid or bm25, not both")
        if self.bm25 and self.level != "doc":
            raise ValueError("BM25 alone ranks documents: use level='doc', or hybrid=True for sentences and units")
        object.__setattr__(self, "where", parse_where(self.where))

    @classmethod
    def of(cls, **options: Any) -> "SearchSettings":
        """Settings from keywords, with a clear error for one that does not exist."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"unknown search option {unknown[0]!r}; the options are {', '.join(sorted(known))}")
        return cls(**options)
