"""Every named system on the same corpus and queries, in one run (`propdex eval`'s body).

Every system runs through the shipped search path, so that eval's figures
are what `propdex search` answers: an encoder's index is built with the real
IndexWriter under --work (BM25 included; eval.indexes) and searched by
`Searcher.search` with the spec's settings (eval.systems); `bm25` alone is
the index's BM25 builder and retriever (retriever.hybrid). Indexes are
reused by later runs when corpus and settings are unchanged (their build
times come from the manifest).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Hashable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import flag
from propdex.indexer import lexical
from propdex.indexer.settings import store_of
from propdex.retriever import Searcher
from propdex.retriever.context import CONTEXT_K
from propdex.retriever.hybrid import Lexical, lexical_hits, second_hop
from propdex.retriever.settings import SearchSettings

from .answers import ContextScores
from .datasets import Task, load_beir, load_hotpotqa, load_propsegment
from .indexes import all_in_bytes, ann_bytes, build_index
from .provenance import run_versions
from .scoring import Outcome, score, top1_breakdown
from .systems import Pipeline, corpus_for, queries_for

if TYPE_CHECKING:
    from propdex.encoders import Backbone

log = logging.getLogger(__name__)

TASKS = ("hotpotqa", "propsegment", "beir", "segmentation", "rr", "reconstruction", "run")
DEFAULT_LEVEL = {"hotpotqa": "doc", "beir": "doc", "propsegment": "unit"}
# PropSegment: sentence/document rankings de-duplicate a proposition ranking
# at least 5x deeper than the deepest cut-off (R@20).
PROPSEGMENT_DEPTH = 100


def load_task(task: str, path: str, limit: int | None, split: str = "test") -> Task:
    """The task's data; `split` picks BEIR's queries (the other tasks have one)."""
    if task == "hotpotqa":
        return load_hotpotqa(path, limit=limit)
    if task == "propsegment":
        return load_propsegment(path, limit=limit)
    if task == "beir":
        return load_beir(path, split, limit=limit)
    raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")


def search_level(task: Task, level: str) -> str:
    """The level a search answers at: PropSegment's items are documents of their own."""
    return "doc" if task.prop_text else level


def _ranking(task: Task, level: str, hits: Sequence[Any]) -> list[Hashable]:
    return [(h.doc_id, h.sentence_index) if search_level(task, level) == "sentence" else h.doc_id for h in hits]


def run_bm25(task: Task, pipeline: Pipeline, level: str, depth: int, contexts: "ContextScores | None" = None) -> Outcome:
    """BM25 alone, as `search --bm25 [--hops 2]` answers from an index's
    BM25: the index's builder over the task's documents (titles unless
    `title=0`), searched and turned into hits by the same functions
    (retriever.hybrid: Lexical, lexical_hits, second_hop)."""
    settings = pipeline.settings(depth, search_level(task, level))
    system = pipeline.system
    started = time.time()
    docs = corpus_for(task, system)
    by_id = {d.id: d for d in docs}
    retriever = Lexical(lexical.index_documents(docs, system.titles()), by_id.get, by_id.__contains__)
    build_s = time.time() - started
    rankings, scores, latencies = {}, {}, []
    for q in task.queries:
        t = time.perf_counter()
        skip = task.exclude.get(q.id, set())
        hits = lexical_hits(retriever, q.text, settings.k, skip, None)
        if settings.hops == 2 and hits:
            hits = second_hop(retriever, q.text, hits, settings.k, "doc", skip, None, best_sentences=None)
        latencies.append((time.perf_counter() - t) * 1000)
        rankings[q.id] = [h.doc_id for h in hits]
        scores[q.id] = [h.score for h in hits]
        if contexts is not None:  # the hits `search --bm25` returns, packed
            contexts.add(q.id, hits)
    return Outcome(rankings, scores, latencies, {"index_s": round(build_s, 3), **_pipeline_stats(settings),
                                                 **({"context": contexts.figures()} if contexts else {})})


