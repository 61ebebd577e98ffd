"""Exact MaxSim: float32 MaxSim of every query over every document, the reference the approximate systems are measured against.

It is one blocked scan of each shard's float16 file for all queries
together (a matrix product per block of rows, folded into per-document
maxima), not `Searcher` re-scoring every document per query, which is far
too slow on a real corpus at one thread. exact_of_arrays is the same
reference in torch over vectors straight from the encoder, for a machine
without a propdex index.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.indexer.build import peak_rss_mb
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import ShardStore, listed_store, read_deleted
from propdex.retriever.scoring import top_k

from .measures import latency, quality_and_latency, torch_sync
from .metrics import beir_metrics, rank_scores


def measure_exact(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                  budget_mb: int = 512, runtime: str = "torch") -> dict[str, Any]:
    """MaxSim of each query over every live document, exactly, in float32.
    Time is reported for the whole scan (encoding included), per query: the
    reference answers all queries in one pass, so it has no per-query latency."""
    import torch

    torch.set_num_threads(threads)
    index = Path(index)
    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu", runtime=runtime)
    started = time.perf_counter()
    qv = [encoder.encode_queries([text])[0].vectors.astype(np.float32) for _, text in queries]
    ranked = exact_rankings(index, qv, 10, budget_mb)
    elapsed = time.perf_counter() - started
    run = {qid: rank_scores(doc_id for doc_id, _ in hits) for (qid, _), hits in zip(queries, ranked)}
    return {
        "query_runtime": encoder.backbone.runtime,
        "nDCG@10": round(beir_metrics(run, qrels)["nDCG@10"], 4), "queries": len(queries),
        "p50_ms": None, "p95_ms": None, "scan_ms_per_query": round(1000 * elapsed / len(queries), 1),
        "bytes_per_vector": 4 * encoder.dim, "build_s": 0.0, "peak_rss_mb": peak_rss_mb(),
        "within": "every document, one blocked float32 scan of the stored vectors for all queries",
    }


def exact_rankings(index: Path, query_vectors: list[np.ndarray], depth: int, budget_mb: int = 512,
                   exclude: list[set[str]] | None = None) -> list[list[tuple[str, float]]]:
    """Each query's `depth` best live documents of the index at `index` by
    float32 MaxSim over every stored vector, as (doc id, score), best first
    (ties by id); documents in the query's `exclude` set are never ranked."""
    manifest = read_manifest(index)
    ranked: list[list[tuple[float, str]]] = [[] for _ in query_vectors]
    for s in manifest["shards"]:
        store = listed_store(index, s)
        try:
            live = np.ones(len(store), bool)
            if s.get("deleted"):
                live[read_deleted(index / s["name"] / s["deleted"])] = False
            by_ordinal = {o: d for d, o in store.id_ordinals()}
            for q, scores in enumerate(maxsim_every_document(query_vectors, store, budget_mb)):
                scores[~live] = -np.inf
                if exclude and exclude[q]:
                    scores[[o for d in exclude[q] if (o := store.ordinal(d)) is not None]] = -np.inf
                ranked[q] += [(float(scores[o]), by_ordinal[int(o)]) for o in top_k(scores, depth) if np.isfinite(scores[o])]
        finally:
            store.close()
    return [[(d, sc) for sc, d in sorted(hits, key=lambda h: (-h[0], h[1]))[:depth]] for hits in ranked]


def maxsim_every_document(queries: list[np.ndarray], store: ShardStore, budget_mb: int = 512) -> Iterator[np.ndarray]:
    """Each query's MaxSim over every document of `store` (-inf for a
    document without vectors), in order. Queries go in groups whose
    per-document maxima fit in `budget_mb`, each group one scan of the
    store's vectors, a block of rows at a time."""
    n_docs = len(store)
    budget = budget_mb << 18  # float32 cells
    at = 0
    while at < len(queries):
        group, rows = [], 0
        while at + len(group) < len(queries) and (not group or (rows + len(queries[at + len(group)])) * n_docs <= budget // 2):
            rows += len(queries[at + len(group)])
            group.append(queries[at + len(group)])
        q = np.concatenate(group)
        best = np.full((len(q), n_docs), -np.inf, np.float32)
        first = 0
        for block in store.iter_vectors(rows=max(1024, (budget // 2) // max(len(q), 1))):
            doc = store.doc_of_vectors(np.arange(first, first + len(block)))
            starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])
            maxima = np.maximum.reduceat(q @ block.T, starts, axis=1)
            np.maximum(best[:, doc[starts]], maxima, out=maxima)
            best[:, doc[starts]] = maxima
            first += len(block)
        bounds = np.cumsum([0, *map(len, group)])
        for a, b in zip(bounds[:-1], bounds[1:]):
            yield best[a:b].sum(0) if b > a else np.zeros(n_docs, np.float32)
        at += len(group)


def exact_of_arrays(out: Path, doc_ids: list[str], queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]],
                    encode_ms: list[float], device: str) -> dict[str, Any]:
    """Float32 MaxSim of each query of out/queries.npy over every document
    of out/documents.npy, in torch on `device`: the reference the peers are
    measured against when their vectors come from the encoder. Its time is
    the scan alone, per query (plus encoding, as for the systems)."""
    import torch

    docs = torch.from_numpy(np.load(out / "documents.npy")).to(device=device, dtype=torch.float32)
    doclens = torch.from_numpy(np.load(out / "doclens.npy")).to(device)
    owner = torch.repeat_interleave(torch.arange(len(doclens), device=device), doclens)
    qrows = np.load(out / "queries.npy").astype(np.float32)
    bounds = np.cumsum([0, *np.load(out / "qlens.npy")])
    sync = torch_sync(device)
    run, ms = {}, []
    for (qid, _), a, b in zip(queries, bounds[:-1], bounds[1:]):
        sync()
        started = time.perf_counter()
        sim = docs @ torch.from_numpy(qrows[a:b]).to(device).T  # (vectors, query tokens)
        best = torch.full((len(doclens), b - a), -torch.inf, device=device)
        best.scatter_reduce_(0, owner[:, None].expand_as(sim), sim, "amax")
        scores, top = best.sum(1).topk(min(10, len(doclens)))
        hits = [(doc_ids[int(i)], float(s)) for i, s in zip(top.cpu(), scores.cpu())]
        ms.append((time.perf_counter() - started) * 1000)
        run[qid] = rank_scores(d for d, _ in sorted(hits, key=lambda h: (-h[1], h[0])))
    return {
        "query_runtime": "torch", **quality_and_latency(run, qrels, [e + s for e, s in zip(encode_ms, ms)]),
        "scan_ms_per_query": latency(ms)["p50_ms"], "bytes_per_vector": 4 * docs.shape[1], "build_s": 0.0,
        "peak_rss_mb": peak_rss_mb(), "device": device,
        "within": "every document, float32 MaxSim in torch over the encoder's vectors",
    }
