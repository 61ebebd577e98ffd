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
  every document per query, which took over 13 minutes on 1.4M vectors at
  one thread.
- `colbert-plaid`: ColBERTv2/PLAID as colbert-ai 0.2.22 stores and searches
  it: its `ResidualCodec` (b-bit residuals against centroids, bucket cutoffs
  from a held-out sample), its IVF of passage ids (`optimize_ivf`), its
  `IndexScorer` with the C++ CPU kernels (`filter_pids`,
  `decompress_residuals`) and the search settings colbert's `Searcher`
  picks for k = 10. Its centroids are the propdex index's IVF centroids,
  unit-normalised as ColBERT's k-means leaves them; only the files are laid
  out here, by colbert's own classes.
- `fast-plaid`: the GPU peer, fast-plaid 1.7 (PLAID's search in Rust and
  torch) with its own k-means and residual codec. It pins torch==2.11.0, so
  it runs in an environment of its own (`--fast-plaid-python`): propdex
  writes the vectors to .npy files and eval/fast_plaid_peer.py, which needs
  nothing but numpy, torch and fast_plaid, builds and searches there, on
  `--device` (a GPU when there is one). Its query time is the same query
  encoding as the others' plus its search.

On a GPU machine without FAISS, where no propdex index can be built,
`bench --peer-vectors encoder` gives exact MaxSim and fast-plaid the
`tokens` encoder's vectors straight from `--device` (measure_encoded):
propdex's own rows then come from a CPU run of the same corpus.

Query time includes encoding the query (the same encoder for all); build
time is indexing from vectors (train + add for propdex; codec, compression
and IVF for PLAID): the encoding they share is measured once, in the manifest.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import encoder_from_config
from propdex.indexer import ann
from propdex.indexer.build import peak_rss_mb
from propdex.indexer.manifest import read_manifest
from propdex.indexer.settings import store_of
from propdex.indexer.store import ShardStore, read_deleted
from propdex.retriever import Searcher
from propdex.retriever.scoring import top_k

from .metrics import beir_metrics, rank_scores
from .run import all_in_bytes

if TYPE_CHECKING:
    from propdex.encoders.base import Encoder

log = logging.getLogger(__name__)

PEERS = {"colbert-plaid": "colbert", "fast-plaid": "fast_plaid"}  # peer -> the module its package installs
PLAID_NBITS = 2
PLAID_HELDOUT = 50_000  # colbert holds out min(50k, 5% of its k-means sample) for the residual buckets...
QUANTILE_MAX = 2**24  # ...and takes their quantiles with torch, which refuses more elements than this
PLAID_K10 = {"ncells": 1, "centroid_score_threshold": 0.5, "ndocs": 256}  # colbert Searcher's settings for k <= 10


FAST_PLAID = {"k": 10, "nbits": 2, "n_ivf_probe": 8, "n_full_scores": 4096}  # 2 bits as colbert-plaid; fast-plaid's search defaults


