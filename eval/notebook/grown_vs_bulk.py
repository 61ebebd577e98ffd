"""One query at a time on a grown index and on the bulk build of the same documents (eval/results/scoreboard/loadtest_scifact.sh
builds both under runs/loadtest): p50 and p95 over 60 SciFact queries."""
import json, time, itertools, numpy as np, propdex
qs = [json.loads(l)["text"] for l in itertools.islice(open("../shared/data/beir/scifact/queries.jsonl"), 60)]
for name in ["grown", "bulk"]:
    ix = propdex.Index.open(f"runs/loadtest/{name}", device="cpu")
    ix.search(qs[0])
    t = []
    for q in qs:
        s = time.perf_counter(); ix.search(q, k=5); t.append((time.perf_counter() - s) * 1000)
    print(name, "p50 %.1f p95 %.1f" % (np.percentile(t, 50), np.percentile(t, 95)), [ (s.store.info.get("vectors"), len(s.store)) for s in ix._reading.__self__._searcher.shards] if False else "")
    ix.close()
