"""`propdex eval`: every named system on the same corpus and queries, in one run.

A system is `bm25` or an encoder name with index options, e.g.
`tokens:factory=Flat`, `single:mask=1` (PropSegment: pool under the
proposition mask instead of reading the proposition text), `title=0` (leave
titles out), and search options (`nprobe=64`, `window=0`, `hops=2`).
`A+bm25` is A searched with `--hybrid` (`fusion=minmax` on the last part
picks the method). Every system runs through the shipped search path: an
encoder's index is built with the real IndexWriter under --work (BM25
included) and searched by `Searcher.search` with the spec's settings; `bm25`
alone is the index's BM25 builder and retriever (retriever.hybrid). Indexes
are reused by later runs when corpus and settings are unchanged (their build
times come from the manifest).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import ENCODERS, Document, flag, load_encoder, recorded_config
from propdex.encoders.spec import split_spec
from propdex.indexer import ann
from propdex.indexer.ann import CODE_BYTES
from propdex.indexer.build import IndexWriter
from propdex.indexer.settings import IndexSettings, store_of
from propdex.indexer import lexical
from propdex.indexer.manifest import library_versions, read_manifest
from propdex.retriever import Searcher
from propdex.retriever.context import CONTEXT_K
from propdex.retriever.hits import lexical_hit
from propdex.retriever.hybrid import Lexical, hop_order
from propdex.retriever.settings import SearchSettings

from . import metrics

from .answers import ContextScores
from .datasets import Task, load_beir, load_hotpotqa, load_propsegment

if TYPE_CHECKING:
    from propdex.encoders import Backbone, Encoder

log = logging.getLogger(__name__)

TASKS = ("hotpotqa", "propsegment", "beir", "segmentation", "rr", "reconstruction", "run")
DEFAULT_LEVEL = {"hotpotqa": "doc", "beir": "doc", "propsegment": "unit"}
# PropSegment: sentence/document rankings de-duplicate a proposition ranking
# at least 5x deeper than the deepest cut-off (R@20).
PROPSEGMENT_DEPTH = 100
# A system's search options are the search's own (SearchSettings: nprobe,
# window, hops, fusion, ...) less those the grammar spells itself (`+bm25` is
# hybrid) or eval sets (k, level); they change how an index is searched, not
# the index, whose build is reused. Two more are eval's: pool=N re-ranks
# exactly BM25's top N per query (`within`), exact=1 re-scores every document.
SEARCH_OPTIONS = tuple(f.name for f in fields(SearchSettings) if f.name not in ("k", "level", "hybrid", "bm25", "where"))
EVAL_OPTIONS = ("pool", "exact")
SPEC_GRAMMAR = "NAME[:option=value...][+bm25][:hops=2][:fusion=rrf|minmax]"
_SYSTEM_NAMES = {"bm25", *ENCODERS}


def split_systems(text: str) -> list[str]:
    """The systems of a comma-separated list. A FAISS factory holds commas of
    its own (`tokens:factory=IVF4096,PQ64,single`): a piece that has no
    option and names no system continues the factory before it."""
    out: list[str] = []
    for piece in (p for p in text.split(",") if p):
        head = piece.split("+")[0]
        if out and ":" not in head and head not in _SYSTEM_NAMES and out[-1].split("+")[-1].split(":")[-1].startswith("factory="):
            out[-1] += "," + piece
        else:
            out.append(piece)
    return out


@dataclass
class System:
    label: str
    name: str
    options: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, spec: str) -> "System":
        return cls(spec, *split_spec(spec, "system"))

    def titles(self) -> bool:
        """Does this system read documents' titles (default yes; `title=0` off)?"""
        return flag(self.options.get("title", True))

    def mask_aware(self) -> bool:
        """Does this system see a proposition as a mask inside its sentence?"""
        return flag(self.options.get("mask", self.name not in ("bm25", "single")))

    def search_options(self) -> dict[str, str]:
        return {k: v for k, v in self.options.items() if k in SEARCH_OPTIONS}


