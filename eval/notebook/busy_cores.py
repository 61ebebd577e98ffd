"""A codes index searched while other processes keep every core busy (as a
server's other requests or a build beside it would): the query's rotation
by numpy (what stage 2 did before, whose BLAS splits even an 18-row
product over every core and then waits for the busy ones) against torch
(shipped), alternated in one process, 1 thread, `rounds` times over the
bench's first 100 questions; each credited with its median round.

    python eval/notebook/busy_cores.py INDEX OUT.json [ROUNDS] [HOGS]
"""
import json, multiprocessing, os, statistics, sys, time
from pathlib import Path

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer import ann, decoding
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, stage_times


def hog() -> None:
    while True:
        pass


def main(index: Path, out: str, rounds: int = 3, hogs: int = os.cpu_count() or 2) -> None:
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=100).queries]
    manifest = read_manifest(index)
    searcher = Searcher.load(index, encoder=encoder_from_config(manifest["encoder"], device="cpu"), threads=1)
    codec = ann.read_faiss(index / manifest["index"]["trained"])  # kept: the downcast view does not own it
    a = decoding._rotation(ann.faiss.downcast_index(codec))
    assert a is not None, "the index's codes are not behind a rotation"
    shipped = searcher.shards[0].rotate
    rotations = {"numpy": lambda q: np.ascontiguousarray(q, dtype=np.float32) @ a.T, "torch (shipped)": shipped}
    np.testing.assert_allclose(rotations["numpy"](np.eye(a.shape[1], dtype=np.float32)[:4]), shipped(np.eye(a.shape[1], dtype=np.float32)[:4]), atol=1e-6)
    busy = [multiprocessing.Process(target=hog, daemon=True) for _ in range(hogs)]
    for p in busy:
        p.start()
    runs: dict[str, list] = {k: [] for k in rotations}
    try:
        searcher.search(questions[0], k=10)
        for r in range(rounds):
            for name, rotate in rotations.items():
                for shard in searcher.shards:
                    shard.rotate = rotate
                times = []
                with stage_times() as spent:
                    for text in questions:
                        t = time.perf_counter()
                        searcher.search(text, k=10)
                        times.append((time.perf_counter() - t) * 1000)
                run = {"p50": round(statistics.median(times), 1), **{k: round(v * 1000 / len(questions), 2) for k, v in spent.items()}}
                runs[name].append(run)
                print(r, name, run, flush=True)
    finally:
        for p in busy:
            p.terminate()
    record = {"index": str(index), "hogs": hogs, "cores": os.cpu_count(), "rounds": runs,
              "median": {k: {m: statistics.median(x[m] for x in rs) for m in rs[0]} for k, rs in runs.items()}}
    for k in rotations:
        print(k, record["median"][k])
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:5]))
