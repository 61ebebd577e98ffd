"""Side by side with PLAID (`propdex bench --peers colbert-plaid`).

Every system answers the same BEIR queries from the same MiniLM token
vectors: those of one propdex `tokens` index of the corpus. They run one
after another on one machine with the same threads, each in a fresh process,
so that its peak resident memory is its own.

- `propdex`: the index as built, searched by `Searcher` (IVF-PQ stage 1,
  exact MaxSim over the candidates' stored vectors or decoded codes).
- `exact`: MaxSim over every document's stored vectors, the reference both
  approximate (`Searcher` re-scoring every document, as eval's `exact=1`).
- `colbert-plaid`: ColBERTv2/PLAID as colbert-ai 0.2.22 stores and searches
  it: its `ResidualCodec` (b-bit residuals against centroids, bucket cutoffs
  from a held-out sample), its IVF of passage ids (`optimize_ivf`), its
  `IndexScorer` with the C++ CPU kernels (`filter_pids`,
  `decompress_residuals`) and the search settings colbert's `Searcher`
  picks for k = 10. Its centroids are the propdex index's IVF centroids,
  unit-normalised as ColBERT's k-means leaves them; only the files are laid
  out here, by colbert's own classes.

Query time includes encoding the query (the same encoder for all); build
time is indexing from vectors (train + add for propdex; codec, compression
and IVF for PLAID): the encoding they share is measured once, in the manifest.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.indexer import ann
from propdex.indexer.build import peak_rss_mb
from propdex.indexer.manifest import read_manifest
from propdex.indexer.store import ShardStore
from propdex.retriever import Searcher

from .metrics import beir_metrics
from .run import all_in_bytes

log = logging.getLogger(__name__)

PEERS = {"colbert-plaid": "colbert"}  # peer -> the module its package installs
PLAID_NBITS = 2
PLAID_HELDOUT = 50_000  # colbert holds out min(50k, 5% of its k-means sample) for the residual buckets...
QUANTILE_MAX = 2**24  # ...and takes their quantiles with torch, which refuses more elements than this
PLAID_K10 = {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 256}  # colbert Searcher's settings for k <= 10


def missing_peers(peers: list[str]) -> dict[str, str]:
    """The peers that cannot run here, with the reason (an unknown name is an error)."""
    if unknown := [p for p in peers if p not in PEERS]:
        raise ValueError(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
    return {p: f"{PEERS[p]} is not installed (pip install 'propdex[bench]')" for p in peers if importlib.util.find_spec(PEERS[p]) is None}


def side_by_side(index: Path, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], peers: list[str],
                 threads: int, work: Path) -> dict[str, Any]:
    """{"systems": {"propdex": {...}, peer: {...}}, "exact": {...}, "skipped": {peer: why}, "threads": n}."""
    skipped = missing_peers(peers)
    for peer, why in skipped.items():
        log.warning("skipping peer %s: %s", peer, why)
    common = {"index": str(index), "queries": queries, "qrels": qrels, "threads": threads}
    result: dict[str, Any] = {"systems": {}, "exact": None, "skipped": skipped, "threads": threads}
    result["systems"]["propdex"] = _in_child("measure_propdex", **common, exact=False)
    result["exact"] = _in_child("measure_propdex", **common, exact=True)
    for peer in peers:
        if peer not in skipped:
            result["systems"][peer] = _in_child("measure_plaid", **common, out=str(work / peer))
    return result


def _in_child(name: str, **kwargs) -> dict[str, Any]:
    """`name(**kwargs)` of this module in a fresh interpreter: its peak RSS
    is its own, and no peer's threads or extensions reach the next system."""
    code = f"import json, sys; from {__name__} import {name}; print(json.dumps({name}(**json.load(sys.stdin))))"
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(kwargs), stdout=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"bench: {name} failed (exit {done.returncode}; its error is above)")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# the systems (each runs in its own process)


def measure_propdex(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                    exact: bool) -> dict[str, Any]:
    index = Path(index)

    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu")
    with Searcher.load(index, encoder=encoder, threads=threads) as searcher:
        every = [[doc_id for shard in searcher.shards for doc_id in shard.store.doc_ids()]] if exact else None
        run, times = _timed(queries, lambda text: [(h.doc_id, h.score) for h in searcher.search(text, k=10, within=every)])
    return {
        **_quality_and_latency(run, qrels, times),
        "bytes_per_vector": all_in_bytes(index, manifest, encoder.dim) / manifest["counts"]["vectors"],
        "build_s": round(manifest["timings"]["train_s"] + manifest["timings"]["add_s"], 3),
        "peak_rss_mb": peak_rss_mb(),
        "factory": manifest["index"]["factory"], "store": manifest["settings"].get("store", "float16"),
        **({"within": "every document"} if exact else {}),
    }


def measure_plaid(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                  out: str) -> dict[str, Any]:
    import torch
    from colbert.infra.config import ColBERTConfig
    from colbert.modeling.colbert import ColBERT
    from colbert.search.index_storage import IndexScorer

    ann.set_threads(threads)
    torch.set_num_threads(threads)
    index, out = Path(index), Path(out)
    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu")
    started = time.time()
    doc_ids = build_plaid(index, manifest, out)
    build_s = time.time() - started
    scorer = IndexScorer(str(out), use_gpu=False)
    ColBERT.try_load_torch_extensions(use_gpu=False)  # its CPU MaxSim kernel (colbert's model loads it; no model here)
    config = ColBERTConfig(dim=encoder.dim, nbits=PLAID_NBITS, query_maxlen=512, **PLAID_K10)

    def search(text: str) -> list[tuple[str, float]]:
        q = torch.from_numpy(encoder.encode_queries([text])[0].vectors).unsqueeze(0)
        pids, scores = scorer.rank(config, q)
        return [(doc_ids[p], s) for p, s in zip(pids[:10], scores[:10])]

    run, times = _timed(queries, search)
    files = [f for f in out.iterdir() if f.suffix == ".pt" or f.name.startswith("doclens.")]
    return {
        **_quality_and_latency(run, qrels, times),
        "bytes_per_vector": sum(f.stat().st_size for f in files) / manifest["counts"]["vectors"],
        "build_s": round(build_s, 3),
        "peak_rss_mb": peak_rss_mb(),
        "nbits": PLAID_NBITS, **PLAID_K10, "centroids": "the propdex index's IVF centroids, unit-normalised",
    }


