"""Side by side with PLAID (`propdex bench --peers colbert-plaid,fast-plaid`).

Every system answers the same BEIR queries from the same MiniLM token
vectors: those of one propdex `tokens` index of the corpus. They run one
after another on one machine with the same threads, each in a fresh process,
so that its peak resident memory is its own.

- `propdex`: the index as built, searched by `Searcher` (IVF-PQ stage 1,
  exact MaxSim over the candidates' stored vectors or decoded codes) with
  its defaults, which score a document by its best passage-sized window;
  `propdex:window=0` scores whole documents, as `exact` and the peers do,
  so it is the row that measures what compression and stage 1 lose (and so
  is every `--also` index).
- `exact`: float32 MaxSim of every query over every document's stored
  vectors, the reference both approximate. It is one blocked scan of each
  shard's float16 file for all queries together (a matrix product per
  block of rows, folded into per-document maxima), not `Searcher` re-scoring
  every document per query, which is far too slow at one thread (eval.exact).
- `colbert-plaid`: ColBERTv2/PLAID as colbert-ai 0.2.22 stores and searches
  it: its `ResidualCodec` (b-bit residuals against centroids, bucket cutoffs
  from a held-out sample), its IVF of passage ids (`optimize_ivf`), its
  `IndexScorer` with the C++ CPU kernels (`filter_pids`,
  `decompress_residuals`) and the search settings colbert's `Searcher`
  picks for k = 10. Its centroids are the propdex index's IVF centroids,
  unit-normalised as ColBERT's k-means leaves them; only the files are laid
  out here, by colbert's own classes (eval.peer_colbert).
- `fast-plaid`: the GPU peer, fast-plaid 1.7 (PLAID's search in Rust and
  torch) with its own k-means and residual codec. It pins torch==2.11.0, so
  it runs in an environment of its own (`--fast-plaid-python`): propdex
  writes the vectors to .npy files and eval/fast_plaid_peer.py, which needs
  nothing but numpy, torch and fast_plaid, builds and searches there, on
  `--device` (a GPU when there is one). Its query time is the same query
  encoding as the others' plus its search (eval.peer_fast_plaid drives it,
  eval.peer_vectors writes what it reads).

On a GPU machine without FAISS, where no propdex index can be built,
`bench --peer-vectors encoder` gives exact MaxSim and fast-plaid the
`tokens` encoder's vectors straight from `--device` (measure_encoded):
propdex's own rows then come from a CPU run of the same corpus.

Query time includes encoding the query (the same encoder for all); build
time is indexing from vectors (train + add for propdex; codec, compression
and IVF for PLAID): the encoding they share is measured once, in the manifest.
How each system is timed is eval.measures'; this module picks the systems
and runs each in a process of its own.
"""
from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from propdex.encoders import encoder_from_config
from propdex.encoders.provenance import hardware
from propdex.indexer.build import peak_rss_mb
from propdex.indexer.manifest import read_manifest
from propdex.indexer.settings import store_of
from propdex.retriever import Searcher

from .exact import measure_exact
from .indexes import all_in_bytes
from .measures import in_child, latency, quality_and_latency, timed
from .peer_colbert import measure_plaid
from .peer_fast_plaid import measure_encoded, measure_fast_plaid

log = logging.getLogger(__name__)

PEERS = {"colbert-plaid": "colbert", "fast-plaid": "fast_plaid"}  # peer -> the module its package installs


def missing_peers(peers: list[str], fast_plaid_python: str = sys.executable) -> dict[str, str]:
    """The peers that cannot run here, with the reason (an unknown name is an error).
    fast-plaid is imported for real under its interpreter, as its run will
    import it: an install that is there but broken (a compiled dependency
    missing a symbol) is skipped here, not found after the propdex systems ran."""
    if unknown := [p for p in peers if p not in PEERS]:
        raise ValueError(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
    missing = {}
    for peer in peers:
        if peer == "fast-plaid":
            error = import_error(fast_plaid_python, "fast_plaid.search")
            if error == "not found":
                missing[peer] = (f"fast_plaid is not importable by {fast_plaid_python} (it pins torch==2.11.0: install it in an "
                                 f"environment of its own and give that Python as --fast-plaid-python)")
            elif error:
                missing[peer] = f"fast_plaid does not import under {fast_plaid_python}: {error}"
        elif importlib.util.find_spec(PEERS[peer]) is None:
            missing[peer] = f"{PEERS[peer]} is not installed (pip install 'propdex[bench]')"
    return missing


def skipping(peers: list[str], fast_plaid_python: str) -> dict[str, str]:
    """missing_peers, each logged as skipped with its reason."""
    skipped = missing_peers(peers, fast_plaid_python)
    for peer, why in skipped.items():
        log.warning("skipping peer %s: %s", peer, why)
    return skipped


def import_error(python: str, module: str) -> str | None:
    """None where the interpreter `python` imports `module`; "not found"
    where it has no such module or there is no such interpreter; else the
    last line of the import's error."""
    try:
        done = subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True)
    except OSError:  # no such interpreter
        return "not found"
    if done.returncode == 0:
        return None
    lines = done.stderr.strip().splitlines() or [f"exit {done.returncode}"]
    top = module.split(".")[0]
    return "not found" if f"No module named '{top}'" in lines[-1] else lines[-1]


