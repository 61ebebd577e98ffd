"""The `fast-plaid` peer, driven from propdex's side: vectors written, eval/fast_plaid_peer.py run, its figures scored.

fast-plaid pins its own torch, so it runs in an environment of its own
(`--fast-plaid-python`) that has no propdex: what passes between the two is
files in one folder. measure_encoded serves a GPU machine without FAISS,
where no propdex index can be built: fast-plaid and exact MaxSim then read
the `tokens` encoder's vectors straight from the device.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.indexer.manifest import read_manifest

from .exact import exact_of_arrays
from .measures import latency, quality_and_latency, run_child, thread_env
from .metrics import rank_scores
from .peer_vectors import write_encoded, write_queries, write_vectors

FAST_PLAID = {"k": 10, "nbits": 2, "n_ivf_probe": 8, "n_full_scores": 4096}  # 2 bits as colbert-plaid; fast-plaid's search defaults


def measure_fast_plaid(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                       out: str, python: str, device: str, runtime: str = "torch") -> dict[str, Any]:
    """fast-plaid over the index's vectors, built and searched by eval/fast_plaid_peer.py under `python`."""
    index, out = Path(index), _fresh(out)
    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu", runtime=runtime)
    doc_ids = write_vectors(index, manifest, out)
    encode_ms = write_queries(encoder, queries, out)
    return {"query_runtime": encoder.backbone.runtime,
            **run_fast_plaid(out, doc_ids, queries, qrels, encode_ms, threads, python, device)}


def measure_encoded(corpus: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                    out: str, python: str, device: str, peers: list[str]) -> dict[str, Any]:
    """Exact MaxSim and fast-plaid over token vectors straight from the
    `tokens` encoder on `device`, with no propdex index in between
    (`bench --peer-vectors encoder`): for a GPU machine without FAISS,
    where fast-plaid is meant to run. Both read the same out/documents.npy;
    exact MaxSim is float32 torch on `device`. Also returns the encoding's
    own figures ("vectors"): seconds and docs/s over the corpus on `device`."""
    from propdex.encoders import load_encoder
    from propdex.encoders.backbone import Backbone
    from propdex.encoders.provenance import hardware

    out = _fresh(out)
    encoder = load_encoder("tokens", backbone=Backbone.load(device=device))
    doc_ids, vectors = write_encoded(corpus, encoder, out)
    encode_ms = write_queries(encoder, queries, out)
    device = str(encoder.backbone.device)
    result: dict[str, Any] = {"vectors": vectors | {"device": hardware(), "dtype": str(next(encoder.backbone.model.parameters()).dtype)},
                              "systems": {}, "exact": exact_of_arrays(out, doc_ids, queries, qrels, encode_ms, device)}
    if "fast-plaid" in peers:
        result["systems"]["fast-plaid"] = {"query_runtime": "torch",
                                           **run_fast_plaid(out, doc_ids, queries, qrels, encode_ms, threads, python, device)}
    return result


def _fresh(out: str | Path) -> Path:
    """`out`, emptied: what a peer finds there is what this run wrote."""
    import shutil

    out = Path(out)
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    return out


def run_fast_plaid(out: Path, doc_ids: list[str], queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]],
                   encode_ms: list[float], threads: int, python: str, device: str) -> dict[str, Any]:
    """eval/fast_plaid_peer.py under `python` over the vectors in `out`; its figures, scored here."""
    (out / "settings.json").write_text(json.dumps({"device": device, "threads": threads, **FAST_PLAID}))
    # fast-plaid's Rust side runs on rayon's pool.
    code, _, error = run_child([python, str(Path(__file__).with_name("fast_plaid_peer.py")), str(out)], None,
                               thread_env(threads, "RAYON_NUM_THREADS"))
    if code:
        raise RuntimeError(f"bench: fast-plaid failed under {python} (exit {code}): {error}")
    peer = json.loads((out / "result.json").read_text())
    run = {qid: rank_scores(doc_ids[p] for p, _ in hits) for (qid, _), hits in zip(queries, peer["ranked"])}
    n_vectors = int(np.load(out / "doclens.npy").sum())
    return {
        **quality_and_latency(run, qrels, [e + s for e, s in zip(encode_ms, peer["search_ms"])]),
        "search_p50_ms": latency(peer["search_ms"])["p50_ms"],
        "query_encode_p50_ms": latency(encode_ms)["p50_ms"], "query_encode_p95_ms": latency(encode_ms)["p95_ms"],
        "bytes_per_vector": peer["index_bytes"] / n_vectors,
        "build_s": peer["build_s"], "peak_rss_mb": peer["peak_rss_mb"], "gpu_peak_mb": peer.get("gpu_peak_mb"),
        **FAST_PLAID, "device": peer["device"], "dtype": peer["dtype"], "versions": peer["versions"],
        "centroids": "fast-plaid's own k-means",
    }
