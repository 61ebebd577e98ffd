"""`propdex bench`: the engine's performance figures, as ratios measured in one run.

1. Encoding throughput of the whole indexing pipeline (passage cutting,
   tokenisation, forward, pooling, LMDB write) divided by the bare model
   forward pass over the same passages in the same batches (goal >= 0.85).
2. Index bytes per vector and per document against float32 flat.
3. On a large token index (SciFact with `tokens`, > 1M vectors): search
   latency p50/p95, and stage-1 recall of the (PQ) index against exact
   nearest-neighbour search over the stored vectors.
4. Peak memory of the build (recorded in its manifest) and of search.
5. The CPU runtimes (`--runtime torch|onnx|onnx-int8`): docs/s of the
   whole `single` indexing pipeline on the same documents, each against
   eager torch, and how far each runtime's vectors are from torch's.
6. With `--peers` (eval.peers): propdex, exact MaxSim and each peer
   (colbert-plaid; fast-plaid in its own environment, on --device) on the
   same token vectors, queries, threads and query encoder (`--query-runtime`):
   nDCG@10, bytes per vector all in, p50/p95, build seconds, peak RSS;
   `--also` adds other propdex indexes of the corpus (another store or factory);
   `--rounds` has the propdex systems take turns against the machine's drift;
   `--peer-vectors encoder` feeds exact MaxSim and fast-plaid straight from
   the encoder on --device, for a GPU machine without FAISS.
7. `--sections scale` (eval.scale, hours on a CPU: never by default):
   indexes over the first `--scale-sizes` documents of `--scale-corpus`,
   per encoder: docs/s, build seconds, peak RSS, bytes, p50; a plot, and
   the cost projected to `--project` documents.
8. `--sections encode` (eval.scale, for a GPU: never by default): each
   `--scale-encoders` encoder's docs/s alone over the same documents, on
   `--device`, with no index built (it needs no FAISS).
9. `--sections ingest` (eval.ingest, never by default): one-document adds
   to a living index of `--ingest-docs` synthetic documents, each timed to
   its commit, beside a BM25 rebuild over the same documents.
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import RUNTIMES, encoder_from_config, load_encoder
from propdex.indexer.build import IndexWriter, peak_rss_mb
from propdex.indexer.manifest import read_manifest
from propdex.indexer.readers import read_corpus
from propdex.retriever import Searcher

from . import scale
from .datasets import beir_queries, load_beir, load_hotpotqa
from .indexes import ann_bytes
from .peers import PEERS, missing_peers, side_by_side, side_by_side_encoded
from .provenance import run_versions

if TYPE_CHECKING:
    from propdex.encoders import Backbone

log = logging.getLogger(__name__)


def throughput(corpus: Path, n_docs: int, backbone: "Backbone", encoder_name: str = "tokens") -> dict[str, Any]:
    """Pipeline vs bare forward on the same passages, same batch composition."""
    import torch

    encoder = load_encoder(encoder_name, backbone=backbone)
    docs = scale.first_documents(corpus, n_docs)
    passages = [p for ps in encoder.cut(docs) for p in ps]
    texts = sorted((p.text for p in passages), key=len)
    batches = [texts[i : i + encoder.batch_size] for i in range(0, len(texts), encoder.batch_size)]
    tok = backbone.tokenizer
    inputs = [tok(b, padding=True, truncation=True, max_length=backbone.max_length, return_tensors="pt") for b in batches]
    with torch.inference_mode():
        backbone.model(**inputs[0])  # warm up kernels once for both timings
        started = time.perf_counter()
        for enc in inputs:
            backbone.model(**enc)
        bare = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        IndexWriter(Path(tmp) / "ix", encoder, shard_docs=len(docs) + 1, factory="Flat").build(docs)
        whole = time.perf_counter() - started
    n_tokens = sum(int(e["attention_mask"].sum()) for e in inputs)
    return {
        "docs": len(docs), "passages": len(passages), "tokens": n_tokens,
        "bare_forward_s": round(bare, 3), "pipeline_s": round(whole, 3),
        "pipeline_tokens_per_s": round(n_tokens / whole, 1), "ratio": round(bare / whole, 3),
    }


def sizes(index: Path) -> dict[str, Any]:
    m = read_manifest(index)
    vectors, docs, dim = m["counts"]["vectors"], m["counts"]["documents"], m["encoder"]["dim"]
    ann_total = ann_bytes(index, m)
    store_bytes = sum((index / s["name"] / "meta.lmdb" / "data.mdb").stat().st_size for s in m["shards"])
    return {
        "factory": m["index"]["factory"], "documents": docs, "vectors": vectors, "dim": dim,
        "vectors_per_doc": round(vectors / docs, 2),
        "ann_bytes_per_vector": round(ann_total / vectors, 2),
        "float32_flat_bytes_per_vector": 4 * dim,
        "compression_vs_float32": round(4 * dim / (ann_total / vectors), 2),
        "ann_bytes_per_doc": round(ann_total / docs, 1),
        "store_bytes_per_doc": round(store_bytes / docs, 1),
        "build_timings": m.get("timings", {}),
    }


def latency_and_recall(index: Path, queries: list[str], backbone: "Backbone", recall_queries: int, k1: int = 64) -> dict[str, Any]:
    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], backbone=backbone)
    with Searcher.load(index, encoder=encoder) as searcher:
        searcher.search(queries[0])  # load pages and kernels once
        times = []
        for q in queries:
            started = time.perf_counter()
            searcher.search(q, k=10)
            times.append((time.perf_counter() - started) * 1000)
        search_rss = peak_rss_mb()
        # Stage-1 recall: of each query vector's k1 exact nearest neighbours,
        # the share the ANN index returns among its own k1 hits.
        qv = np.concatenate([e.vectors for e in encoder.encode_queries(queries[:recall_queries])])
        found = total = 0
        exact_scores = [np.full((len(qv), k1), -np.inf, np.float32) for _ in searcher.shards]
        exact_ids = [np.zeros((len(qv), k1), np.int64) for _ in searcher.shards]
        for si, shard in enumerate(searcher.shards):
            base = 0
            for chunk in shard.store.iter_vectors():
                sims = qv @ chunk.T
                top = np.argpartition(-sims, min(k1, sims.shape[1] - 1), axis=1)[:, :k1]
                merged_s = np.concatenate([exact_scores[si], np.take_along_axis(sims, top, 1)], 1)
                merged_i = np.concatenate([exact_ids[si], top + base], 1)
                keep = np.argsort(-merged_s, axis=1)[:, :k1]
                exact_scores[si] = np.take_along_axis(merged_s, keep, 1)
                exact_ids[si] = np.take_along_axis(merged_i, keep, 1)
                base += len(chunk)
            _, ann_ids = shard.index.search(qv, k1)
            for row in range(len(qv)):
                found += len(set(exact_ids[si][row].tolist()) & set(ann_ids[row].tolist()))
                total += k1
    t = np.array(times)
    return {
        "queries": len(queries), "k": 10, "nprobe": 32,
        "latency_ms_p50": round(float(np.percentile(t, 50)), 1), "latency_ms_p95": round(float(np.percentile(t, 95)), 1),
        "stage1_recall_at_%d" % k1: round(found / max(total, 1), 4), "recall_query_vectors": int(len(qv)),
        "search_peak_rss_mb": search_rss,
    }


def runtimes(corpus: Path, n_docs: int, names: list[str], repeats: int = 3, encoder_name: str = "single") -> dict[str, Any]:
    """Indexing docs/s of each runtime over the same documents, and its
    vectors' cosine to eager torch's. The runtimes take turns, `repeats`
    rounds of one build each, and each is credited with its median: on a
    shared machine the speed of the cores drifts within minutes, and
    alternating spreads that drift over all of them alike."""
    from propdex.encoders.backbone import Backbone

    docs = scale.first_documents(corpus, n_docs)
    names = ["torch", *[n for n in names if n != "torch"]]
    encoders = {}
    for name in names:
        encoder = load_encoder(encoder_name, backbone=Backbone.load(device="cpu", runtime=name))
        encoder.encode([p for d in docs[:8] for p in encoder.passages(d)])  # export (once per machine), session and kernels warm
        encoders[name] = encoder
    seconds: dict[str, list[float]] = {name: [] for name in names}
    vectors: dict[str, np.ndarray] = {}
    for _ in range(repeats):
        for name, encoder in encoders.items():
            with tempfile.TemporaryDirectory() as tmp:
                started = time.perf_counter()
                IndexWriter(Path(tmp) / "ix", encoder, shard_docs=len(docs) + 1, factory="Flat", bm25=False).build(docs)
                seconds[name].append(time.perf_counter() - started)
                with Searcher.load(Path(tmp) / "ix", encoder=encoder) as searcher:
                    v = np.concatenate([searcher.shards[0].store.vectors([i])[0][0] for i in range(len(docs))]).astype(np.float32)
            vectors[name] = v / np.linalg.norm(v, axis=1, keepdims=True)
            log.info("runtime %s: %.1f docs/s", name, len(docs) / seconds[name][-1])
    out: dict[str, Any] = {"docs": len(docs), "encoder": encoder_name, "repeats": repeats}
    median = {name: float(np.median(t)) for name, t in seconds.items()}
    for name in names:
        cosine = (vectors[name] * vectors["torch"]).sum(1)
        out[name] = {"seconds": round(median[name], 2), "seconds_each": [round(t, 2) for t in seconds[name]],
                     "docs_per_s": round(len(docs) / median[name], 2), "speedup": round(median["torch"] / median[name], 3),
                     "cosine_to_torch_min": round(float(cosine.min()), 5), "cosine_to_torch_mean": round(float(cosine.mean()), 5)}
    return out


def add_commands(sub) -> None:
    p = sub.add_parser("bench", help="performance figures on real data", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", type=Path, default=Path("../shared/data/beir/scifact"), help="BEIR folder (corpus.jsonl, queries.jsonl)")
    p.add_argument("--index", type=Path, help="a built tokens index of --corpus; with --peers one that keeps its vectors "
                                               "(--store float16) (default: build one under runs/bench)")
    p.add_argument("--throughput-docs", type=int, default=300)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--recall-queries", type=int, default=50)
    p.add_argument("--runtimes", default="torch,onnx,onnx-int8", help="CPU runtimes to compare with eager torch (needs the [onnx] extra)")
    p.add_argument("--runtime-docs", type=int, default=500)
    p.add_argument("--runtime-repeats", type=int, default=3, help="rounds in which the runtimes take turns (each gets its median)")
    p.add_argument("--sections", default=",".join(DEFAULT_SECTIONS),
                   help=f"which figures to measure, of {','.join(SECTIONS)} (default: {','.join(DEFAULT_SECTIONS)})")
    p.add_argument("--scale-corpus", type=Path, default=Path("../shared/data/wikipedia/extracted"))
    p.add_argument("--scale-sizes", default="100,1000,6514", help="documents per point of the scale curve")
    p.add_argument("--scale-encoders", default="single,tokens",
                   help="the curves' systems, as eval spells them, index options included (nugget:ratio=0.1:store=binary:bits=128)")
    p.add_argument("--scale-queries", type=Path, default=Path("../shared/data/hotpotqa/hotpot_dev_distractor_600.json"),
                   help="HotpotQA file whose first --queries questions time the scale curve's searches")
    p.add_argument("--project", type=int, default=6_500_000, help="documents to project the scale curve's costs to")
    p.add_argument("--ingest-docs", type=int, default=100_000, help="ingest: synthetic documents in the bulk-built index")
    p.add_argument("--ingest-adds", type=int, default=50, help="ingest: one-document adds timed after the bulk build")
    p.add_argument("--device", default="auto",
                   help="where the encode section and the fast-plaid peer run, and where --peers' propdex systems encode queries "
                        "and re-score (their stage 1 stays on the CPU; the other sections measure the CPU)")
    p.add_argument("--peers", help=f"side by side on the corpus's test queries: propdex, exact MaxSim and these peers "
                                   f"({', '.join(PEERS)}; '' for none; a peer not installed is skipped with a message)")
    p.add_argument("--peer-vectors", default="index", choices=("index", "encoder"),
                   help="with --peers: where exact MaxSim and the peers get their token vectors: the bench's float16 index "
                        "(default), or the tokens encoder on --device with no propdex index (a GPU machine without FAISS: "
                        "fast-plaid only, propdex's own rows come from a CPU run)")
    p.add_argument("--fast-plaid-python", default=sys.executable,
                   help="the Python of an environment with fast-plaid (it pins torch==2.11.0) (default: this one)")
    p.add_argument("--threads", type=int, help="threads for every system side by side (default: one per core)")
    p.add_argument("--query-runtime", default="torch", choices=RUNTIMES,
                   help="with --peers and --sections scale: what runs the query encoder's backbone (the same for every "
                        "system side by side)")
    p.add_argument("--rounds", type=int, default=1,
                   help="with --peers: the propdex systems take turns this many times, each credited with its median round")
    p.add_argument("--also", type=Path, action="append", default=[],
                   help="with --peers: another propdex index of --corpus measured beside (another --store or --factory); repeatable")
    p.add_argument("--work", type=Path, default=Path("runs/bench"), help="where the bench builds its indexes")
    p.add_argument("--out", type=Path, help="write the JSON here")
    p.set_defaults(run=_run)


DEFAULT_SECTIONS = ("search", "size", "throughput", "runtimes")
SECTIONS = (*DEFAULT_SECTIONS, "scale", "encode", "ingest")


def _run(args) -> int:
    import torch

    from propdex.encoders.backbone import Backbone

    sections = [s for s in args.sections.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        raise ValueError(f"unknown bench sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    peers = None if args.peers is None else [p for p in args.peers.split(",") if p]
    if peers is not None:
        missing_peers(peers, args.fast_plaid_python)  # an unknown name fails before any work
    if args.peer_vectors == "encoder" and peers is None:
        raise ValueError("bench --peer-vectors encoder says where the peers' vectors come from: give --peers fast-plaid with it")
    from_encoder = peers is not None and args.peer_vectors == "encoder"
    from_index = peers is not None and not from_encoder  # exact MaxSim and the peers read the bench's float16 index
    if from_encoder and (set(peers) - {"fast-plaid"} or {"search", "size", "throughput", "runtimes"} & set(sections)):
        raise ValueError("bench --peer-vectors encoder builds no propdex index: it measures exact MaxSim and fast-plaid alone "
                         "(--peers fast-plaid), with no --sections that read an index (give --sections '' or encode)")
    backbone = Backbone.load(device="cpu") if set(sections) - {"encode", "scale"} or from_index else None
    index = args.index
    if index is None and ({"search", "size"} & set(sections) or from_index):
        index = args.work / f"{args.corpus.name}-tokens"
        encoder = load_encoder("tokens", backbone=backbone)
        # float16: exact MaxSim and the peers are built from the index's own vectors.
        IndexWriter(index, encoder, store="float16", inputs={"paths": [str(args.corpus.resolve())]}).build(read_corpus([args.corpus]))
    result: dict[str, Any] = {
        "command": "propdex " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "versions": run_versions(), "cpu_threads": torch.get_num_threads(),
    }

    def unfinished(so_far: dict[str, Any] | None = None) -> None:
        """The result so far (and a section's own so far) to --out, marked unfinished: a run that is killed
        or fails later keeps what it measured."""
        write_json(args.out, result | (so_far or {}) | {"unfinished": True})

    def keep(**parts: Any) -> None:
        result.update(parts)
        unfinished()

    if "search" in sections:
        queries = list(beir_queries(args.corpus / "queries.jsonl").values())[: args.queries]
        keep(search=latency_and_recall(index, queries, backbone, args.recall_queries))
    if "size" in sections:
        keep(size=sizes(index))
    if "throughput" in sections:
        keep(throughput=throughput(args.corpus, args.throughput_docs, backbone))
    if "runtimes" in sections:
        keep(runtimes=runtimes(args.corpus, args.runtime_docs, [r for r in args.runtimes.split(",") if r], args.runtime_repeats))
    if "scale" in sections:
        points = [int(n) for n in args.scale_sizes.split(",") if n]
        texts = [q.text for q in load_hotpotqa(args.scale_queries, limit=args.queries).queries]
        curve = scale.scale_curve(args.scale_corpus, points, [e for e in args.scale_encoders.split(",") if e], texts,
                                  args.work / "scale", args.threads or 1, args.query_runtime)
        keep(scale=curve | {"projected": scale.project(curve["points"], args.project)})
        if args.out:
            scale.plot(curve, args.out.with_suffix(".png"))
    if "ingest" in sections:
        from .ingest import ingest

        keep(ingest=ingest(args.work, backbone, args.ingest_docs, args.ingest_adds))
    if "encode" in sections:
        keep(encode=scale.encode_rates(args.scale_corpus, [int(n) for n in args.scale_sizes.split(",") if n],
                                       [e for e in args.scale_encoders.split(",") if e], args.device))
    if from_encoder:
        task = load_beir(args.corpus)
        keep(**side_by_side_encoded(args.corpus, [(q.id, q.text) for q in task.queries], task.qrels, peers,
                                    args.threads or torch.get_num_threads(), args.work / "peers",
                                    fast_plaid_python=args.fast_plaid_python, device=args.device))
    elif from_index:
        task = load_beir(args.corpus)
        keep(**side_by_side(index, [(q.id, q.text) for q in task.queries], task.qrels, peers,
                            args.threads or torch.get_num_threads(), args.work / "peers", also=args.also,
                            fast_plaid_python=args.fast_plaid_python, device=args.device, runtime=args.query_runtime,
                            rounds=args.rounds, progress=unfinished))
    print(json.dumps(result, indent=1))
    write_json(args.out, result)
    if failed := result.get("failed"):  # written above with everything that was measured; the run still fails
        log.error("bench: %s failed (the JSON holds the systems that ran and each failure)", ", ".join(failed))
        return 1
    return 0


def write_json(path: Path | None, value: dict[str, Any]) -> None:
    """`value` to `path` (nothing where there is none), whole or not at all: written beside it, then renamed."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)