@dataclass(frozen=True)
class Pipeline:
    """What one eval system runs: a dense system or `bm25`, searched with
    `options`; `A+bm25` is the dense A searched with hybrid=True, the
    search's options (hops=, fusion=) written on its last part."""

    system: System
    hybrid: bool
    options: dict[str, str]

    @classmethod
    def parse(cls, spec: str) -> "Pipeline":
        parts = [System.parse(p) for p in spec.split("+")]
        options = {k: v for part in parts for k, v in part.search_options().items()}
        if len(parts) == 1:
            return cls(parts[0], False, options)
        dense, lexical_part = parts[0], parts[-1]
        if len(parts) != 2 or dense.name == "bm25" or lexical_part.name != "bm25" or set(lexical_part.options) - set(SEARCH_OPTIONS):
            raise ValueError(f"system spec {spec!r}: a fusion is what `search --hybrid` runs, one dense system and the "
                             f"index's own BM25 (grammar: {SPEC_GRAMMAR})")
        return cls(dense, True, options)

    def settings(self, k: int, level: str) -> SearchSettings:
        """The search this system runs, checked as the search checks it."""
        if "fusion" in self.options and not self.hybrid:
            raise ValueError(f"system spec {self.system.label!r}: fusion= needs systems to fuse (grammar: {SPEC_GRAMMAR})")
        return SearchSettings.of(k=k, level=level, hybrid=self.hybrid, bm25=self.system.name == "bm25", **self.options)


@dataclass
class Outcome:
    rankings: dict[str, list[Hashable]]  # query id -> ranked ids (best first)
    scores: dict[str, list[float]]
    latencies_ms: list[float]
    stats: dict[str, Any]


def load_task(task: str, path: str, limit: int | None, split: str = "test") -> Task:
    """The task's data; `split` picks BEIR's queries (the other tasks have one)."""
    if task == "hotpotqa":
        return load_hotpotqa(path, limit=limit)
    if task == "propsegment":
        return load_propsegment(path, limit=limit)
    if task == "beir":
        return load_beir(path, split, limit=limit)
    raise ValueError(f"unknown task {task!r}; choose from {', '.join(TASKS)}")


def corpus_for(task: Task, system: System) -> list[Document]:
    """What a system indexes: masked propositions, or their plain text."""
    if not task.prop_text or system.mask_aware():
        return task.corpus
    return [Document(d.id, task.index_text(d), d.title, ((0, len(task.index_text(d))),)) for d in task.corpus]


def queries_for(task: Task, system: System) -> list[str | Document]:
    return [q.doc if (q.doc is not None and system.mask_aware()) else q.text for q in task.queries]


def search_level(task: Task, level: str) -> str:
    """The level a search answers at: PropSegment's items are documents of their own."""
    return "doc" if task.prop_text else level


def _ranking(task: Task, level: str, hits: Sequence[Any]) -> list[Hashable]:
    return [(h.doc_id, h.sentence_index) if search_level(task, level) == "sentence" else h.doc_id for h in hits]


def run_bm25(task: Task, pipeline: Pipeline, level: str, depth: int, contexts: "ContextScores | None" = None) -> Outcome:
    """BM25 alone, as `search --bm25 [--hops 2]` answers from an index's
    BM25: the index's builder over the task's documents (titles unless
    `title=0`), searched by the same retriever (retriever.hybrid.Lexical)."""
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
        hits = retriever.ranking(q.text, settings.k, skip)
        if settings.hops == 2 and hits:
            second = retriever.hop(q.text, hits[0][0], settings.k + 1, skip)
            found = dict(hits) | dict(second)
            hits = [(d, found[d]) for d in hop_order([d for d, _ in hits], [d for d, _ in second], settings.k)]
        latencies.append((time.perf_counter() - t) * 1000)
        rankings[q.id] = [d for d, _ in hits]
        scores[q.id] = [s for _, s in hits]
        if contexts is not None:  # the hits `search --bm25` returns, packed
            terms = set(lexical.analyze(q.text))
            contexts.add(q.id, [lexical_hit(r, by_id[d], s, terms) for r, (d, s) in enumerate(hits, start=1)])
    return Outcome(rankings, scores, latencies, {"index_s": round(build_s, 3), **_pipeline_stats(settings),
                                                 **({"context": contexts.figures()} if contexts else {})})


def _pipeline_stats(settings: SearchSettings) -> dict[str, Any]:
    return {**({"fusion": settings.fusion} if settings.hybrid else {}), **({"hops": 2} if settings.hops == 2 else {})}