def missing_peers(peers: list[str], fast_plaid_python: str = sys.executable) -> dict[str, str]:
    """The peers that cannot run here, with the reason (an unknown name is an error)."""
    if unknown := [p for p in peers if p not in PEERS]:
        raise ValueError(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
    missing = {}
    for peer in peers:
        if peer == "fast-plaid":
            if not importable(fast_plaid_python, PEERS[peer]):
                missing[peer] = (f"fast_plaid is not importable by {fast_plaid_python} (it pins torch==2.11.0: install it in an "
                                 f"environment of its own and give that Python as --fast-plaid-python)")
        elif importlib.util.find_spec(PEERS[peer]) is None:
            missing[peer] = f"{PEERS[peer]} is not installed (pip install 'propdex[bench]')"
    return missing


def skipping(peers: list[str], fast_plaid_python: str) -> dict[str, str]:
    """missing_peers, each logged as skipped with its reason."""
    skipped = missing_peers(peers, fast_plaid_python)
    for peer, why in skipped.items():
        log.warning("skipping peer %s: %s", peer, why)
    return skipped


def importable(python: str, module: str) -> bool:
    """Whether the interpreter `python` finds `module` (without importing it)."""
    try:
        return subprocess.run([python, "-c", f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"],
                              capture_output=True).returncode == 0
    except OSError:  # no such interpreter
        return False


def side_by_side(index: Path, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], peers: list[str],
                 threads: int, work: Path, also: list[Path] = (), fast_plaid_python: str = sys.executable,
                 device: str = "auto", runtime: str = "torch", rounds: int = 1) -> dict[str, Any]:
    """{"systems": {"propdex": {...}, peer: {...}}, "exact": {...}, "skipped": {peer: why}, "threads": n}.

    `also`: more propdex indexes of the same corpus (another store or
    factory), each two systems named by its settings, `propdex:store=codes:factory=...`
    at its default window and with `:window=0`.
    `rounds`: the propdex systems take turns this many times; each reports
    its median round's latency (its rounds' p50s beside). The peers and
    exact MaxSim run once: they build their index in the process they time.
    `fast_plaid_python`, `device`: the interpreter and device fast-plaid runs on.
    `runtime`: what runs the query encoder's backbone, the same for every
    system (torch, onnx, onnx-int8): the systems share one query encoder,
    so only their search differs."""
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
        systems |= {name: (other, None), f"{name}:window=0": (other, 0)}
    # The machine's speed drifts over minutes (a third between two runs of one system here), so the
    # systems take turns, round after round, and each is credited with its median round.
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    for _ in range(rounds):
        for name, (where, window) in systems.items():
            runs[name].append(in_child(measure_propdex, **common | {"index": str(where)}, window=window))
    result["systems"] |= {name: median_round(measured) for name, measured in runs.items()}
    result["exact"] = in_child(measure_exact, **common)
    for peer in (p for p in peers if p not in skipped):
        if peer == "fast-plaid":
            result["systems"][peer] = in_child(measure_fast_plaid, **common, out=str(work / peer), python=fast_plaid_python, device=device)
        else:
            result["systems"][peer] = in_child(measure_plaid, **common, out=str(work / peer))
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


def thread_env(threads: int, *more: str) -> dict[str, str]:
    """This process's environment with OpenMP's and the BLAS libraries' threads (and `more` variables) set to `threads`."""
    return os.environ | {var: str(threads) for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", *more)}


def in_child(fn: Callable[..., dict[str, Any]], **kwargs) -> dict[str, Any]:
    """`fn(**kwargs)` (a module-level function) in a fresh interpreter: its
    peak RSS is its own, and no peer's threads or extensions reach the next system."""
    name = fn.__name__
    code = f"import json, sys; from {fn.__module__} import {name}; print(json.dumps({name}(**json.load(sys.stdin))))"
    # numpy's BLAS (stage 2's products, the exact scan) spawns a thread per core unless told before it loads.
    env = thread_env(kwargs["threads"])
    done = subprocess.run([sys.executable, "-c", code], input=json.dumps(kwargs), stdout=subprocess.PIPE, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"bench: {name} failed (exit {done.returncode}; its error is above)")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# the systems (each runs in its own process)


def measure_propdex(index: str, queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]], threads: int,
                    window: int | None = None, runtime: str = "torch") -> dict[str, Any]:
    """`window`: the search option (None: the index's default, 0: whole documents)."""
    index = Path(index)

    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu", runtime=runtime)
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
        "query_encode_p50_ms": latency(encode_ms)["p50_ms"],
        "window": window,
        **_quality_and_latency(run, qrels, times),
        "bytes_per_vector": all_in_bytes(index, manifest, encoder.dim) / manifest["counts"]["vectors"],
        "build_s": round(manifest["timings"]["train_s"] + manifest["timings"]["add_s"], 3),
        "peak_rss_mb": peak_rss_mb(),
        "factory": manifest["index"]["factory"], "store": store_of(manifest),
    }


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
    ranked: list[list[tuple[float, str]]] = [[] for _ in queries]
    for s in manifest["shards"]:
        store = ShardStore(index / s["name"])
        try:
            live = np.ones(len(store), bool)
            if s.get("deleted"):
                live[read_deleted(index / s["name"] / s["deleted"])] = False
            by_ordinal = {o: d for d, o in store.id_ordinals()}
            for q, scores in enumerate(maxsim_every_document(qv, store, budget_mb)):
                scores[~live] = -np.inf
                ranked[q] += [(float(scores[o]), by_ordinal[int(o)]) for o in top_k(scores, 10) if np.isfinite(scores[o])]
        finally:
            store.close()
    elapsed = time.perf_counter() - started
    run = {qid: rank_scores(doc_id for _, doc_id in sorted(hits, key=lambda h: (-h[0], h[1]))[:10]) for (qid, _), hits in zip(queries, ranked)}
    return {
        "query_runtime": encoder.backbone.runtime,
        "nDCG@10": round(beir_metrics(run, qrels)["nDCG@10"], 4), "queries": len(queries),
        "p50_ms": None, "p95_ms": None, "scan_ms_per_query": round(1000 * elapsed / len(queries), 1),
        "bytes_per_vector": 4 * encoder.dim, "build_s": 0.0, "peak_rss_mb": peak_rss_mb(),
        "within": "every document, one blocked float32 scan of the stored vectors for all queries",
    }


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


