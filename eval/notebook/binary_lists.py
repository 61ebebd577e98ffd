"""A binary index's lists against a scan of every code: top-10 agreement and time on dev queries
(Wikipedia sentences, not HotpotQA or SciFact) over an index of the first N extract articles. Probing every
list ranks exactly as a scan does (the reference); the default probes 1/256 of them.

    propdex index ../shared/data/wikipedia/extracted --encoder tokens --limit 200 --store binary --bits 256 --out runs/lab/bin-200
    python eval/notebook/binary_lists.py runs/lab/bin-200 200
"""
import json, sys, time
from pathlib import Path
import numpy as np
from dev_queries import dev_queries
from propdex.retriever import Searcher, stage_times
index, n_indexed = sys.argv[1], int(sys.argv[2])
factory = json.loads((Path(index) / "manifest.json").read_text())["index"]["factory"]
queries = dev_queries(n_indexed)
with Searcher.load(index, threads=1, device="cpu") as s:
    s.search("warm up", k=10)
    def run(**kw):
        out = []
        with stage_times() as spent:
            t = time.perf_counter()
            for q, _ in queries: out.append([h.doc_id for h in s.search(q, k=10, **kw)])
            ms = (time.perf_counter() - t) * 1000 / len(queries)
        return out, ms, {k: round(v * 1000 / len(queries), 1) for k, v in spent.items()}
    print(factory, len(queries), "queries")
    ref, ms, st = run(nprobe=1 << 20); print(f"every list (a scan's ranking): {ms:.1f} ms {st}")
    for kw in ({}, {"nprobe": 64}):
        got, ms, st = run(**kw)
        ov = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, ref)]); t1 = np.mean([a[:1] == b[:1] for a, b in zip(got, ref)])
        src = [g[0] == d for g, (q, d) in zip(got, queries) if d]; src_ref = [g[0] == d for g, (q, d) in zip(ref, queries) if d]
        print(f"{kw or 'default probes'}: {ms:.1f} ms {st} overlap {ov:.4f} top1 {t1:.3f} source-top1 {np.mean(src):.3f} (every list {np.mean(src_ref):.3f})")
