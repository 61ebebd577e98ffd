"""One query at a time on a grown index and on the bulk build of the same documents (eval/results/scoreboard/loadtest_scifact.sh
builds both under runs/loadtest): p50 and p95 over 60 SciFact queries, and ms a query in each stage of the search."""
import collections, itertools, json, time
import numpy as np
import propdex
from propdex.retriever import candidates, rescoring, searcher

qs = [json.loads(line)["text"] for line in itertools.islice(open("../shared/data/beir/scifact/queries.jsonl"), 60)]
spent = collections.defaultdict(float)


def timed(owner, name, label):
    real = getattr(owner, name)

    def run(*a, **kw):
        start = time.perf_counter()
        try:
            return real(*a, **kw)
        finally:
            spent[label] += time.perf_counter() - start
    setattr(owner, name, run)


timed(candidates.CandidateGeneration, "search", "stage 1 (ANN)")
timed(candidates, "best_documents", "stage 1 (estimates)")
timed(rescoring, "rescore", "stage 2")
timed(searcher, "dense_hits", "hits")
for name in ["grown", "bulk"]:
    ix = propdex.Index.open(f"runs/loadtest/{name}", device="cpu")
    ix.search(qs[0])
    spent.clear()
    t = []
    for q in qs:
        s = time.perf_counter(); ix.search(q, k=5); t.append((time.perf_counter() - s) * 1000)
    print(name, "p50 %.1f p95 %.1f" % (np.percentile(t, 50), np.percentile(t, 95)), {k: round(v / len(qs) * 1000, 1) for k, v in spent.items()})
    ix.close()
