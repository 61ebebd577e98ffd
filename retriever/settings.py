"""SearchSettings: how one search runs, typed and validated once.

The CLI's flags, eval's system options (text) and the Python API's keywords
all become one of these before a query is encoded; a bad value is a
ValueError naming it. Settings belong to a call: nothing here changes the
Searcher, so one call's nprobe never leaks into the next.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from propdex.encoders.spec import convert

from .filters import parse_where
from .fusion import METHODS as FUSIONS

Level = Literal["doc", "sentence", "unit"]
LEVELS = ("doc", "sentence", "unit")


@dataclass(frozen=True)
class SearchSettings:
    k: int = 10
    level: Level = "doc"
    nprobe: int | None = None  # IVF lists probed per query vector (None: the searcher's default)
    candidates: int | None = None  # ANN hits per query vector and shard
    rerank: int | None = None  # stage 1's best documents re-scored exactly and ranked first (up to 2k are re-scored)
    hybrid: bool = False  # fuse with the index's BM25
    fusion: str = "rrf"  # how hybrid fuses: rrf (reciprocal rank fusion) or minmax (normalised score sums)
    bm25: bool = False  # BM25 alone
    hops: int = 1  # 2: a second BM25 hop for multi-hop questions
    # A document scores as its best window of consecutive sentences of at
    # most this many units; None: the encoder's passage (Encoder.passage_units),
    # 0: the whole document.
    window: int | None = None
    where: Mapping[str, Any] | None = None  # metadata filter (retriever.filters): field -> value(s) or {operator: value}

    def __post_init__(self) -> None:
        for name in ("k", "nprobe", "candidates", "rerank", "hops", "hybrid", "bm25", "window"):
            kind = {"k": int, "hops": int, "hybrid": bool, "bm25": bool}.get(name, int | None)
            object.__setattr__(self, name, convert(getattr(self, name), kind, name))
        if self.level not in LEVELS:
            raise ValueError(f"unknown level {self.level!r}; choose from {', '.join(LEVELS)}")
        for name in ("k", "nprobe", "candidates", "rerank"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if self.window is not None and self.window < 0:
            raise ValueError(f"window must be 0 (the whole document) or a number of units, got {self.window}")
        if self.hops not in (1, 2):
            raise ValueError(f"hops must be 1 or 2, got {self.hops}")
        if self.hops == 2 and self.level == "unit":
            raise ValueError("hops=2 ranks documents or sentences: use level='doc' or 'sentence'")
        if self.fusion not in FUSIONS:
            raise ValueError(f"unknown fusion {self.fusion!r}; choose from {', '.join(FUSIONS)}")
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
