#!/bin/bash
# Two commits' search code (retriever/ and indexer/) alternated on the cached scale indexes, ROUNDS times:
# the scale bench at 100 and 1,000 articles (document level) and search_hits.py at sentence and unit level on
# the 1,000-article index, each run's JSON in OUT. The working tree's retriever/ and indexer/ are restored to
# NEW at the end. Machine speed drifts between runs here, so compare runs next to each other.
#   bash eval/notebook/ab_search.sh d75d144 1e24120 2 runs/lab/ab
set -e
old=$1 new=$2 rounds=$3 out=$4
mkdir -p "$out"
for round in $(seq "$rounds"); do
  for side in before after; do
    if [ "$side" = before ]; then git checkout -q "$old" -- retriever indexer; else git checkout -q "$new" -- retriever indexer; fi
    propdex bench --sections scale --scale-sizes 100,1000 --scale-encoders tokens --threads 1 --work runs/bench \
      --out "$out/bench_${side}_$round.json" > "$out/bench_${side}_$round.log" 2>&1
    for level in sentence unit; do
      python eval/notebook/search_hits.py runs/bench/scale/tokens-1000 "$out/hits_${side}_${level}_$round.json" "$level" 2>&1 | tail -1
    done
  done
done
git checkout -q "$new" -- retriever indexer
