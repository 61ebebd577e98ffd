"""Stage 1 alone, shard by shard: ms a query in each shard's ANN search (20 SciFact queries, the default depths),
on the grown index and the bulk build that eval/results/scoreboard/loadtest_scifact.sh makes."""
import json, itertools, time, numpy as np, propdex
from propdex.retriever import candidates as c
from propdex.retriever.searcher import Searcher
qs = [json.loads(l)["text"] for l in itertools.islice(open("../shared/data/beir/scifact/queries.jsonl"), 20)]
for name in ["grown", "bulk"]:
    s = Searcher.load(f"runs/loadtest/{name}", device="cpu")
    vecs = [e.vectors for e in s.encoder.encode_queries(qs)]
    from propdex.retriever.settings import SearchSettings
    d = c.Depths.of(SearchSettings.of(k=5), max(len(v) for v in vecs), s.vectors_per_doc, s.nprobe, s.lists,
                     s.encoder.pooled_tokens)
    print(name, "nprobe", d.nprobe, "per_vector", d.per_vector, [sh.index.ntotal for sh in s.shards])
    per = np.zeros(len(s.shards))
    for v in vecs:
        for i, sh in enumerate(s.shards):
            t = time.perf_counter(); c._shard_hits(sh, v, d.per_vector, d.nprobe, None); per[i] += time.perf_counter() - t
    print(" ms per query per shard", np.round(per / len(vecs) * 1000, 1), "sum", round(per.sum() / len(vecs) * 1000, 1))
    s.close()
