"""Two or more indexes of the same documents searched in alternation in one
process (the bench's 200 questions, one at a time, 1 thread, queries on
ONNX Runtime), `rounds` times: mean stage times, p50, and the rows stage 2
decodes a query, each index credited with its median round, so the
machine's drift falls on every index alike.

    python eval/notebook/alternate_indexes.py OUT.json ROUNDS INDEX INDEX ...
"""
import json, statistics, sys, time
from pathlib import Path

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, rescoring, scoring, stage_times

ORIGINAL = scoring.decoded_similarities


def main(out, rounds, paths):
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=200).queries]
    encoder = encoder_from_config(read_manifest(Path(paths[0]))["encoder"], device="cpu", runtime="onnx")
    searchers = [Searcher.load(Path(p), encoder=encoder, threads=1) for p in paths]
    rows = [0]

    def counted(q, decode, ids, *a, **k):
        rows[0] += len(ids)
        return ORIGINAL(q, decode, ids, *a, **k)

    rescoring.scoring.decoded_similarities = counted
    runs = {p: [] for p in paths}
    for s in searchers:
        s.search(questions[0], k=10)
    for r in range(rounds):
        for p, s in zip(paths, searchers):
            rows[0] = 0
            times = []
            with stage_times() as spent:
                for text in questions:
                    t = time.perf_counter()
                    s.search(text, k=10)
                    times.append((time.perf_counter() - t) * 1000)
            run = {"p50": round(sorted(times)[len(times) // 2], 1), "rows": round(rows[0] / len(questions)),
                   **{k: round(v * 1000 / len(questions), 2) for k, v in spent.items()}}
            runs[p].append(run)
            print(r, p, run, flush=True)
    record = {"paths": paths, "rounds": runs,
              "median": {p: {k: statistics.median(x[k] for x in rs) for k in rs[0]} for p, rs in runs.items()}}
    for p in paths:
        print(p, record["median"][p])
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3:])
