"""Where a search spends its time, stage by stage, for whoever asks.

    with stage_times() as spent:
        searcher.search(query)
    spent  # {"encode": s, "stage 1": s, "stage 2": s, "aggregate": s}

Stage 1 is the ANN search and the documents' estimates, stage 2 the exact
re-scoring, `aggregate` the rows and hits at the level asked; a hybrid
search's BM25 and fusion (with its own hits) count as `fusion` instead.

The searcher marks its stages (`stage`); outside `stage_times` a mark costs
one context-variable read, so the shipped search path is the one timed. A
benchmark reads the split (a scale curve: which part grows with the index)
without a copy of the search that could drift from it. Stage 1's shards
search in a pool, timed from the thread that waits for them: wall time, as
the caller sees it.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

STAGES = ("encode", "stage 1", "stage 2", "aggregate", "fusion")

_spent: ContextVar[dict[str, float] | None] = ContextVar("propdex_stage_times", default=None)


@contextmanager
def stage_times() -> Iterator[dict[str, float]]:
    """Seconds spent in each stage by the searches inside the block, summed."""
    spent: dict[str, float] = defaultdict(float)
    token = _spent.set(spent)
    try:
        yield spent
    finally:
        _spent.reset(token)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Count the block's wall time to stage `name`, where someone is timing."""
    spent = _spent.get()
    if spent is None:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        spent[name] += time.perf_counter() - start
