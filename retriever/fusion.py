"""Fusion of ranked lists from different systems (dense, BM25, ...).

Pure functions over rankings, used by `Searcher.search(..., hybrid=True)`
(through `retriever.hybrid`), which `propdex eval` runs for its `A+bm25`
systems: the library and its scoreboard fuse the same way.

- `rrf`: reciprocal rank fusion (Cormack et al. 2009), score(d) = sum over
  lists of 1 / (k + rank), rank from 1, k = 60. Needs no score calibration,
  which is why it is the default: a MaxSim sum over query tokens, a cosine
  and a BM25 score live on unrelated scales.
- `minmax`: each list's scores mapped to [0, 1] by its own min and max, then
  summed with weights (a missing item scores 0 in that list).
- `interleave`: a second hop's ranking merged into the first's (multi-hop
  questions: the answer's paragraph is named only by the first paragraph).
"""
from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

RRF_K = 60
METHODS = ("rrf", "minmax")
# A second hop fills every 5th place: 2 of the top 10, the first hop's top 4
# untouched, so a single-hop question keeps its best answers where they were
# while a bridge question gets its second paragraph into the top 10.
HOP_EVERY = 5


def rrf(rankings: Sequence[Sequence[Hashable]], k: int = RRF_K, weights: Sequence[float] | None = None) -> list[tuple[Hashable, float]]:
    """Items of every ranking (best first), ordered by weighted reciprocal-rank
    sum; ties keep the order in which items were first met."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[Hashable, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + w / (k + rank)
    return sorted(scores.items(), key=lambda kv: -kv[1])


def minmax(runs: Sequence[Sequence[tuple[Hashable, float]]], weights: Sequence[float] | None = None) -> list[tuple[Hashable, float]]:
    """Items of every run of (item, score), ordered by the weighted sum of
    min-max normalised scores."""
    weights = weights or [1.0] * len(runs)
    scores: dict[Hashable, float] = {}
    for run, w in zip(runs, weights):
        for item, s in contributions(run, "minmax").items():
            scores[item] = scores.get(item, 0.0) + w * s
    return sorted(scores.items(), key=lambda kv: -kv[1])


def contributions(run: Sequence[tuple[Hashable, float]], method: str = "rrf") -> dict[Hashable, float]:
    """What each item of one run of (item, score), best first, adds to its
    fused score: 1 / (RRF_K + rank) under rrf, its score mapped to [0, 1] by
    the run's min and max under minmax (1 where all scores are equal)."""
    if method == "rrf":
        out: dict[Hashable, float] = {}
        for rank, (item, _) in enumerate(run, start=1):
            out.setdefault(item, 1 / (RRF_K + rank))
        return out
    if method == "minmax":
        if not run:
            return {}
        values = [s for _, s in run]
        lo, hi = min(values), max(values)
        span = hi - lo
        return {item: (s - lo) / span if span > 0 else 1.0 for item, s in run}
    raise ValueError(f"unknown fusion {method!r}; choose from {', '.join(METHODS)}")


def fuse(runs: Sequence[Sequence[tuple[Hashable, float]]], method: str = "rrf") -> list[tuple[Hashable, float]]:
    """Fuse runs of (item, score), best first, by `method` (rrf or minmax)."""
    if method == "rrf":
        return rrf([[item for item, _ in run] for run in runs])
    if method == "minmax":
        return minmax(runs)
    raise ValueError(f"unknown fusion {method!r}; choose from {', '.join(METHODS)}")


def interleave(first: Sequence[Hashable], second: Iterable[Hashable], every: int = HOP_EVERY, k: int | None = None) -> list[Hashable]:
    """`first` with every `every`-th place given to the best item of `second`
    not placed yet; once either list runs out, the other fills the rest. The
    first list's order is kept, and its top `every - 1` items stay on top.
    With `k`, the first k places: `second` is read only as far as they need
    (it may be a generator that does work for each item)."""
    if every < 2:
        raise ValueError(f"interleave needs every >= 2, got {every}")
    out: list[Hashable] = []
    seen: set[Hashable] = set()
    lists = [iter(first), iter(second)]

    def take(source: int) -> bool:
        for item in lists[source]:
            if item not in seen:
                seen.add(item)
                out.append(item)
                return True
        return False

    while k is None or len(out) < k:
        source = 1 if len(out) % every == every - 1 else 0
        if not take(source) and not take(1 - source):
            break
    return out


def hop_query(query: str, passage: str) -> str:
    """The second hop's query: the question and the first hop's best passage,
    whose words name the entity the question leads to (HotpotQA's bridge)."""
    return f"{query} {passage}"
