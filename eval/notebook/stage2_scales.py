"""Stage 2 multiplying the residual codes only: a row's product with a
query vector is q.r + q.c (the centroid's product looked up from a
(query vectors x lists) table made once a query) times the row's length
rescale (`norm` / |c + r|), here computed once for every stored vector
(kept outside the index, as a build would store it). Nothing else is
decoded: no centroid rows gathered or added, no norms. Compared with
today's decoder on the bench's questions (hits and timings):

    PYTHONPATH=eval/notebook python eval/notebook/stage2_scales.py INDEX OUT.json [float32|float16]
"""
import json, sys, time
from pathlib import Path

import numpy as np
import torch

from dev_queries import codes_and_tables
from propdex.encoders import encoder_from_config
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, rescoring, scoring, stage_times

ORIGINAL = scoring.decoded_similarities


def scales_of(codes, tables, dtype):
    """norm / |decoded row| for every row of a shard's codes."""
    norm, tables.norm = tables.norm, None
    out = np.empty(len(codes), np.float32)
    for a in range(0, len(codes), 1 << 16):
        x = tables(codes[a : a + (1 << 16)])
        out[a : a + len(x)] = norm / np.maximum(np.linalg.norm(x, axis=1), 1e-12)
    tables.norm = norm
    return out.astype(dtype)


def factored(shards_by_codes, centroid_products):
    def decoded_similarities(queries, decode, ids, block_rows=scoring.DECODED_ROWS):
        codes, tables = codes_and_tables(decode.__self__)
        scales = shards_by_codes[id(codes)]
        seen = centroid_products.get("queries")
        if seen is None or seen.shape != queries.shape or not np.array_equal(seen, queries):  # once a query (and codec)
            centroid_products.update(queries=np.array(queries), qc=np.ascontiguousarray(queries, dtype=np.float32) @ tables.centroids.T)
        qc = centroid_products["qc"]
        q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        out = torch.empty((len(q), len(ids)), dtype=torch.float32)
        bounds = list(range(0, len(ids), block_rows)) + [len(ids)]
        if len(bounds) > 2 and bounds[-1] - bounds[-2] < block_rows // 2:
            del bounds[-2]
        lb = tables.list_bytes
        for a, b in zip(bounds[:-1], bounds[1:]):
            rows = codes[ids[a:b]]
            r = tables.table.take(rows[:, lb:] + tables.offsets).view(np.float32).reshape(len(rows), tables.width)
            torch.mm(q, torch.from_numpy(r).T, out=out[:, a:b])
        o = out.numpy()
        raw = codes[ids, :lb]
        lists = sum(raw[:, i].astype(np.intp) << (8 * i) for i in range(lb))
        o += qc[:, lists]
        o *= scales[ids].astype(np.float32)
        return o
    return decoded_similarities


def run(searcher, questions):
    times, hits = [], []
    with stage_times() as spent:
        for text in questions:
            t = time.perf_counter()
            found = searcher.search(text, k=10)
            times.append((time.perf_counter() - t) * 1000)
            hits.append([(h.doc_id, h.score) for h in found])
    return sorted(times)[len(times) // 2], {k: round(v * 1000 / len(questions), 2) for k, v in spent.items()}, hits


def main(index, out, dtype="float32"):
    questions = [q.text for q in load_hotpotqa(Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"), limit=200).queries]
    encoder = encoder_from_config(read_manifest(index)["encoder"], device="cpu", runtime="onnx")
    record = {"index": str(index), "scales": dtype, "runs": []}
    with Searcher.load(index, encoder=encoder, threads=1) as searcher:
        t = time.perf_counter()
        by_codes = {}
        for s in searcher.shards:
            codes, tables = codes_and_tables(s.store)
            by_codes[id(codes)] = scales_of(codes, tables, dtype)
        record["scales_s"] = round(time.perf_counter() - t, 1)
        searcher.search(questions[0], k=10)
        new = factored(by_codes, {})
        for name in ("today", "residual products", "today", "residual products"):
            rescoring.scoring.decoded_similarities = new if name != "today" else ORIGINAL
            p50, stages, hits = run(searcher, questions)
            rescoring.scoring.decoded_similarities = ORIGINAL
            record["runs"].append({"decoder": name, "p50": round(p50, 1), "stages": stages})
            record.setdefault("hits", {})[name] = hits
            print(name, round(p50, 1), stages, flush=True)
    a, b = record["hits"]["today"], record["hits"]["residual products"]
    record["same_ids"] = sum(x == y for x, y in zip([[i for i, _ in h] for h in a], [[i for i, _ in h] for h in b]))
    record["max_score_diff"] = max(abs(s - t) for h, g in zip(a, b) for (_, s), (_, t) in zip(h, g))
    del record["hits"]
    print("same top-10 ids", record["same_ids"], "of", len(a), "max score diff", record["max_score_diff"])
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], *sys.argv[3:4])
