"""Stage 2 over codes that store each vector's scale (today's writer) against
the same codes written without it (how indexes were written before, which
stage 2 still reads by decoding each row whole and measuring it): a copy of
INDEX with the scales stripped, and both
searched in alternation in one process, the bench's 200 questions one at a
time, 1 thread, `rounds` times; each credited with its median round. Also
how many top-10 lists are identical and the largest score difference.

    python eval/notebook/scaled_codes.py INDEX OUT.json [ROUNDS]
"""
import json, shutil, statistics, sys, time
from pathlib import Path

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer import ann
from propdex.indexer.manifest import read_manifest, sha256_file
from propdex.retriever import Searcher, stage_times


def unscaled_copy(index: Path) -> Path:
    out = index.parent / (index.name + "-unscaled")
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(index, out)  # a copy: LMDB refuses one file open twice in a process, under two names too
    manifest = json.loads((index / "manifest.json").read_text())
    assert manifest["index"].get("scaled_codes"), f"{index} holds no scaled codes"
    codec = ann.read_faiss(index / manifest["index"]["trained"])
    for s in manifest["shards"]:
        file = out / s["name"] / s["index"]
        rows = np.array(ann.read_codes(index / s["name"] / s["index"], codec, True)[0])
        with open(file, "wb") as f:
            np.save(f, rows)
        s["index_sha256"], s["index_bytes"] = sha256_file(file), file.stat().st_size
    del manifest["index"]["scaled_codes"]
    manifest["version"] = 2
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return out


def main(index: Path, out: str, rounds: int = 3) -> None:
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=200).queries]
    paths = {"scaled": index, "unscaled": unscaled_copy(index)}
    encoder = encoder_from_config(read_manifest(index)["encoder"], device="cpu")
    searchers = {k: Searcher.load(p, encoder=encoder, threads=1) for k, p in paths.items()}
    for s in searchers.values():
        s.search(questions[0], k=10)
    runs: dict[str, list] = {k: [] for k in paths}
    hits: dict[str, list] = {}
    for r in range(rounds):
        for name, s in searchers.items():
            times, found = [], []
            with stage_times() as spent:
                for text in questions:
                    t = time.perf_counter()
                    found.append([(h.doc_id, h.score) for h in s.search(text, k=10)])
                    times.append((time.perf_counter() - t) * 1000)
            hits[name] = found
            run = {"p50": round(sorted(times)[len(times) // 2], 1), **{k: round(v * 1000 / len(questions), 2) for k, v in spent.items()}}
            runs[name].append(run)
            print(r, name, run, flush=True)
    a, b = hits["scaled"], hits["unscaled"]
    record = {"index": str(index), "vectors": read_manifest(index)["counts"]["vectors"], "rounds": runs,
              "median": {k: {m: statistics.median(x[m] for x in rs) for m in rs[0]} for k, rs in runs.items()},
              "same_top10": sum([i for i, _ in x] == [i for i, _ in y] for x, y in zip(a, b)), "questions": len(a),
              "max_score_diff": max(abs(s - t) for x, y in zip(a, b) for (_, s), (_, t) in zip(x, y))}
    for k in paths:
        print(k, record["median"][k])
    print("same top 10", record["same_top10"], "of", len(a), "largest score difference", record["max_score_diff"])
    Path(out).write_text(json.dumps(record, indent=1))
    for s in searchers.values():
        s.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *map(int, sys.argv[3:4]))
