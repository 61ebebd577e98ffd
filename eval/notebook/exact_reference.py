"""Exact float MaxSim over the kept float16 vectors of the first `indexed`
articles (runs/lab/vec6514: the scale build's own vectors), each document
scored by its best window as the searcher scores it (every window, no
stage 1), for the dev queries; then each given index's top 10 (the
product's search, default settings) against that exact top 10:

    PYTHONPATH=eval/notebook python eval/notebook/exact_reference.py VECTORS INDEXED OUT.json INDEX[:NPROBE] ...
"""
import json, sys, time
from pathlib import Path

import numpy as np
import torch

from dev_queries import dev_queries, timed_runs
from propdex.encoders import encoder_from_config
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import ShardStore
from propdex.retriever import Searcher, scoring

DOCS_A_BLOCK = 40


def exact_top10(vectors, indexed, queries, encoder, window):
    q = [e.vectors.astype(np.float32) for e in encoder.encode_queries([t for t, _ in queries])]
    owner = np.repeat(np.arange(len(q)), [len(x) for x in q])
    starts = np.concatenate([[0], np.cumsum([len(x) for x in q])])
    allq = torch.from_numpy(np.concatenate(q))
    scores, ids = [], []
    left = indexed
    for shard in sorted(p for p in vectors.iterdir() if p.name.startswith("shard-")):
        store = ShardStore(shard)
        n = min(len(store), left)
        left -= n
        for a in range(0, n, DOCS_A_BLOCK):
            ordinals = list(range(a, min(n, a + DOCS_A_BLOCK)))
            rows = store.vector_rows(ordinals)
            sentences = store.unit_sentences(ordinals)
            windows = scoring.sentence_windows_of(sentences, window)
            sims = torch.mm(allq, torch.from_numpy(np.concatenate(rows).astype(np.float32)).T).numpy()
            block = np.stack([scoring.windowed_maxsims(sims[starts[i]:starts[i + 1]], windows) for i in range(len(q))])
            scores.append(block)
            ids += [store.document(o).id for o in ordinals]
        store.close()
        print(shard.name, len(ids), flush=True)
        if left <= 0:
            break
    s = np.concatenate(scores, axis=1)
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:10]] for row in s]


def main(vectors, indexed, out, indexes):
    queries = dev_queries(indexed)
    encoder = encoder_from_config(read_manifest(Path(indexes[0].split(":")[0]))["encoder"], device="cpu", runtime="onnx")
    t = time.time()
    window = encoder.passage_units
    exact = exact_top10(vectors, indexed, queries, encoder, window)
    record = {"vectors": str(vectors), "indexed": indexed, "queries": len(queries), "window": window,
              "exact_s": round(time.time() - t), "indexes": {}}
    for spec in indexes:
        path, _, probes = spec.partition(":")
        with Searcher.load(Path(path), encoder=encoder, threads=1) as searcher:
            searcher.search(queries[0][0], k=10)
            got, ms, stages = timed_runs(searcher, queries, int(probes) if probes else None)
        overlap = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(exact, got)]))
        first = float(np.mean([e[0] in g for e, g in zip(exact, got)]))
        record["indexes"][spec] = {"factory": read_manifest(Path(path))["index"]["factory"], "top10_overlap_with_exact": round(overlap, 4),
                                   "exact_first_in_top10": round(first, 4), "ms": ms, "stages": stages}
        print(spec, record["indexes"][spec], flush=True)
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:])