def side_by_side(index: Path, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], peers: list[str],
                 threads: int, work: Path, also: list[Path] = (), fast_plaid_python: str = sys.executable,
                 device: str = "auto", runtime: str = "torch", rounds: int = 1,
                 progress: Callable[[dict[str, Any]], None] = lambda so_far: None) -> dict[str, Any]:
    """{"systems": {"propdex": {...}, peer: {...}}, "exact": {...}, "skipped": {peer: why}, "threads": n}.

    `also`: more propdex indexes of the same corpus (another store or
    factory), each two systems named by its settings, `propdex:store=codes:factory=...`
    at its default window and with `:window=0`.
    `rounds`: the propdex systems take turns this many times; each reports
    its median round's latency (its rounds' p50s beside). The peers and
    exact MaxSim run once: they build their index in the process they time.
    `fast_plaid_python`: the interpreter fast-plaid runs in. `device`: where
    fast-plaid runs and where the propdex systems encode the query and
    re-score (stage 2); their stage 1 and exact MaxSim stay on the CPU.
    `runtime`: what runs the query encoder's backbone, the same for every
    system (torch, onnx, onnx-int8): the systems share one query encoder,
    so only their search differs. `progress` gets the result so far after
    each system (the bench keeps it on disk)."""
    if store_of(read_manifest(index)) != "float16":
        raise ValueError(f"bench --peers: {index} keeps no float16 vectors, and exact MaxSim and the peers are built from them; "
                         f"give an index built with --store float16, and this one with --also")
    skipped = skipping(peers, fast_plaid_python)
    common = {"index": str(index), "queries": queries, "qrels": qrels, "threads": threads, "runtime": runtime}
    result: dict[str, Any] = {"systems": {}, "exact": None, "skipped": skipped, "threads": threads, "query_runtime": runtime,
                              "rounds": rounds}
    systems = {"propdex": (index, None), "propdex:window=0": (index, 0)}
    for other in also:
        m = read_manifest(other)
        name = f"propdex:store={store_of(m)}:factory={m['index']['factory']}"
        if hashing := m["index"].get("hashing"):
            name += f":bits={hashing['bits']}:hashing={hashing['method']}"
        if name in systems:
            raise ValueError(f"bench --also: {other} is {name} as another index given is")
        systems |= {name: (other, None), f"{name}:window=0": (other, 0)}
    # The machine's speed drifts over minutes, so the systems take turns,
    # round after round, and each is credited with its median round.
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, (where, window) in systems.items():
            runs[name].append(in_child(measure_propdex, **common | {"index": str(where)}, window=window, device=device))
            progress(result | {"propdex_rounds": runs})
    result["systems"] |= {name: median_round(measured) for name, measured in runs.items()}
    result["exact"] = in_child(measure_exact, **common)
    progress(result)
    for peer in (p for p in peers if p not in skipped):
        # A peer that fails is recorded and the others still run: the measured systems are not thrown away with it.
        try:
            if peer == "fast-plaid":
                measured = in_child(measure_fast_plaid, **common, out=str(work / peer), python=fast_plaid_python, device=device)
            else:
                measured = in_child(measure_plaid, **common, out=str(work / peer))
        except RuntimeError as e:
            log.error("peer %s failed: %s", peer, e)
            result.setdefault("failed", {})[peer] = str(e)
        else:
            result["systems"][peer] = measured
        progress(result)
    return result


def side_by_side_encoded(corpus: Path, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], peers: list[str],
                         threads: int, work: Path, fast_plaid_python: str = sys.executable, device: str = "auto") -> dict[str, Any]:
    """side_by_side's result for vectors straight from the encoder on `device`
    (measure_encoded), plus "vectors": how they were made."""
    skipped = skipping(peers, fast_plaid_python)
    measured = in_child(measure_encoded, corpus=str(corpus), queries=queries, qrels=qrels, threads=threads,
                        out=str(work / "encoded"), python=fast_plaid_python, device=device,
                        peers=[p for p in peers if p not in skipped])
    return measured | {"skipped": skipped, "threads": threads, "query_runtime": "torch"}


def median_round(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """One system's rounds as one entry: the round of median p50, with every
    round's p50 beside it. Rankings do not change between rounds, so
    neither does nDCG; a round that ranked otherwise is an error."""
    if len({m["nDCG@10"] for m in measured}) > 1:
        raise RuntimeError(f"bench: one system ranked differently in two rounds: {[m['nDCG@10'] for m in measured]}")
    ordered = sorted(measured, key=lambda m: m["p50_ms"])
    return ordered[(len(ordered) - 1) // 2] | {"p50_ms_rounds": [m["p50_ms"] for m in measured],
                                                "peak_rss_mb": max(m["peak_rss_mb"] for m in measured)}


def measure_propdex(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                    window: int | None = None, runtime: str = "torch", device: str = "cpu") -> dict[str, Any]:
    """`window`: the search option (None: the index's default, 0: whole documents).
    `device`: where the query is encoded and stage 2 runs (Searcher.load's rule)."""
    index = Path(index)

    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device=device, runtime=runtime)
    with Searcher.load(index, encoder=encoder, threads=threads) as searcher:
        run, times = timed(queries, lambda text: [(h.doc_id, h.score) for h in searcher.search(text, k=10, window=window)])
        window = searcher.window if window is None else window
    def encode_only(text: str) -> list[tuple[str, float]]:
        encoder.encode_queries([text])
        return []

    # The query encoder alone, over the same queries: the share of p50 that is not search.
    _, encode_ms = timed(queries, encode_only)
    return {
        "query_runtime": encoder.backbone.runtime,
        "device": hardware() if encoder.backbone.device.type == "cuda" else "cpu",
        "query_encode_p50_ms": latency(encode_ms)["p50_ms"],
        "window": window,
        **quality_and_latency(run, qrels, times),
        "bytes_per_vector": all_in_bytes(index, manifest, encoder.dim) / manifest["counts"]["vectors"],
        "build_s": round(manifest["timings"]["train_s"] + manifest["timings"]["add_s"], 3),
        "peak_rss_mb": peak_rss_mb(),
        "factory": manifest["index"]["factory"], "store": store_of(manifest),
    }
