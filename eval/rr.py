"""The Nugget paper's passage re-ranking task (RR) on held-out Wikipedia.

Query: an article's first section. Candidates: one other section of the same
article (gold, drawn at random) and the 19 best BM25 hits for the query among
other articles' non-first sections. Systems rank the 20; MRR over queries.
Articles come from the held-out files only (wiki_70 .. wiki_99), which no
training command reads. Texts are cut to their first `max_words` words so a
CPU can encode every candidate (the paper's are ~300 tokens; ours ~128).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from propdex.encoders import Document
from propdex.encoders.text import split_sentences
from propdex.encoders.training.data import wiki_articles

from .bm25 import BM25Index
from .systems import System, system_encoder


@dataclass(frozen=True)
class RRQuery:
    id: str
    text: str
    candidates: tuple[str, ...]  # gold first
    gold: str


@dataclass
class RRTask:
    queries: list[RRQuery]
    texts: dict[str, str]  # candidate id -> text
    info: dict[str, Any]


def _cut(text: str, max_words: int) -> str:
    return " ".join(text.split()[:max_words])


def build_rr(folder: str | Path, n_queries: int = 1000, negatives: int = 19, max_words: int = 96,
             min_words: int = 30, seed: int = 0) -> RRTask:
    rng = random.Random(seed)
    articles = [a for a in wiki_articles(folder, "heldout")]
    pool: dict[str, str] = {}
    sections_of: dict[int, set[str]] = {}  # article index -> its ids in the pool
    eligible = []
    for i, article in enumerate(articles):
        if not article.sections or article.sections[0][0] != "" or len(article.sections[0][1].split()) < min_words:
            own = []
        else:
            own = [j for j, (_, text) in enumerate(article.sections) if j > 0 and len(text.split()) >= min_words]
        for j, (heading, text) in enumerate(article.sections):
            if heading and len(text.split()) >= min_words:
                pool[f"{article.id}#{j}"] = _cut(text, max_words)
                sections_of.setdefault(i, set()).add(f"{article.id}#{j}")
        if own:
            eligible.append((i, own))
    if len(eligible) < n_queries:
        raise ValueError(f"only {len(eligible)} held-out articles have a lead and another section; asked for {n_queries}")
    chosen = rng.sample(eligible, n_queries)
    ids = list(pool)
    bm25 = BM25Index((k, pool[k]) for k in ids)
    queries = []
    for i, own in chosen:
        article = articles[i]
        text = _cut(article.sections[0][1], max_words)
        gold = f"{article.id}#{rng.choice(own)}"
        hits = [h for h, _ in bm25.search(text, negatives, exclude=sections_of.get(i, set()))]
        queries.append(RRQuery(article.id, text, (gold, *hits), gold))
    used = {c for q in queries for c in q.candidates}
    info = {"articles": len(articles), "pool_sections": len(pool), "queries": len(queries), "distinct_candidates": len(used),
            "negatives": negatives, "max_words": max_words, "min_words": min_words, "seed": seed,
            "mean_query_words": round(float(np.mean([len(q.text.split()) for q in queries])), 1),
            "mean_candidate_words": round(float(np.mean([len(pool[c].split()) for c in used])), 1)}
    return RRTask(queries, {c: pool[c] for c in used}, info)


def mean_maxsim(query: np.ndarray, doc: np.ndarray) -> float:
    """m(q, d) = (1/|q|) sum_i max_j <q_i, d_j> (the paper's eq. 10)."""
    if len(query) == 0 or len(doc) == 0:
        return float("-inf")
    return float((query @ doc.T).max(axis=1).mean())


def reciprocal_rank(scores: list[float]) -> float:
    """1 / rank of candidate 0 (the gold); ties count against it."""
    return 1.0 / (1 + sum(s >= scores[0] for s in scores[1:]))


def _document(id_: str, text: str) -> Document:
    return Document(id_, text, "", tuple(split_sentences(text)) or ((0, len(text)),))


def evaluate_rr(task: RRTask, systems: list[str], device: str = "auto") -> dict[str, Any]:
    from propdex.encoders.backbone import Backbone

    backbone = None
    cache: dict[str, dict[str, np.ndarray]] = {}
    out: dict[str, Any] = {"data": task.info, "systems": {}}
    for spec in systems:
        system = System.parse(spec)
        started = time.time()
        if system.name == "bm25":
            rrs = []
            for q in task.queries:
                index = BM25Index((c, task.texts[c]) for c in q.candidates)
                got = dict(index.search(q.text, len(q.candidates)))
                rrs.append(reciprocal_rank([got.get(c, 0.0) for c in q.candidates]))
            out["systems"][spec] = {"mrr": round(100 * float(np.mean(rrs)), 2), "seconds": round(time.time() - started, 1)}
            continue
        backbone = backbone or Backbone.load(device=device)
        encoder = system_encoder(system, backbone)
        # Candidate vectors do not depend on how queries are encoded: reuse them.
        doc_key = repr({k: v for k, v in encoder.config().items() if k != "query"})
        if doc_key not in cache:
            ids = list(task.texts)
            docs = [_document(c, task.texts[c]) for c in ids]
            passages = [(i, p) for i, d in enumerate(docs) for p in encoder.passages(d)]
            encoded = encoder.encode([p for _, p in passages], progress=True)
            vectors: dict[str, list[np.ndarray]] = {c: [] for c in ids}
            for (i, _), e in zip(passages, encoded):
                vectors[ids[i]].append(e.vectors)
            cache[doc_key] = {c: np.concatenate(v) if v else np.zeros((0, encoder.dim), np.float32) for c, v in vectors.items()}
        docs_vectors = cache[doc_key]
        encode_s = time.time() - started
        query_vectors = encoder.encode_queries([q.text for q in task.queries])
        rrs = [reciprocal_rank([mean_maxsim(qv.vectors, docs_vectors[c]) for c in q.candidates])
               for q, qv in zip(task.queries, query_vectors)]
        out["systems"][spec] = {
            "mrr": round(100 * float(np.mean(rrs)), 2),
            "vectors_per_candidate": round(float(np.mean([len(v) for v in docs_vectors.values()])), 2),
            "vectors_per_query": round(float(np.mean([len(qv.vectors) for qv in query_vectors])), 2),
            "seconds": round(time.time() - started, 1), "candidate_encode_s": round(encode_s, 1),
            "encoder": encoder.config(),
        }
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = ["| system | MRR | vectors / candidate | vectors / query |", "|---|---|---|---|"]
    for name, s in result["systems"].items():
        lines.append(f"| {name} | {s['mrr']:.2f} | {s.get('vectors_per_candidate', '')} | {s.get('vectors_per_query', '')} |")
    return "\n".join(lines)
