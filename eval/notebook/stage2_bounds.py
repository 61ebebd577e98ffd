"""Can stage 2 skip windows that cannot win? Stage 1's estimate of a window
(each query vector's best hit in it, else its weakest hit anywhere: what it
may have missed, as XTR imputes; stage 1's own `scoring._imputed_sums`) bounds the window's exact MaxSim from above
when the ANN search is exact. Decoding each candidate's hit windows best
estimate first and stopping where the estimate (plus a margin) falls below
both the candidate's best exact window so far and the tenth best document
scored so far (max-score pruning, candidates in estimate order) would then
give today's top 10 with fewer rows decoded. This measures, over a scale
index and the notebook's dev queries (`dev_queries.py`, document level, k =
10, today's defaults), how often an estimate falls below its window's exact
score, how far above it stands, and for each margin the share of today's
rows decoded and of today's top 10 kept:

    PYTHONPATH=eval/notebook python eval/notebook/stage2_bounds.py INDEX INDEXED OUT.json 0,-1,-2,-3,-4
"""
import json, sys
from pathlib import Path

import numpy as np
import torch

from dev_queries import dev_queries
from propdex.retriever import Searcher, rescoring, scoring
from propdex.retriever import candidates as stage1
from propdex.retriever.settings import SearchSettings


def windows_of(searcher, q):
    """Today's 32 candidates of one query, each as (key, {window: (exact, estimate, rows)})."""
    st = SearchSettings(k=10)
    depths = stage1.Depths.of(st, len(q), searcher.vectors_per_doc, searcher.nprobe, searcher.lists, searcher.encoder.pooled_tokens)
    masks = [None] * len(searcher.shards)
    hits = stage1.query_rows(searcher._stage1.search(q, depths.per_vector, depths.nprobe, masks), slice(0, len(q)))
    chosen, hit = searcher._stage1.candidates(q, hits, depths.rescored, st.k, depths.per_vector, masks, searcher.window)
    cands = rescoring.rescore(searcher.shards, q, chosen, depths.rescored, set(), first=depths.first, window=searcher.window, hit=hit)
    floor = stage1._floor(len(q), np.concatenate([np.nonzero(d >= 0)[0] for _, _, d, _ in hits]),
                          np.concatenate([s[d >= 0] for _, s, d, _ in hits]))
    out = []
    for c in cands:
        groups = c.windows[0]
        every = scoring.sentence_windows_of(searcher.shards[c.shard].store.unit_sentences([c.ordinal]), searcher.window)[0][0]
        ids = np.unique(groups)
        _, scores, docs, at = hits[c.shard]
        query_of, col = np.nonzero(docs == c.ordinal)
        hit_window = every[at[query_of, col]]
        scored = np.isin(hit_window, ids)  # the windows stage 2 scored
        estimates = scoring._imputed_sums(scores[query_of, col][scored], query_of[scored], np.searchsorted(ids, hit_window[scored]),
                                          floor, len(ids))
        out.append((c.key, {w: (float(c.part[:, groups == w].max(axis=1).sum()), float(estimates[i]), int((groups == w).sum()))
                            for i, w in enumerate(ids.tolist())}))
    return out


def pruned(cands, margin, k=10):
    """Max-score pruning over (key, windows) at `margin`: the top k and the rows it decodes."""
    scores, rows = {}, 0
    for key, windows in sorted(cands, key=lambda c: -max(e for _, e, _ in c[1].values())):
        bar = sorted(scores.values(), reverse=True)[k - 1] if len(scores) >= k else -np.inf
        best = -np.inf
        for exact, estimate, n in sorted(windows.values(), key=lambda w: -w[1]):
            if estimate + margin < max(best, bar):
                break
            rows, best = rows + n, max(best, exact)
        if best > -np.inf:
            scores[key] = best
    return sorted(scores, key=lambda key: -scores[key])[:k], rows


def main(index, indexed, out, margins):
    torch.set_num_threads(1)
    queries = dev_queries(indexed)
    gaps, full_rows, windows = [], 0, 0
    kept = {m: [0, 0.0, 0] for m in margins}  # rows, top-10 overlap, identical top 10s
    with Searcher.load(Path(index), threads=1) as searcher:
        for text, _ in queries:
            cands = windows_of(searcher, searcher.encoder.encode_queries([text])[0].vectors)
            today = [key for key, _ in cands[:10]]
            gaps += [exact - estimate for _, ws in cands for exact, estimate, _ in ws.values()]
            full_rows += sum(n for _, ws in cands for *_, n in ws.values())
            windows += sum(len(ws) for _, ws in cands)
            for m in margins:
                top, rows = pruned(cands, m)
                kept[m][0] += rows
                kept[m][1] += len(set(top) & set(today)) / 10
                kept[m][2] += top == today
    gaps = np.array(gaps)
    record = {"index": index, "queries": len(queries), "rows_a_query": round(full_rows / len(queries)),
              "hit_windows_a_query": round(windows / len(queries), 1),
              "exact_minus_estimate": {"mean": round(float(gaps.mean()), 3), "p95": round(float(np.percentile(gaps, 95)), 3),
                                       "max": round(float(gaps.max()), 3), "share_above_estimate": round(float((gaps > 0).mean()), 4)},
              "margins": {str(m): {"rows_decoded_share": round(r / full_rows, 3), "top10_overlap": round(o / len(queries), 3),
                                   "identical_top10": f"{same}/{len(queries)}"} for m, (r, o, same) in kept.items()}}
    Path(out).write_text(json.dumps(record, indent=1))
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], [float(m) for m in sys.argv[4].split(",")])