def system_encoder(system: System, backbone: "Backbone") -> "Encoder":
    """The encoder a system spec names, with its encoder options (index and
    search options stay out)."""
    index_options = ("mask", "factory", "backend", "store", "code_bytes", "runtime")
    options: dict[str, Any] = {k: v for k, v in system.options.items() if k not in (*index_options, *SEARCH_OPTIONS, *EVAL_OPTIONS)}
    if "keep_punct" in options:
        options["drop_punct"] = options.pop("keep_punct") not in ("1", "true", "yes")
    return load_encoder(system.name, backbone=backbone, **options)


def build_index(task: Task, system: System, work: Path, backbone: "Backbone") -> tuple[Path, "Encoder", dict[str, Any], bool]:
    """The system's index over the task's corpus, built with the real
    IndexWriter (BM25 included, as every index has it) under `work`, or
    reused from there when corpus and settings are unchanged. Also says
    whether the corpus's backbone states came from an earlier system of this
    run (its encode_s is then pooling only)."""
    encoder = system_encoder(system, backbone)
    corpus = corpus_for(task, system)
    key = hashlib.sha256("\n".join(f"{d.id}\t{d.text}\t{d.focus}" for d in corpus).encode()).hexdigest()[:12]
    # Search-time options (nprobe) do not change the index: reuse it.
    index_label = ":".join([system.name, *(f"{k}={v}" for k, v in system.options.items() if k not in (*SEARCH_OPTIONS, *EVAL_OPTIONS))])
    store, code_bytes, factory = system.options.get("store", IndexSettings.store), int(system.options.get("code_bytes", CODE_BYTES)), system.options.get("factory")
    out = cached_index_dir(work / f"{_slug(task.name.split('[')[0])}-{key}", _slug(index_label), encoder, store, code_bytes, factory)
    writer = IndexWriter(
        out, encoder, shard_docs=10_000, factory=factory,
        backend=system.options.get("backend", "faiss"), store=store,
        code_bytes=code_bytes, inputs={"task": task.name, "corpus_sha256": key},
    )
    cache_hits = backbone.state_cache_hits
    manifest = writer.build(corpus)
    return out, encoder, manifest, backbone.state_cache_hits > cache_hits


def run_encoder(task: Task, pipeline: Pipeline, level: str, depth: int, work: Path, backbone: "Backbone",
                contexts: "ContextScores | None" = None) -> Outcome:
    """A dense system's rankings, each query one `Searcher.search` on the
    system's index, with the settings the spec names (hybrid for `+bm25`,
    hops, fusion, nprobe, window...): what `propdex search` answers."""
    system = pipeline.system
    settings = pipeline.settings(depth, search_level(task, level))
    out, encoder, manifest, shared = build_index(task, system, work, backbone)
    searcher = Searcher.load(out, encoder=encoder)
    queries = queries_for(task, system)
    pools: dict[str, Sequence[str]] | None = None
    if "pool" in system.options:
        n = int(system.options["pool"])
        if n < 1:
            raise ValueError(f"pool must be at least 1, got {n}")
        pools = {q.id: [d for d, _ in searcher.lexical_search.ranking(q.text, n, task.exclude.get(q.id, ()))] for q in task.queries}
    if flag(system.options.get("exact", False)):
        every = [d.id for d in task.corpus]
        pools = {q.id: every for q in task.queries}
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
        "encoder": manifest["encoder"],
        "backbone_sha256": manifest["backbone"]["weights_sha256"],
        "index_dir": str(out),
        **_pipeline_stats(settings),
        **({"context": contexts.figures()} if contexts else {}),
    })


def ann_bytes(index: Path, manifest: dict[str, Any]) -> int:
    """The stage-1 index on disk: every shard's index file, and the trained
    codec where shards keep standalone codes (a FAISS index file holds its own)."""
    shards = manifest["shards"]
    total = sum((index / s["name"] / s["index"]).stat().st_size for s in shards if s["index"])
    if any(s["index"] and ann.holds_codes(s["index"]) for s in shards):
        total += manifest["index"]["trained_bytes"]
    return total


def all_in_bytes(index: Path, manifest: dict[str, Any], dim: int) -> int:
    """What stage 1 and stage 2 read, all in: ANN index files, the float16
    copy, document offsets (not the text). Indexes from before the float16 file kept that copy
    in LMDB, unlisted: 2 * dim bytes a vector."""
    shards = manifest["shards"]
    total = ann_bytes(index, manifest) + 8 * sum(s["docs"] + 1 for s in shards)
    return total + sum((s.get("stored_bytes") or 0) if "stored" in s else 2 * dim * s["vectors"] for s in shards)


