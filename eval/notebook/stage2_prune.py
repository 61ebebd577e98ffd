"""Stage 2 decoding only the candidates whose centroid-only estimate ranks
among the best P (PLAID's centroid pruning): each candidate's hit windows
scored with the query vectors' inner products to their rows' IVF centroids
(one lookup a row and query vector, nothing decoded), the best P of them
decoded and scored exactly. Compared with today's stage 2 (every candidate
decoded) on the dev queries, never a reported set:

    PYTHONPATH=eval/notebook python eval/notebook/stage2_prune.py INDEX INDEXED OUT.json 8,12,16,20,24
"""
import json, sys
from pathlib import Path

import numpy as np

from dev_queries import agreement, codes_and_tables, dev_queries, timed_runs
from propdex.encoders import encoder_from_config
from propdex.indexer.manifest import read_manifest
from propdex.retriever import Searcher, rescoring, scoring
from propdex.retriever.loading import ordinal_of, shard_of

ORIGINAL = rescoring.rescore


def centroid_estimates(shards, q, chosen, window, hit):
    """Each chosen document's best hit window scored from its rows' centroids alone."""
    out = np.full(len(chosen), -np.inf, np.float32)
    by_shard = {}
    for i, key in enumerate(chosen.tolist()):
        by_shard.setdefault(shard_of(key), []).append(i)
    qc_of = {}
    for s, idx in by_shard.items():
        shard = shards[s]
        codes, tables = codes_and_tables(shard.store)
        if id(tables) not in qc_of:
            qs = q if shard.rotate is None else shard.rotate(q)
            qc_of[id(tables)] = qs @ tables.centroids.T
        qc = qc_of[id(tables)]
        ordinals = [ordinal_of(int(chosen[i])) for i in idx]
        sentences = shard.store.unit_sentences(ordinals)
        windows = scoring.sentence_windows_of(sentences, window)
        cols = [rescoring.hit_windows(w, hit.get((s << 32) | o)) for o, w in zip(ordinals, windows)]
        ids = np.concatenate(shard.store.vector_ids(ordinals, cols))
        raw = codes[ids]
        lists = sum(raw[:, b].astype(np.intp) << (8 * b) for b in range(tables.list_bytes))
        sims = qc[:, lists]
        wins = [(w[0] if c is None else w[0][c], w[1]) for w, c in zip(windows, cols)]
        out[idx] = scoring.windowed_maxsims(sims, wins)
    return out


def pruned(keep):
    def rescore(shards, q, chosen, n, exclude, *, blocks=0, first=None, window=None, hit=None):
        if hit is None or window is None or len(chosen) <= keep:
            return ORIGINAL(shards, q, chosen, n, exclude, blocks=blocks, first=first, window=window, hit=hit)
        est = centroid_estimates(shards, q, chosen, window, hit)
        best = np.sort(np.argsort(-est, kind="stable")[:keep])  # stage 1's order kept
        return ORIGINAL(shards, q, chosen[best], min(n, keep), exclude, blocks=blocks,
                        first=None if first is None else min(first, keep), window=window, hit=hit)
    return rescore


def main(index, indexed, out, keeps):
    queries = dev_queries(indexed)
    encoder = encoder_from_config(read_manifest(index)["encoder"], device="cpu")
    record = {"index": str(index), "queries": len(queries), "runs": {}}
    with Searcher.load(index, encoder=encoder, threads=1) as searcher:
        searcher.search(queries[0][0], k=10)
        base, ms, stages = timed_runs(searcher, queries, None)
        record["runs"]["all 32"] = {"ms": ms, "stages": stages}
        for keep in keeps:
            rescoring.rescore = pruned(keep)
            got, ms, stages = timed_runs(searcher, queries, None)
            rescoring.rescore = ORIGINAL
            record["runs"][f"best {keep}"] = {"ms": ms, "stages": stages, **agreement(base, got, queries)}
            print(keep, record["runs"][f"best {keep}"], flush=True)
    print(record["runs"]["all 32"])
    Path(out).write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3], [int(x) for x in sys.argv[4].split(",")])