def build_plaid(index: Path, manifest: dict[str, Any], out: Path) -> list[str]:
    """A colbert-ai index at `out` of the propdex index's live documents'
    vectors, one colbert chunk per propdex shard. Returns the document id of
    each colbert passage id."""
    import shutil

    import faiss
    import torch
    from colbert.indexing.codecs.residual import ResidualCodec
    from colbert.indexing.utils import optimize_ivf
    from colbert.infra.config import ColBERTConfig


    stores = [ShardStore(index / s["name"]) for s in manifest["shards"]]
    try:
        if any(s.get("deleted") for s in manifest["shards"]) or not all(st.has_vectors for st in stores):
            raise ValueError(f"{index}: the PLAID peer reads a float16 store without deletions; compact it, or build with --store float16")
        if manifest["index"].get("trained") is None or "IVF" not in manifest["index"]["factory"]:
            raise ValueError(f"{index}: the PLAID peer takes its centroids from an IVF index, not {manifest['index']['factory']}")
        trained = ann.read_faiss(index / manifest["index"]["trained"])  # held: the IVF view below does not own it
        ivf = faiss.extract_index_ivf(trained)
        quantizer = faiss.downcast_index(ivf.quantizer)
        centroids = torch.nn.functional.normalize(torch.from_numpy(quantizer.reconstruct_n(0, ivf.nlist)), dim=-1)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)

        # Residual buckets from a fixed-seed held-out sample, as colbert's _compute_avg_residual sets them.
        n, dim = manifest["counts"]["vectors"], stores[0].dim
        config = ColBERTConfig(dim=dim, nbits=PLAID_NBITS)
        share = min(PLAID_HELDOUT, QUANTILE_MAX // dim - 1024) / n
        rng = np.random.default_rng(0)
        heldout = torch.from_numpy(np.concatenate([v[rng.random(len(v)) < share] for _, _, v in _chunks(stores)]))
        codec = ResidualCodec(config=config, centroids=centroids)
        residual = heldout - codec.lookup_centroids(codec.compress_into_codes(heldout, out_device="cpu"), out_device="cpu")
        options = 2**PLAID_NBITS
        quantiles = torch.arange(0, options) * (1 / options)
        codec = ResidualCodec(config=config, centroids=centroids, avg_residual=residual.abs().mean(dim=0).mean(),
                              bucket_cutoffs=residual.quantile(quantiles[1:]), bucket_weights=residual.quantile(quantiles + 0.5 / options))
        codec.save(str(out))

        doc_ids: list[str] = []
        codes = []
        for chunk, (ids, doclens, vectors) in enumerate(_chunks(stores)):
            embeddings = codec.compress(torch.from_numpy(vectors))
            embeddings.save(str(out / str(chunk)))
            codes.append(embeddings.codes)
            (out / f"doclens.{chunk}.json").write_text(json.dumps(doclens))
            (out / f"{chunk}.metadata.json").write_text(json.dumps({
                "passage_offset": len(doc_ids), "num_passages": len(ids), "num_embeddings": len(embeddings)}))
            doc_ids += ids
        every = torch.cat(codes).sort()
        optimize_ivf(every.indices, torch.bincount(every.values, minlength=ivf.nlist), str(out), verbose=0)
        (out / "metadata.json").write_text(json.dumps({
            "config": config.export(), "num_chunks": len(codes), "num_partitions": ivf.nlist,
            "num_embeddings": n, "avg_doclen": n / len(doc_ids),
        }))
        return doc_ids
    finally:
        for st in stores:
            st.close()


def _chunks(stores: list, docs: int = 1024):
    """(document ids, their vector counts, their vectors as float32) a chunk of documents at a time, in index order."""
    for store in stores:
        by_ordinal = {o: d for d, o in store.id_ordinals()}
        for start in range(0, len(store), docs):
            ordinals = range(start, min(start + docs, len(store)))
            vectors = [v for v, _ in store.vectors(ordinals)]
            yield [by_ordinal[o] for o in ordinals], [len(v) for v in vectors], np.concatenate(vectors).astype(np.float32)


# --------------------------------------------------------------------------
# shared measures


def _timed(queries: list[tuple[str, str]], search) -> tuple[dict[str, dict[str, float]], list[float]]:
    search(queries[0][1])  # load pages and kernels once
    run, times = {}, []
    for qid, text in queries:
        started = time.perf_counter()
        hits = search(text)
        times.append((time.perf_counter() - started) * 1000)
        # Distinct scores in rank order, so ir-measures' tie-breaking keeps the system's order.
        run[qid] = {doc_id: float(len(hits) - i) for i, (doc_id, _) in enumerate(hits)}
    return run, times


def _quality_and_latency(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], times: list[float]) -> dict[str, Any]:
    t = np.asarray(times)
    return {"nDCG@10": round(beir_metrics(run, qrels)["nDCG@10"], 4), "queries": len(times),
            "p50_ms": round(float(np.percentile(t, 50)), 1), "p95_ms": round(float(np.percentile(t, 95)), 1)}