def cached_index_dir(corpus_dir: Path, label: str, encoder: "Encoder", store: str = IndexSettings.store, code_bytes: int = CODE_BYTES,
                     factory: str | None = None) -> Path:
    """Where eval keeps a system's index over one corpus: named for the
    system's spec, or, when the index there was built by what the spec meant
    before (new weights under a name, a default factory or store that has moved on,
    codes from before standalone codes and their scaling), for the spec and what it means now,
    so the old index is neither reused nor in the way."""
    out = corpus_dir / label
    if not (out / "manifest.json").is_file():
        return out
    manifest = read_manifest(out)
    now: dict[str, Any] = {}
    built = (manifest.get("index") or {}).get("factory")
    if factory is None and built and manifest["index"]["backend"] == "faiss":
        chosen = ann.default_factory(manifest["counts"]["vectors"], encoder.dim, store, code_bytes)
        if chosen != built:
            now["factory"] = chosen
    if store == "codes" and "IVF" in (built or "") and (
            any(s["index"] and not ann.holds_codes(s["index"]) for s in manifest["shards"])
            or "vector_norm" not in manifest["index"]):  # codes decoded unscaled
        now["codes"] = ann.CODES_FILE
    if store_of(manifest) != store:  # built with the other store (the default before codes)
        now["store"] = store
    if recorded_config(manifest["encoder"]) != encoder.config() or now:
        key = encoder.config() if not now else {"encoder": encoder.config(), **now}
        out = corpus_dir / f"{label}-{hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:8]}"
    return out


def _slug(name: str) -> str:
    return re.sub(r"[^\w.-]+", "-", name.replace("=", "-")).strip("-")


def score(task: Task, level: str, outcome: Outcome) -> dict[str, float]:
    r = outcome.rankings
    if task.qrels is not None:
        run = {q: metrics.rank_scores(map(str, ids)) for q, ids in r.items()}
        return metrics.beir_metrics(run, task.qrels)
    if task.prop_text:  # PropSegment
        runs = {q: metrics.remove_ids(ids, task.exclude.get(q)) for q, ids in r.items()}
        if level == "unit":
            return metrics.propsegment_metrics({q: ids[:20] for q, ids in runs.items()}, task.gold_docs)
        key = task.sentence_of if level == "sentence" else task.document_of
        gold = {q: {key(g) for g in gs} for q, gs in task.gold_docs.items()}
        return metrics.propsegment_metrics({q: metrics.dedup_ranking(ids, key) for q, ids in runs.items()}, gold)
    gold = task.gold_sentences if level == "sentence" else task.gold_docs
    return metrics.hotpotqa_metrics(r, gold)


# Where a PropSegment query's top proposition comes from (`top1_breakdown`).
TOP1_ORIGINS = ("gold", "query_sentence", "query_document", "gold_sentence", "gold_document", "other")


def top1_breakdown(task: Task, outcome: Outcome) -> dict[str, int]:
    """PropSegment: where each query's top proposition comes from - a gold
    premise, a sibling in the query's own sentence, elsewhere in the query's
    document, a gold premise's sentence or document, or another document -
    and `gold_past_siblings`: the queries whose best proposition outside
    their own sentence is gold. Gold is never in the query's sentence, so
    that count less `gold` is what sibling top-1s cost the system's P@1.
    `sibling_contains_query` counts the sibling top-1s whose tokens include
    all of the query's: PropSegment's segmentations nest, and such a sibling
    states the query and more, an entailment its relations never label
    because they only pair propositions of different documents."""
    counts = dict.fromkeys((*TOP1_ORIGINS, "gold_past_siblings", "sibling_contains_query"), 0)
    docs = {d.id: d for d in task.corpus}
    for q in task.queries:
        ranking = metrics.remove_ids(outcome.rankings[q.id], task.exclude.get(q.id))
        if not ranking:
            continue
        top, gold = ranking[0], task.gold_docs[q.id]
        q_sentence, t_sentence = task.sentence_of(q.id), task.sentence_of(top)
        past = next((p for p in ranking if task.sentence_of(p) != q_sentence), None)
        counts["gold_past_siblings"] += past in gold
        gold_sentences = {task.sentence_of(g) for g in gold}
        if top in gold:
            counts["gold"] += 1
        elif t_sentence == q_sentence:
            counts["query_sentence"] += 1
            counts["sibling_contains_query"] += _covers(docs[top].focus, docs[q.id].focus)
        elif t_sentence[0] == q_sentence[0]:
            counts["query_document"] += 1
        elif t_sentence in gold_sentences:
            counts["gold_sentence"] += 1
        elif t_sentence[0] in {s[0] for s in gold_sentences}:
            counts["gold_document"] += 1
        else:
            counts["other"] += 1
    return counts


