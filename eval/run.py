"""`propdex eval`: every named system on the same corpus and queries, in one run.

A system is `bm25` or an encoder name with index options, e.g.
`tokens:factory=Flat`, `single:mask=1` (PropSegment: pool under the
proposition mask instead of reading the proposition text), `title=0` (leave
titles out); `A+B[+C]` fuses systems run on the same corpus (`tokens+bm25`;
`fusion=minmax` on the last part picks the method). Encoder indexes are
built with the real IndexWriter under --work and reused by later runs when
corpus and settings are unchanged (their build times come from the manifest).
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from propdex.encoders import ENCODERS, Document, flag, load_encoder, recorded_config
from propdex.encoders.spec import split_spec
from propdex.indexer import ann
from propdex.indexer.ann import CODE_BYTES
from propdex.indexer.build import IndexWriter
from propdex.indexer.settings import IndexSettings, store_of
from propdex.indexer.lexical import BM25, document_text
from propdex.indexer.manifest import library_versions, read_manifest
from propdex.retriever import Searcher

from . import metrics
from propdex.retriever import fusion

from .datasets import Task, load_beir, load_hotpotqa, load_propsegment

if TYPE_CHECKING:
    from propdex.encoders import Backbone, Encoder

log = logging.getLogger(__name__)

TASKS = ("hotpotqa", "propsegment", "beir", "segmentation", "rr", "reconstruction")
DEFAULT_LEVEL = {"hotpotqa": "doc", "beir": "doc", "propsegment": "unit"}
# PropSegment: sentence/document rankings de-duplicate a proposition ranking
# at least 5x deeper than the deepest cut-off (R@20).
PROPSEGMENT_DEPTH = 100
# Options that change how an index is searched, not the index: its build is reused.
# bm25=N: re-rank exactly BM25's top N per query instead of the ANN's candidates;
# exact=1: re-score every document for every query (no stage 1: stage 2's reference).
SEARCH_OPTIONS = ("nprobe", "bm25", "exact", "window")
# Options of a whole system (after fusion): fusion=rrf|minmax, hops=1|2.
PIPELINE_OPTIONS = ("fusion", "hops")
SPEC_GRAMMAR = "NAME[:option=value...][+NAME[:option=value...]...]"
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


def lexical_items(task: Task, level: str, titles: bool = True) -> list[tuple[Hashable, str]]:
    """What BM25 indexes: (key, text) per document, or per sentence at
    sentence level, each with its document's title in front."""
    def text(d: Document, body: str) -> str:
        return document_text(d.title if titles else "", body)

    if level == "sentence" and not task.prop_text:
        return [((d.id, i), text(d, d.text[a:b])) for d in task.corpus for i, (a, b) in enumerate(d.sentences)]
    return [(d.id, text(d, task.index_text(d))) for d in task.corpus]


def queries_for(task: Task, system: System) -> list[str | Document]:
    return [q.doc if (q.doc is not None and system.mask_aware()) else q.text for q in task.queries]


class _LexicalIndex:
    """BM25 over a task's lexical items; searches return the items' keys."""

    def __init__(self, task: Task, level: str, titles: bool) -> None:
        items = lexical_items(task, level, titles)
        self.keys = [k for k, _ in items]
        self.position = {k: str(i) for i, k in enumerate(self.keys)}
        self.index = BM25.build((str(i), text) for i, (_, text) in enumerate(items))
        self.passages = {d.id: task.index_text(d) for d in task.corpus}  # what a second hop adds to the question

    def hop(self, question: str, seed: str, depth: int, exclude: Iterable[Hashable] = ()) -> list[Hashable]:
        """The second hop's documents, as `Searcher.search(..., hops=2)` finds
        them: BM25 asked with the question and the best document's text."""
        return [k for k, _ in self.search(fusion.hop_query(question, self.passages[seed]), depth, {seed, *exclude})]

    def search(self, query: str, depth: int, exclude: Iterable[Hashable] = ()) -> list[tuple[Hashable, float]]:
        hits = self.index.search(query, depth, exclude={self.position[k] for k in exclude if k in self.position})
        return [(self.keys[int(i)], s) for i, s in hits]


