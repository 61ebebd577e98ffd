"""The bench's 200 HotpotQA-600 questions searched one at a time (1 thread,
k=10) through the product's `Searcher`, writing every hit (id, score,
sentence, passage, spans), the p50 and the mean stage times: run it at two
commits on one index and compare the files, to show a change to the search
path leaves every hit as it was and what it does to each stage.

    python eval/notebook/search_hits.py runs/bench/scale/tokens-1000 runs/lab/hits_new.json [doc|sentence]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, stage_times


def main(index: Path, out: Path, level: str = "doc") -> None:
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=200).queries]
    encoder = encoder_from_config(read_manifest(index)["encoder"], device="cpu")
    times, hits = [], []
    with Searcher.load(index, encoder=encoder, threads=1) as searcher:
        searcher.search(questions[0], k=10)  # load pages and kernels once
        with stage_times() as spent:
            for text in questions:
                start = time.perf_counter()
                found = searcher.search(text, k=10, level=level)
                times.append((time.perf_counter() - start) * 1000)
                hits.append([(h.doc_id, h.score, h.sentence_index, h.passage, h.spans) for h in found])
    times.sort()
    record = {"p50": times[len(times) // 2], "stages": {k: v * 1000 / len(questions) for k, v in spent.items()}, "hits": hits}
    out.write_text(json.dumps(record))
    print(out.name, f"p50 {record['p50']:.1f}", {k: round(v, 1) for k, v in record["stages"].items()})


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:4])