def _covers(outer: Sequence[tuple[int, int]], inner: Sequence[tuple[int, int]]) -> bool:
    """Whether character spans `outer` cover every character of `inner`."""
    chars = {c for a, b in outer for c in range(a, b)}
    return all(c in chars for a, b in inner for c in range(a, b))


def evaluate(
    task_name: str, path: str, systems: Sequence[str], *, level: str | None = None, limit: int | None = None,
    work: Path = Path("runs/index"), device: str = "auto", command: str = "", words: Sequence[int] = (),
) -> dict[str, Any]:
    """Every system on the task, in one run; `words`: also score the contexts
    `Index.context` packs at these budgets (HotpotQA, eval.answers)."""
    task = load_task(task_name, path, limit)
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


def markdown(result: dict[str, Any]) -> str:
    systems = result["systems"]
    names = list(next(iter(systems.values()))["metrics"])
    head = ["system", *names, "vec/doc", "B/vec (index)", "B/vec (all in)", "encode s", "p50 ms", "p95 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, s in systems.items():
        cells = [name, *(f"{100 * s['metrics'][m]:.2f}" for m in names)]
        cells += [_fmt(s.get("vectors_per_doc"), 1), _fmt(s.get("bytes_per_vector"), 1),
                  _fmt(s.get("all_in_bytes_per_vector"), 1), _fmt(s.get("encode_s"), 1) + (" (shared)" if s.get("encode_shared") else "")]
        cells += [_fmt(s["latency_ms_p50"], 1), _fmt(s["latency_ms_p95"], 1)]
        lines.append("| " + " | ".join(cells) + " |")
    if top1 := {name: s["top1"] for name, s in systems.items() if "top1" in s}:
        lines += ["", top1_markdown(top1)]
    if contexts := {name: s["context"] for name, s in systems.items() if "context" in s}:
        lines += ["", context_markdown(contexts)]
    return "\n".join(lines)


def context_markdown(contexts: dict[str, dict[str, Any]]) -> str:
    """Answer and supporting-fact recall of the packed contexts, per budget."""
    budgets = sorted(int(k.split("@")[1]) for k in next(iter(contexts.values())) if k.startswith("answer@") and k.split("@")[1].isdigit())
    head = ["system", *(f"answer@{w}" for w in budgets), *(f"support@{w}" for w in budgets)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, c in contexts.items():
        cells = [f"{100 * c[f'answer@{w}']:.2f}" for w in budgets] + [f"{100 * c[f'support@{w}']:.2f}" for w in budgets]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def top1_markdown(top1: dict[str, dict[str, int]]) -> str:
    """PropSegment's `top1_breakdown` per system: where the top propositions
    come from, and P@1 once the query's own sentence is passed over."""
    head = ["system", "top-1: gold", "sibling", "query's document", "gold's sentence", "gold's document", "other",
            "P@1 past siblings", "siblings holding the query"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, counts in top1.items():
        past = counts.get("gold_past_siblings")  # absent from older results files
        share = None if past is None else 100 * past / sum(counts[o] for o in TOP1_ORIGINS)
        holding = counts.get("sibling_contains_query")  # absent from older results files
        cells = [name, *(str(counts[o]) for o in TOP1_ORIGINS), _fmt(share, 2), "–" if holding is None else str(holding)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def plot_recall(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in result["systems"].items():
        ks = sorted(int(m.split("@")[1]) for m in s["metrics"] if m.startswith("Recall@"))
        ax.plot(ks, [100 * s["metrics"][f"Recall@{k}"] for k in ks], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("k")
    ax.set_ylabel("Recall@k (%)")
    ax.set_title(f"{result['task']} ({result['level']} level)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_versions() -> dict[str, Any]:
    """What a results file records of the software that produced it."""
    return {**library_versions(), "git": _git_head()}


def _git_head() -> str | None:
    try:
        root = Path(__file__).resolve().parents[1]
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip() or None
    except OSError:
        return None


def add_commands(sub) -> None:
    p = sub.add_parser("eval", help="measure systems side by side", description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=TASKS)
    p.add_argument("path", help="data file or folder (run: the TREC run file to score)")
    p.add_argument("--qrels", type=Path, help="run: the judgements (TREC qrels, BEIR qrels TSV, or HotpotQA's JSON file)")
    p.add_argument("--systems", default="bm25,single,tokens",
                   help="comma-separated, e.g. bm25,single,tokens:factory=Flat (segmentation: clause,pairs; "
                        "rr: encoders as for search; reconstruction: ratios, e.g. 0.05,0.1,0.25)")
    p.add_argument("--level", choices=("doc", "sentence", "unit"), help="default: doc (propsegment: unit = proposition)")
    p.add_argument("--limit", type=int, help="first N queries (rr: number of queries, default 1000)")
    p.add_argument("--words", type=_budgets, default=(), metavar="L1,L2,...",
                   help="hotpotqa: also score the contexts Index.context packs into these word budgets "
                        "(answer and supporting-fact recall), e.g. 50,100,200,500")
    p.add_argument("--out", type=Path, help="write the JSON results here")
    p.add_argument("--plot", type=Path, help="HotpotQA: write a Recall@k plot (PNG) here")
    p.add_argument("--work", type=Path, default=Path("runs/index"), help="where system indexes are built and reused")
    p.add_argument("--device", default="auto")
    p.set_defaults(run=_run)


def _run(args) -> int:
    command = "propdex " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.task == "run":
        return _run_score(args, command)
    if args.qrels is not None:
        raise ValueError("--qrels scores a run: propdex eval run RUN --qrels FILE")
    if args.task == "segmentation":
        return _run_segmentation(args, command)
    if args.task in ("rr", "reconstruction"):
        return _run_nugget_task(args, command)
    result = evaluate(
        args.task, args.path, split_systems(args.systems), level=args.level, limit=args.limit,
        work=args.work, device=args.device, command=command, words=args.words,
    )
    table = markdown(result)
    print(f"{result['task']}, level {result['level']}, {result['data'].get('n_queries', '?')} queries")
    print(table)
    _write(args.out, result)
    if args.plot:
        plot_recall(result, args.plot)
    return 0


def _budgets(text: str) -> tuple[int, ...]:
    try:
        budgets = tuple(int(w) for w in text.split(",") if w)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--words takes word budgets like 50,100,200,500, got {text!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"--words takes positive word budgets, got {text!r}")
    return budgets


def _run_score(args, command: str) -> int:
    from . import score_run

    if args.qrels is None:
        raise ValueError("propdex eval run RUN needs --qrels FILE")
    result = {"task": "run", "command": command, "versions": run_versions(), **score_run.evaluate_run(args.path, args.qrels)}
    q = result["queries"]
    print(f"{args.path}: {q['run']} queries in the run, {q['judged_in_run']} of {q['judged']} judged queries")
    print(score_run.markdown(result))
    _write(args.out, result)
    return 0


def _write(out: Path | None, result: dict[str, Any]) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, default=str))


def _run_segmentation(args, command: str) -> int:
    from . import segmentation

    systems = [s for s in args.systems.split(",") if s] if args.systems != "bm25,single,tokens" else ["clause", "pairs"]
    result = segmentation.evaluate_segmentation(args.path, systems, device=args.device)
    result = {"task": "propsegment segmentation (dev)", "command": command, "versions": run_versions(), **result}
    print(f"{result['task']}: {result['n_sentences']} sentences, {result['n_gold']} gold propositions")
    print(segmentation.markdown(result))
    _write(args.out, result)
    return 0


def _run_nugget_task(args, command: str) -> int:
    """`rr` (passage re-ranking) and `reconstruction` (nugget AE BLEU), both on held-out Wikipedia."""
    from . import reconstruction, rr

    systems = [s for s in args.systems.split(",") if s]
    if args.task == "rr":
        task = rr.build_rr(args.path, n_queries=args.limit or 1000)
        result = rr.evaluate_rr(task, systems, device=args.device)
        title, table = f"passage re-ranking (RR), {task.info['queries']} queries", rr.markdown(result)
    else:
        result = reconstruction.evaluate_reconstruction(args.path, [float(r) for r in systems], device=args.device)
        title, table = f"nugget reconstruction, {result['passages']} held-out passages", reconstruction.markdown(result)
    result = {"task": title, "command": command, "versions": run_versions(), **result}
    print(title)
    print(table)
    _write(args.out, result)
    return 0
