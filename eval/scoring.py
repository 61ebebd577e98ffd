"""A system's rankings scored against the task's gold: the figures `propdex eval` reports.

Rankings are scored in the order the search returned them, never re-sorted
by score, so that eval measures what a user gets. PropSegment's sentence and
document levels de-duplicate a proposition ranking; its unit level also
says where each top proposition comes from (top1_breakdown).
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from . import metrics
from .datasets import Task


@dataclass
class Outcome:
    """What running one system gives: each query's ranking, scores and latency, and the system's figures."""

    rankings: dict[str, list[Hashable]]  # query id -> ranked ids (best first)
    scores: dict[str, list[float]]
    latencies_ms: list[float]
    stats: dict[str, Any]


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