def float16_stores(index: Path, manifest: dict[str, Any], peer: str) -> list[ShardStore]:
    """The index's shard stores, open (the caller closes them), if every one
    keeps its vectors and none has deletions: a peer is built from them all."""
    if any(s.get("deleted") for s in manifest["shards"]):
        raise ValueError(f"{index}: {peer} reads every document's vectors and this index has deletions; compact it first")
    stores = [ShardStore(index / s["name"]) for s in manifest["shards"]]
    if not all(st.has_vectors for st in stores):
        for st in stores:
            st.close()
        raise ValueError(f"{index}: {peer} reads a float16 store; build the index with --store float16")
    return stores


def _chunks(stores: list, docs: int = 1024):
    """(document ids, their vector counts, their vectors as float32) a chunk of documents at a time, in index order."""
    for store in stores:
        by_ordinal = {o: d for d, o in store.id_ordinals()}
        for start in range(0, len(store), docs):
            ordinals = range(start, min(start + docs, len(store)))
            vectors = [v for v, _ in store.vectors(ordinals)]
            yield [by_ordinal[o] for o in ordinals], [len(v) for v in vectors], np.concatenate(vectors).astype(np.float32)


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


def write_queries(encoder: "Encoder", queries: list[tuple[str, str]], out: Path) -> list[float]:
    """The queries' vectors as out/queries.npy (float16) and out/qlens.npy.
    Returns each query's encoding milliseconds, which every system's query time includes."""
    encode_ms, encoded = [], []
    encoder.encode_queries([queries[0][1]])  # load pages and kernels once, as timed() does
    for _, text in queries:
        started = time.perf_counter()
        encoded.append(encoder.encode_queries([text])[0].vectors.astype(np.float16))  # on the host: the device is done
        encode_ms.append((time.perf_counter() - started) * 1000)
    np.save(out / "queries.npy", np.concatenate(encoded))
    np.save(out / "qlens.npy", np.array([len(q) for q in encoded], np.int64))
    return encode_ms


def run_fast_plaid(out: Path, doc_ids: list[str], queries: list[tuple[str, str]], qrels: dict[str, dict[str, int]],
                   encode_ms: list[float], threads: int, python: str, device: str) -> dict[str, Any]:
    """eval/fast_plaid_peer.py under `python` over the vectors in `out`; its figures, scored here."""
    (out / "settings.json").write_text(json.dumps({"device": device, "threads": threads, **FAST_PLAID}))
    # fast-plaid's Rust side runs on rayon's pool.
    done = subprocess.run([python, str(Path(__file__).with_name("fast_plaid_peer.py")), str(out)], env=thread_env(threads, "RAYON_NUM_THREADS"))
    if done.returncode:
        raise RuntimeError(f"bench: fast-plaid failed under {python} (exit {done.returncode}; its error is above)")
    peer = json.loads((out / "result.json").read_text())
    run = {qid: rank_scores(doc_ids[p] for p, _ in hits) for (qid, _), hits in zip(queries, peer["ranked"])}
    n_vectors = int(np.load(out / "doclens.npy").sum())
    return {
        **_quality_and_latency(run, qrels, [e + s for e, s in zip(encode_ms, peer["search_ms"])]),
        "search_p50_ms": latency(peer["search_ms"])["p50_ms"],
        "query_encode_p50_ms": latency(encode_ms)["p50_ms"], "query_encode_p95_ms": latency(encode_ms)["p95_ms"],
        "bytes_per_vector": peer["index_bytes"] / n_vectors,
        "build_s": peer["build_s"], "peak_rss_mb": peer["peak_rss_mb"], "gpu_peak_mb": peer.get("gpu_peak_mb"),
        **FAST_PLAID, "device": peer["device"], "dtype": peer["dtype"], "versions": peer["versions"],
        "centroids": "fast-plaid's own k-means",
    }


