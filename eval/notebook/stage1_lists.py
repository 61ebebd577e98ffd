"""Stage 1 at one thread on scale-curve indexes that differ only in their IVF lists (the same vectors, the
same codes budget): for each index and probe count, the top-10 documents' agreement with the same index probed
in every list (stage 1 exact over its codes: what stage 1 alone can lose) and with the first index probed in
every list (`first`: a common reference, its codec's rounding included), whether the first document is the
same, stage-1 and whole-query ms. Dev queries (Wikipedia sentences, not HotpotQA: `dev_queries`). An index
whose lists are found through a graph (`IVF8192_HNSW32`) is not probed in every list: its rows compare with
the first index only.

    python eval/notebook/stage1_lists.py 1000 runs/bench/scale/tokens-1000:8,16 runs/lab/s1000-ivf8192:8,16,32
"""
import json, sys
import numpy as np
from dev_queries import dev_queries, timed_runs
from propdex.retriever import Searcher
from propdex.retriever.candidates import EVERY_LIST

n_indexed = int(sys.argv[1])
queries = dev_queries(n_indexed)
report, first = {}, None
for spec in sys.argv[2:]:
    index, probes = spec.split(":")
    with Searcher.load(index, threads=1, device="cpu") as s:
        s.search("warm up", k=10)

        def run(nprobe):
            return timed_runs(s, queries, nprobe)

        graph = "HNSW" in s.manifest["index"]["factory"]
        ref, ms, st = (None, None, None) if graph else run(EVERY_LIST)
        first = first or ref
        print(index, "every list", ms, st, flush=True)
        rows = {} if graph else {"every": {"ms": ms, "stages": st}}
        for p in [int(x) for x in probes.split(",")]:
            got, ms, st = run(p)
            source = float(np.mean([g[:1] == [d] for g, (q, d) in zip(got, queries) if d]))
            rows[p] = {"ms": ms, "stages": st, "source first": round(source, 3)}
            for name, against in (("", ref), (" (first)", first)):
                if against is not None:
                    rows[p]["overlap@10" + name] = round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, against)])), 4)
                    rows[p]["same first" + name] = round(float(np.mean([a[:1] == b[:1] for a, b in zip(got, against)])), 3)
            print(index, f"nprobe {p}", rows[p], flush=True)
        report[index] = {"factory": s.manifest["index"]["factory"], "rows": rows}
print(json.dumps(report))
