"""Stage 2 over the windows stage 1 hit against every window, on the scale
curve's indexes (`propdex bench --sections scale --scale-sizes 100,1000
--work runs/bench`): p50 and mean stage times of the bench's queries (the
first 200 HotpotQA-600 questions, one at a time, 1 thread), and on held-aside
dev queries (Wikipedia sentences, not HotpotQA) how often the two agree.

    python eval/notebook/stage2_windows.py runs/bench/scale/tokens-100 runs/bench/scale/tokens-1000
"""
from __future__ import annotations

import random
import re
import sys
import time
from pathlib import Path

import numpy as np

from propdex.eval.datasets import load_hotpotqa
from propdex.eval.scale import first_documents
from propdex.retriever import Searcher, stage_times

BENCH = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=200).queries]


def dev_queries(n_indexed: int) -> list[str]:
    """75 sentences from deep inside indexed articles and 75 from articles past the index."""
    docs = first_documents(Path("../shared/data/wikipedia/extracted"), min(6514, max(4 * n_indexed, 2000)))
    rng = random.Random(7)

    def sentences(d):
        return [s for s in re.split(r"(?<=[.!?])\s+", d.text) if 8 <= len(s.split()) <= 30]

    inside = [d for d in docs[:n_indexed] if len(sentences(d)) > 40]
    out = [rng.choice(sentences(d)[30:]) for d in rng.sample(inside, min(75, len(inside)))]
    return out + [rng.choice(sentences(d)) for d in rng.sample(docs[n_indexed:], 75) if sentences(d)]


def timed(searcher: Searcher, queries: list[str], **options) -> tuple[float, dict[str, float], list[list[str]]]:
    ranked, times = [], []
    with stage_times() as spent:
        for q in queries:
            started = time.perf_counter()
            ranked.append([h.doc_id for h in searcher.search(q, k=10, **options)])
            times.append((time.perf_counter() - started) * 1000)
    return float(np.median(times)), {k: round(v * 1000 / len(queries), 1) for k, v in spent.items()}, ranked


for index in sys.argv[1:]:
    with Searcher.load(index, threads=1, device="cpu") as searcher:
        searcher.search(BENCH[0], k=10)
        n = len(searcher.shards[0].store)
        for exact in (True, False):
            p50, stages, _ = timed(searcher, BENCH, all_windows=exact)
            print(f"{index} ({n} articles) {'every window' if exact else 'hit windows '}: p50 {p50:.1f} ms, {stages}")
        dev = dev_queries(n)
        _, _, a = timed(searcher, dev, all_windows=True)
        _, _, b = timed(searcher, dev, all_windows=False)
        print(f"  dev ({len(dev)} queries): top-10 overlap {np.mean([len(set(x) & set(y)) / 10 for x, y in zip(a, b)]):.4f}, "
              f"same top 1 {np.mean([x[:1] == y[:1] for x, y in zip(a, b)]):.3f}, identical top 10 {np.mean([x == y for x, y in zip(a, b)]):.3f}")
