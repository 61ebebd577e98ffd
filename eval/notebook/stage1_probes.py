"""Probes a multi-vector query's vectors make, against a deep reference (64 probes): top-10 agreement and
stage-1 time on dev queries (Wikipedia sentences, not HotpotQA) over a scale-curve index.

    python eval/notebook/stage1_probes.py runs/bench/scale/tokens-1000 1000 4,8,16
"""
import sys
from pathlib import Path
import numpy as np
from dev_queries import dev_queries, timed_runs
from propdex.retriever import Searcher
index, n_indexed = sys.argv[1], int(sys.argv[2]); probes = [int(x) for x in sys.argv[3].split(",")]
queries = dev_queries(n_indexed)
with Searcher.load(index, threads=1, device="cpu") as s:
    s.search("warm up", k=10)
    def run(nprobe): return timed_runs(s, queries, nprobe)
    ref, ms, st = run(64); print("nprobe 64", round(ms, 1), st)
    for p in probes:
        got, ms, st = run(p)
        ov = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref)]); t1 = np.mean([a[:1] == b[:1] for a, b in zip(got, ref)])
        src = np.mean([g[0] == d for g, (q, d) in zip(got, queries) if d])
        print(f"nprobe {p}: {ms:.1f} ms {st} overlap {ov:.4f} top1 {t1:.3f} source-top1 {src:.3f}")
