"""The `colbert-plaid` peer: ColBERTv2/PLAID as colbert-ai 0.2.22 stores and searches it.

Its centroids are the propdex index's IVF centroids, unit-normalised as
ColBERT's k-means leaves them, so that the two differ in their codecs and
search, not in their clustering; every other file is laid out by colbert's
own classes, and searched with the settings colbert's `Searcher` picks for
k = 10.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.indexer import ann
from propdex.indexer.build import peak_rss_mb
from propdex.indexer.manifest import read_manifest

from .measures import quality_and_latency, timed
from .peer_vectors import float16_stores, vector_chunks

PLAID_NBITS = 2
PLAID_HELDOUT = 50_000  # colbert holds out min(50k, 5% of its k-means sample) for the residual buckets...
QUANTILE_MAX = 2**24  # ...and takes their quantiles with torch, which refuses more elements than this
PLAID_K10 = {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 256}  # colbert Searcher's settings for k <= 10


def measure_plaid(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                  out: str, runtime: str = "torch") -> dict[str, Any]:
    import torch
    from colbert.infra.config import ColBERTConfig
    from colbert.modeling.colbert import ColBERT
    from colbert.search.index_storage import IndexScorer

    ann.set_threads(threads)
    torch.set_num_threads(threads)
    index, out = Path(index), Path(out)
    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu", runtime=runtime)
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

    run, times = timed(queries, search)
    files = [f for f in out.iterdir() if f.suffix == ".pt" or f.name.startswith("doclens.")]
    return {
        "query_runtime": encoder.backbone.runtime,
        **quality_and_latency(run, qrels, times),
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


    stores = float16_stores(index, manifest, "the PLAID peer")
    try:
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
        heldout = torch.from_numpy(np.concatenate([v[rng.random(len(v)) < share] for _, _, v in vector_chunks(stores)]))
        codec = ResidualCodec(config=config, centroids=centroids)
        residual = heldout - codec.lookup_centroids(codec.compress_into_codes(heldout, out_device="cpu"), out_device="cpu")
        options = 2**PLAID_NBITS
        quantiles = torch.arange(0, options) * (1 / options)
        codec = ResidualCodec(config=config, centroids=centroids, avg_residual=residual.abs().mean(dim=0).mean(),
                              bucket_cutoffs=residual.quantile(quantiles[1:]), bucket_weights=residual.quantile(quantiles + 0.5 / options))
        codec.save(str(out))

        doc_ids: list[str] = []
        codes = []
        for chunk, (ids, doclens, vectors) in enumerate(vector_chunks(stores)):
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