def run_bm25(task: Task, system: System, level: str, depth: int) -> Outcome:
    started = time.time()
    index = _LexicalIndex(task, level, system.titles())
    build_s = time.time() - started
    rankings, scores, latencies = {}, {}, []
    for q in task.queries:
        t = time.perf_counter()
        hits = index.search(q.text, depth, task.exclude.get(q.id, ()))
        latencies.append((time.perf_counter() - t) * 1000)
        rankings[q.id] = [k for k, _ in hits]
        scores[q.id] = [s for _, s in hits]
    return Outcome(rankings, scores, latencies, {"index_s": round(build_s, 3)})


def second_hop(task: Task, first: Outcome, depth: int, every: int = fusion.HOP_EVERY,
               index: _LexicalIndex | None = None) -> Outcome:
    """`first` with a second hop, as `Searcher.search(..., hops=2)` does it:
    BM25 (titles on) asked with the question and the best document's text,
    its documents interleaved every fusion.HOP_EVERY-th place. Scores become
    1 / (RRF_K + rank), a rank like RRF's, so that a fusion can take them.
    `index`: the task's document-level BM25 with titles, when one is built."""
    index = index or _LexicalIndex(task, "doc", True)
    rankings, scores, latencies = {}, {}, []
    for i, q in enumerate(task.queries):
        t = time.perf_counter()
        ranking = first.rankings[q.id]
        if ranking:
            second = index.hop(q.text, ranking[0], depth, task.exclude.get(q.id, ()))
            ranking = fusion.interleave(ranking, second, every)[:depth]
        rankings[q.id] = ranking
        scores[q.id] = [1 / (fusion.RRF_K + r) for r in range(1, len(ranking) + 1)]
        latencies.append(first.latencies_ms[i] + (time.perf_counter() - t) * 1000)
    return Outcome(rankings, scores, latencies, {**first.stats, "hops": 2})


def fuse_outcomes(parts: Sequence[Outcome], method: str, depth: int) -> Outcome:
    """One ranking per query from several systems' rankings (retriever.fusion);
    a query's latency is the sum of its systems' plus the fusion's own."""
    rankings, scores, latencies = {}, {}, []
    for i, q in enumerate(parts[0].rankings):
        t = time.perf_counter()
        fused = fusion.fuse([list(zip(p.rankings[q], p.scores[q])) for p in parts], method)[:depth]
        own = (time.perf_counter() - t) * 1000
        rankings[q], scores[q] = [k for k, _ in fused], [s for _, s in fused]
        latencies.append(own + sum(p.latencies_ms[i] for p in parts))
    return Outcome(rankings, scores, latencies, {"fusion": method, "encode_s": sum(p.stats.get("encode_s", 0.0) for p in parts)})


def system_encoder(system: System, backbone: "Backbone") -> "Encoder":
    """The encoder a system spec names, with its encoder options (index and
    search options stay out)."""
    options: dict[str, Any] = {k: v for k, v in system.options.items() if k not in ("mask", "factory", "backend", "store", "code_bytes", "runtime", *SEARCH_OPTIONS)}
    if "keep_punct" in options:
        options["drop_punct"] = options.pop("keep_punct") not in ("1", "true", "yes")
    return load_encoder(system.name, backbone=backbone, **options)


