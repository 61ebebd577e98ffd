"""Which query side `nugget` searches with, chosen where nothing is reported: SciFact's train claims
(qrels/train.tsv; no table reports them) over a SciFact nugget index, the same index searched once with every
query token (`query=tokens`) and once with the query's own nuggets (`query=nuggets`), the search otherwise as a
user runs it (documents, k = 100, default probes).

    python eval/notebook/nugget_query_side.py INDEX_DIR [OUT.json]

INDEX_DIR: a SciFact `nugget` index (eval's cache holds one, e.g. runs/index/beir-scifact-test-*/nugget*).
"""
import json, sys, time
from pathlib import Path

from propdex.eval.metrics import beir_metrics, rank_scores
from propdex.retriever import Searcher

S = Path("../shared/data/beir/scifact")
judged = {}
for line in list(open(S / "qrels/train.tsv"))[1:]:
    q, d, rel = line.split("\t")
    judged.setdefault(q, {})[d] = int(rel)
claims = {r["_id"]: r["text"] for r in map(json.loads, open(S / "queries.jsonl")) if r["_id"] in judged}
searcher = Searcher.load(sys.argv[1], threads=2)
ids = sorted(claims)
out = {"index": sys.argv[1], "claims": len(ids), "systems": {}}
for mode in ("tokens", "nuggets"):
    searcher.encoder.query = mode
    t = time.perf_counter()
    hits = searcher.search_batch([claims[q] for q in ids], k=100, level="doc")
    ms = (time.perf_counter() - t) * 1000 / len(ids)
    run = {q: rank_scores([h.doc_id for h in hs]) for q, hs in zip(ids, hits)}
    scores = beir_metrics(run, judged)
    out["systems"][f"query={mode}"] = {"metrics": scores, "ms_per_query_batch": round(ms, 1)}
    print(mode, {k: round(100 * v, 2) for k, v in scores.items()}, f"{ms:.1f} ms a query (batches)", flush=True)
if len(sys.argv) > 2:
    Path(sys.argv[2]).write_text(json.dumps(out, indent=1))