def write_encoded(corpus: str, encoder: "Encoder", out: Path) -> tuple[list[str], dict[str, Any]]:
    """Every document's token vectors from `encoder`, as out/documents.npy
    (float16, documents one after another) and out/doclens.npy, the layout
    write_vectors gives. Returns the document id of each row of doclens and
    the encoding's figures. The rows are held in memory until written:
    2 bytes a dimension a vector (1.1 GB for SciFact's 1.4M)."""
    from propdex.encoders.units import Document
    from propdex.indexer.readers import read_corpus

    docs = [r for r in read_corpus([Path(corpus)]) if isinstance(r, Document)]
    torch_sync(encoder.backbone.device)()
    started = time.perf_counter()
    passages = [p for ps in encoder.cut(docs) for p in ps]
    encoded = encoder.encode(passages, progress=True)
    seconds = time.perf_counter() - started  # the vectors are on the host: the device is done
    rows: dict[str, list[np.ndarray]] = {d.id: [] for d in docs}
    for passage, e in zip(passages, encoded):
        rows[passage.doc.id].append(e.vectors.astype(np.float16))
    doc_ids = [d for d, parts in rows.items() if sum(map(len, parts))]
    np.save(out / "documents.npy", np.concatenate([v for d in doc_ids for v in rows[d]]))
    np.save(out / "doclens.npy", np.array([sum(map(len, rows[d])) for d in doc_ids], np.int64))
    return doc_ids, {"from": "encoder", "documents": len(docs), "passages": len(passages),
                     "vectors": sum(len(e.vectors) for e in encoded), "encode_s": round(seconds, 2),
                     "encode_docs_per_s": round(len(docs) / seconds, 1)}


def torch_sync(device) -> Callable[[], None]:
    """A function that waits for `device` (a no-op off CUDA), so that a timing covers the work and not its launch."""
    import torch

    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)


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
        "query_runtime": "torch", **_quality_and_latency(run, qrels, [e + s for e, s in zip(encode_ms, ms)]),
        "scan_ms_per_query": latency(ms)["p50_ms"], "bytes_per_vector": 4 * docs.shape[1], "build_s": 0.0,
        "peak_rss_mb": peak_rss_mb(), "device": device,
        "within": "every document, float32 MaxSim in torch over the encoder's vectors",
    }


def write_vectors(index: Path, manifest: dict[str, Any], out: Path) -> list[str]:
    """The index's documents' vectors as out/documents.npy (float16, one
    row a vector) and out/doclens.npy, streamed a chunk at a time. Returns
    the document id of each row of doclens."""
    stores = float16_stores(index, manifest, "the fast-plaid peer")
    try:
        rows = np.lib.format.open_memmap(out / "documents.npy", mode="w+", dtype=np.float16,
                                         shape=(manifest["counts"]["vectors"], stores[0].dim))
        doc_ids, doclens, at = [], [], 0
        for ids, lengths, vectors in _chunks(stores):
            rows[at: at + len(vectors)] = vectors
            at += len(vectors)
            doc_ids += ids
            doclens += lengths
        if at != len(rows):
            raise ValueError(f"{index}: the manifest counts {len(rows)} vectors, the stores hold {at}")
        rows.flush()
        del rows
        np.save(out / "doclens.npy", np.array(doclens, np.int64))
        return doc_ids
    finally:
        for st in stores:
            st.close()


# --------------------------------------------------------------------------
# shared measures


def timed(queries: list[tuple[str, str]], search) -> tuple[dict[str, dict[str, float]], list[float]]:
    search(queries[0][1])  # load pages and kernels once
    run, times = {}, []
    for qid, text in queries:
        started = time.perf_counter()
        hits = search(text)
        times.append((time.perf_counter() - started) * 1000)
        run[qid] = rank_scores(doc_id for doc_id, _ in hits)
    return run, times


def latency(times: list[float]) -> dict[str, float]:
    """p50 and p95 of per-query milliseconds."""
    return {"p50_ms": round(float(np.percentile(times, 50)), 1), "p95_ms": round(float(np.percentile(times, 95)), 1)}


def _quality_and_latency(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]], times: list[float]) -> dict[str, Any]:
    return {"nDCG@10": round(beir_metrics(run, qrels)["nDCG@10"], 4), "queries": len(times), **latency(times)}