def run_encoder(task: Task, system: System, level: str, depth: int, work: Path, backbone: "Backbone",
                hop: _LexicalIndex | None = None) -> Outcome:
    """A dense system's rankings; with `hop` (sentence level), each with the
    second hop `Searcher.search(..., hops=2)` makes, the task's BM25 standing
    in for the index's: its documents' best sentences take every
    fusion.HOP_EVERY-th place."""
    encoder = system_encoder(system, backbone)
    corpus = corpus_for(task, system)
    key = hashlib.sha256("\n".join(f"{d.id}\t{d.text}\t{d.focus}" for d in corpus).encode()).hexdigest()[:12]
    # Search-time options (nprobe) do not change the index: reuse it.
    index_label = ":".join([system.name, *(f"{k}={v}" for k, v in system.options.items() if k not in SEARCH_OPTIONS)])
    store, code_bytes, factory = system.options.get("store", IndexSettings.store), int(system.options.get("code_bytes", CODE_BYTES)), system.options.get("factory")
    out = cached_index_dir(work / f"{_slug(task.name.split('[')[0])}-{key}", _slug(index_label), encoder, store, code_bytes, factory)
    writer = IndexWriter(
        out, encoder, shard_docs=10_000, factory=factory,
        backend=system.options.get("backend", "faiss"), store=store,
        code_bytes=code_bytes, inputs={"task": task.name, "corpus_sha256": key},
        bm25=False,  # eval's bm25 system indexes exactly what each level needs (lexical_items)
    )
    cache_hits = backbone.state_cache_hits
    manifest = writer.build(corpus)
    # Corpus states an earlier system of this run computed: encode_s is pooling only.
    shared = backbone.state_cache_hits > cache_hits
    nprobe = int(system.options["nprobe"]) if "nprobe" in system.options else None
    window = int(system.options["window"]) if "window" in system.options else None
    searcher = Searcher.load(out, encoder=encoder, nprobe=nprobe)
    search_level = "doc" if task.prop_text else level
    queries = queries_for(task, system)
    pools = bm25_pools(task, int(system.options["bm25"]), system.titles()) if "bm25" in system.options else None
    if flag(system.options.get("exact", False)):
        every = [d.id for d in corpus]
        pools = {q.id: every for q in task.queries}
    rankings, scores, latencies = {}, {}, []
    for q, query in zip(task.queries, queries):
        t = time.perf_counter()
        hits = searcher.search(query, k=depth, level=search_level, exclude=[task.exclude.get(q.id, set())],
                               within=[pools[q.id]] if pools else None, window=window)
        ranking = [(h.doc_id, h.sentence_index) if search_level == "sentence" else h.doc_id for h in hits]
        if hop is not None and hits:
            skip = {hits[0].doc_id, *task.exclude.get(q.id, ())}
            offered = searcher.best_sentences(query, hop.hop(q.text, hits[0].doc_id, depth + 1, skip), skip=skip, window=window)
            ranking = fusion.interleave(ranking, [(h.doc_id, h.sentence_index) for h in offered])[:depth]
        latencies.append((time.perf_counter() - t) * 1000)
        rankings[q.id] = ranking
        scores[q.id] = [h.score for h in hits] if hop is None else [1 / (fusion.RRF_K + r) for r in range(1, len(ranking) + 1)]
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
        **({"hops": 2} if hop else {}),
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


def bm25_pools(task: Task, n: int, titles: bool = True) -> dict[str, list[str]]:
    """BM25's top `n` document ids per query: the pool an encoder re-ranks
    under `bm25=N` (Cross-Thought's unsupervised HotpotQA setting is N = 200)."""
    if n < 1:
        raise ValueError(f"bm25 pool size must be at least 1, got {n}")
    index = _LexicalIndex(task, "doc", titles)
    return {q.id: [k for k, _ in index.search(q.text, n, task.exclude.get(q.id, ()))] for q in task.queries}


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
    work: Path = Path("runs/index"), device: str = "auto", command: str = "",
) -> dict[str, Any]:
    task = load_task(task_name, path, limit)
    level = level or DEFAULT_LEVEL[task_name]
    depth = PROPSEGMENT_DEPTH if task.prop_text else 100
    backbones: dict[str, "Backbone"] = {}  # by runtime
    result: dict[str, Any] = {
        "task": task.name, "level": level, "command": command, "versions": run_versions(),
        "data": task.info, "systems": {},
    }
    outcomes: dict[str, Outcome] = {}  # one run per component, shared by every fusion that names it
    hop_index: _LexicalIndex | None = None  # the second hop's BM25, built once for every hops=2 system

    def run(spec: str, hop: _LexicalIndex | None = None) -> Outcome:
        key = spec + (":hops=2" if hop else "")
        if key not in outcomes:
            system = System.parse(spec)
            log.info("system %s on %s (%d docs, %d queries)", spec, task.name, len(task.corpus), len(task.queries))
            if system.name == "bm25":
                outcomes[key] = run_bm25(task, system, level, depth)
            else:
                from propdex.encoders.backbone import Backbone

                runtime = system.options.get("runtime", "torch")
                if runtime not in backbones:
                    backbones[runtime] = Backbone.load(device=device, runtime=runtime)
                    backbones[runtime].state_cache = {}  # systems on the same backbone states encode the corpus once
                outcomes[key] = run_encoder(task, system, level, depth, work, backbones[runtime], hop)
        return outcomes[key]

    for spec in systems:
        parts = spec.split("+")
        # Options of the whole pipeline sit on its last part: fusion=, hops=.
        pipeline = {k: v for k, v in System.parse(parts[-1]).options.items() if k in PIPELINE_OPTIONS}
        parts[-1] = re.sub(r":(%s)=[^:+]*" % "|".join(PIPELINE_OPTIONS), "", parts[-1])
        hops = int(pipeline.get("hops", 1))
        if hops not in (1, 2):
            raise ValueError(f"system spec {spec!r}: hops must be 1 or 2, got {hops}")
        if hops == 2 and (level not in ("doc", "sentence") or task.prop_text):
            raise ValueError(f"system spec {spec!r}: hops=2 ranks documents or sentences (not PropSegment)")
        if hops == 2 and level == "sentence" and (len(parts) > 1 or System.parse(parts[0]).name == "bm25"):
            raise ValueError(f"system spec {spec!r}: hops=2 at sentence level scores the hop's sentences densely: one dense system")
        if hops == 2:
            hop_index = hop_index or _LexicalIndex(task, "doc", True)
        if len(parts) > 1:
            outcome = fuse_outcomes([run(p) for p in parts], pipeline.get("fusion", "rrf"), depth)
        elif "fusion" in pipeline:
            raise ValueError(f"system spec {spec!r}: fusion= needs systems to fuse (grammar: {SPEC_GRAMMAR})")
        else:
            outcome = run(parts[0], hop_index if hops == 2 and level == "sentence" else None)
        if hops == 2 and level == "doc":
            outcome = second_hop(task, outcome, depth, index=hop_index)
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
    return "\n".join(lines)


