#!/bin/bash
# "Serving under ingestion": 2,000 SciFact abstracts added one request at a time to a served index of the other
# 3,183 while 8 clients search; a bulk build of all 5,183 served beside it is the baseline the grown index is
# compared with at rest (latency, BM25's top 10 on 100 queries). Run from the repository root.
set -euo pipefail
D=runs/loadtest
CORPUS=../shared/data/beir/scifact/corpus.jsonl
mkdir -p $D && rm -rf $D/grown $D/bulk
head -n 3183 $CORPUS > $D/base.jsonl
tail -n +3184 $CORPUS > $D/adds.jsonl
propdex index $D/base.jsonl --out $D/grown
propdex index $CORPUS --out $D/bulk
PROPDEX_TOKEN=T propdex serve $D/grown --port 8101 --device cpu & G=$!
PROPDEX_TOKEN=T propdex serve $D/bulk --port 8102 --device cpu & B=$!
trap 'kill $G $B' EXIT
for _ in $(seq 300); do curl -sf http://127.0.0.1:8101/healthz >/dev/null && curl -sf http://127.0.0.1:8102/healthz >/dev/null && break; sleep 2; done
propdex loadtest http://127.0.0.1:8101 --clients 8 --requests 2000 --adds 2000 --docs $D/adds.jsonl \
  --queries ../shared/data/beir/scifact/queries.jsonl --baseline http://127.0.0.1:8102 --bm25-queries 100 --token T \
  --out eval/results/scoreboard/loadtest_scifact.json