def _pipeline_stats(settings: SearchSettings) -> dict[str, Any]:
    return {**({"fusion": settings.fusion} if settings.hybrid else {}), **({"hops": 2} if settings.hops == 2 else {})}


def run_encoder(task: Task, pipeline: Pipeline, level: str, depth: int, work: Path, backbone: "Backbone",
                contexts: "ContextScores | None" = None) -> Outcome:
    """A dense system's rankings, each query one `Searcher.search` on the
    system's index, with the settings the spec names (hybrid for `+bm25`,
    hops, fusion, nprobe, window...): what `propdex search` answers."""
    system = pipeline.system
    settings = pipeline.settings(depth, search_level(task, level))
    out, encoder, manifest, shared = build_index(task, system, work, backbone)
    queries = queries_for(task, system)
    if flag(system.options.get("exact", False)):
        return _exact_outcome(task, pipeline, level, depth, out, encoder, manifest, queries)
    searcher = Searcher.load(out, encoder=encoder)
    pools: dict[str, Sequence[str]] | None = None
    if "pool" in system.options:
        n = int(system.options["pool"])
        if n < 1:
            raise ValueError(f"pool must be at least 1, got {n}")
        pools = {q.id: [d for d, _ in searcher.lexical_search.ranking(q.text, n, task.exclude.get(q.id, ()))] for q in task.queries}
    options = {f.name: getattr(settings, f.name) for f in fields(SearchSettings) if f.name not in ("k", "level")}
    rankings, scores, latencies = {}, {}, []
    for q, query in zip(task.queries, queries):
        t = time.perf_counter()
        hits = searcher.search_batch([query], k=settings.k, level=settings.level, exclude=[task.exclude.get(q.id, set())],
                                     within=[pools[q.id]] if pools else None, **options)[0]
        latencies.append((time.perf_counter() - t) * 1000)
        rankings[q.id] = _ranking(task, level, hits)
        scores[q.id] = [h.score for h in hits]
        if contexts is not None:  # Searcher.contexts: these CONTEXT_K hits, packed
            contexts.add(q.id, hits)
    counts = manifest["counts"]
    index_bytes = ann_bytes(out, manifest)
    store_bytes = sum((out / s["name"] / "meta.lmdb" / "data.mdb").stat().st_size for s in manifest["shards"])
    all_in = all_in_bytes(out, manifest, encoder.dim)
    searcher.close()
    return Outcome(rankings, scores, latencies, {
        "vectors": counts["vectors"],
        "vectors_per_doc": counts["vectors"] / max(counts["documents"], 1),
        "bytes_per_vector": index_bytes / max(counts["vectors"], 1),
        "float32_bytes_per_vector": 4 * encoder.dim,
        "store_bytes_per_vector": store_bytes / max(counts["vectors"], 1),
        "all_in_bytes_per_vector": all_in / max(counts["vectors"], 1),
        "store": store_of(manifest),
        "encode_s": manifest["timings"]["encode_s"],
        "encode_shared": shared,
        "index_s": round(manifest["timings"]["train_s"] + manifest["timings"]["add_s"], 3),
        "factory": manifest["index"]["factory"],
        **({"hashing": manifest["index"]["hashing"]} if manifest["index"].get("hashing") else {}),
        "encoder": manifest["encoder"],
        "backbone_sha256": manifest["backbone"]["weights_sha256"],
        "index_dir": str(out),
        **_pipeline_stats(settings),
        **({"context": contexts.figures()} if contexts else {}),
    })