def top1_markdown(top1: dict[str, dict[str, int]]) -> str:
    """PropSegment's `top1_breakdown` per system: where the top propositions
    come from, and P@1 once the query's own sentence is passed over."""
    head = ["system", "top-1: gold", "sibling", "query's document", "gold's sentence", "gold's document", "other",
            "P@1 past siblings", "siblings holding the query"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, counts in top1.items():
        past = counts.get("gold_past_siblings")  # absent from files written before session 46
        share = None if past is None else 100 * past / sum(counts[o] for o in TOP1_ORIGINS)
        holding = counts.get("sibling_contains_query")  # absent from files written before session 47
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
    p.add_argument("path", help="data file or folder")
    p.add_argument("--systems", default="bm25,single,tokens",
                   help="comma-separated, e.g. bm25,single,tokens:factory=Flat (segmentation: clause,pairs; "
                        "rr: encoders as for search; reconstruction: ratios, e.g. 0.05,0.1,0.25)")
    p.add_argument("--level", choices=("doc", "sentence", "unit"), help="default: doc (propsegment: unit = proposition)")
    p.add_argument("--limit", type=int, help="first N queries (rr: number of queries, default 1000)")
    p.add_argument("--out", type=Path, help="write the JSON results here")
    p.add_argument("--plot", type=Path, help="HotpotQA: write a Recall@k plot (PNG) here")
    p.add_argument("--work", type=Path, default=Path("runs/index"), help="where system indexes are built and reused")
    p.add_argument("--device", default="auto")
    p.set_defaults(run=_run)


def _run(args) -> int:
    command = "propdex " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.task == "segmentation":
        return _run_segmentation(args, command)
    if args.task in ("rr", "reconstruction"):
        return _run_nugget_task(args, command)
    result = evaluate(
        args.task, args.path, split_systems(args.systems), level=args.level, limit=args.limit,
        work=args.work, device=args.device, command=command,
    )
    table = markdown(result)
    print(f"{result['task']}, level {result['level']}, {result['data'].get('n_queries', '?')} queries")
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
    if args.plot:
        plot_recall(result, args.plot)
    return 0


def _run_segmentation(args, command: str) -> int:
    from . import segmentation

    systems = [s for s in args.systems.split(",") if s] if args.systems != "bm25,single,tokens" else ["clause", "pairs"]
    result = segmentation.evaluate_segmentation(args.path, systems, device=args.device)
    result = {"task": "propsegment segmentation (dev)", "command": command, "versions": run_versions(), **result}
    print(f"{result['task']}: {result['n_sentences']} sentences, {result['n_gold']} gold propositions")
    print(segmentation.markdown(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
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
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return 0