def _exact_outcome(task: Task, pipeline: Pipeline, level: str, depth: int, out: Path, encoder: Any,
                   manifest: dict[str, Any], queries: Sequence[str]) -> Outcome:
    """`exact=1`: the reference a system's codes are measured against, float32
    MaxSim of each query over every live document of a float16 index, all
    queries in one blocked scan (eval.exact). Its latency is that scan's
    time shared evenly by the queries."""
    settings = pipeline.settings(depth, search_level(task, level))
    if store_of(manifest) != "float16" or settings.level != "doc" or settings.hybrid or settings.hops == 2:
        raise ValueError(f"{pipeline.system.name}: exact=1 ranks documents by MaxSim over a float16 index's own vectors "
                         "(add store=float16; no +bm25, hops or level)")
    from .exact import exact_rankings

    started = time.perf_counter()
    vectors = [e.vectors.astype(np.float32) for e in encoder.encode_queries(list(queries))]
    ranked = exact_rankings(out, vectors, settings.k, exclude=[task.exclude.get(q.id, set()) for q in task.queries])
    per_query = (time.perf_counter() - started) * 1000 / max(len(queries), 1)
    counts = manifest["counts"]
    return Outcome({q.id: [d for d, _ in hits] for q, hits in zip(task.queries, ranked)},
                   {q.id: [sc for _, sc in hits] for q, hits in zip(task.queries, ranked)}, [per_query] * len(queries), {
        "vectors": counts["vectors"], "vectors_per_doc": counts["vectors"] / max(counts["documents"], 1),
        "float32_bytes_per_vector": 4 * encoder.dim, "store": "float16",
        "within": "every document, one blocked float32 scan of the stored vectors for all queries",
        "encoder": manifest["encoder"], "backbone_sha256": manifest["backbone"]["weights_sha256"], "index_dir": str(out),
    })


def evaluate(
    task_name: str, path: str, systems: Sequence[str], *, level: str | None = None, limit: int | None = None,
    work: Path = Path("runs/index"), device: str = "auto", command: str = "", words: Sequence[int] = (), split: str = "test",
) -> dict[str, Any]:
    """Every system on the task, in one run; `words`: also score the contexts
    `Index.context` packs at these budgets (HotpotQA, eval.answers)."""
    task = load_task(task_name, path, limit, split)
    level = level or DEFAULT_LEVEL[task_name]
    depth = PROPSEGMENT_DEPTH if task.prop_text else 100
    backbones: dict[str, "Backbone"] = {}  # by runtime
    result: dict[str, Any] = {
        "task": task.name, "level": level, "command": command, "versions": run_versions(),
        "data": task.info, "systems": {},
    }
    def run(spec: str) -> Outcome:
        pipeline = Pipeline.parse(spec)
        system = pipeline.system
        if task.prop_text and "hops" in pipeline.options:
            raise ValueError(f"system spec {spec!r}: hops=2 ranks documents or sentences of documents (not PropSegment's propositions)")
        log.info("system %s on %s (%d docs, %d queries)", spec, task.name, len(task.corpus), len(task.queries))
        contexts = ContextScores(task, words, level) if words else None
        if words and depth != CONTEXT_K:
            raise ValueError(f"contexts are packed from {CONTEXT_K} hits, the ranking here is {depth} deep")
        if system.name == "bm25":
            return run_bm25(task, pipeline, level, depth, contexts)
        from propdex.encoders.backbone import Backbone

        runtime = system.options.get("runtime", "torch")
        if runtime not in backbones:
            backbones[runtime] = Backbone.load(device=device, runtime=runtime)
            backbones[runtime].state_cache = {}  # systems on the same backbone states encode the corpus once
        return run_encoder(task, pipeline, level, depth, work, backbones[runtime], contexts)

    for spec in systems:
        outcome = run(spec)
        lat = np.array(outcome.latencies_ms)
        if task.prop_text and level == "unit":
            outcome.stats["top1"] = top1_breakdown(task, outcome)
        result["systems"][spec] = {
            "metrics": score(task, level, outcome),
            **outcome.stats,
            "latency_ms_p50": round(float(np.percentile(lat, 50)), 3),
            "latency_ms_p95": round(float(np.percentile(lat, 95)), 3),
        }
    return result
