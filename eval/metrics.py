"""Retrieval metrics: pure functions over ranked id lists.

Every value is a fraction in [0, 1] (multiply by 100 for the paper tables).
Ids are any hashable: document ids, (doc id, sentence index) pairs, ...

- Per query: `recall_at_k`, `all_gold_at_k`, `precision_at_1`.
- Over queries: `mean_over_queries`, `hotpotqa_metrics`, `propsegment_metrics`.
  A query missing from the run counts as an empty ranking (scores 0); the mean
  is over the queries of `gold`, never over those of the run.
- `dedup_ranking` turns a proposition ranking into a sentence or document
  ranking by max aggregation (a unit is ranked where its best item is).
- `beir_metrics` delegates nDCG@10 / Recall@100 / MRR@10 to ir-measures
  (pytrec_eval underneath, as BEIR itself uses).
- `normalize_answer` / `holds_answer`: HotpotQA's answer normalisation, for
  whether a packed context holds the gold answer.
"""
from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

HOTPOTQA_KS = (2, 5, 10, 20, 50, 100)
PROPSEGMENT_KS = (5, 10, 20)


def _check_gold(gold: Iterable[Hashable]) -> set:
    gold = set(gold)
    if not gold:
        raise ValueError("a query needs at least one gold id")
    return gold


def recall_at_k(ranked: Sequence[Hashable], gold: Iterable[Hashable], k: int) -> float:
    """|gold ∩ top k| / |gold|. Duplicates in `ranked` count once."""
    gold = _check_gold(gold)
    return len(gold.intersection(ranked[:k])) / len(gold)


def all_gold_at_k(ranked: Sequence[Hashable], gold: Iterable[Hashable], k: int) -> float:
    """1.0 if every gold id is in the top k, else 0.0."""
    gold = _check_gold(gold)
    return float(gold.issubset(ranked[:k]))


def precision_at_1(ranked: Sequence[Hashable], gold: Iterable[Hashable]) -> float:
    """1.0 if the first ranked id is gold (0.0 for an empty ranking)."""
    gold = _check_gold(gold)
    return float(len(ranked) > 0 and ranked[0] in gold)


def dedup_ranking(ranked_ids: Iterable[Hashable], key: Callable[[Hashable], Hashable]) -> list:
    """Map each id through `key` and keep the first occurrence of every key.

    With a ranking sorted best first this is max aggregation: a sentence
    (key = sentence of a proposition) or a document is ranked at the position
    of its best-scoring member.
    """
    seen: set = set()
    out = []
    for i in ranked_ids:
        u = key(i)
        if u not in seen:
            seen.add(u)
            out.append(u)
    return out


def remove_ids(ranked: Iterable[Hashable], exclude: Iterable[Hashable] | None) -> list:
    """`ranked` without the ids in `exclude` (a query's own proposition, say)."""
    if not exclude:
        return list(ranked)
    exclude = set(exclude)
    return [i for i in ranked if i not in exclude]


def mean_over_queries(
    metric: Callable[..., float],
    runs: Mapping[str, Sequence[Hashable]],
    gold: Mapping[str, Iterable[Hashable]],
    **kwargs: Any,
) -> float:
    """Mean of `metric(ranked, gold[q], **kwargs)` over the queries of `gold`."""
    if not gold:
        raise ValueError("no queries")
    return sum(metric(runs.get(q, ()), g, **kwargs) for q, g in gold.items()) / len(gold)


def hotpotqa_metrics(
    runs: Mapping[str, Sequence[Hashable]],
    gold: Mapping[str, Iterable[Hashable]],
    ks: Iterable[int] = HOTPOTQA_KS,
) -> dict[str, float]:
    """{"Recall@k", "AllGold@k"} for each k, averaged over queries."""
    out: dict[str, float] = {}
    for k in ks:
        out[f"Recall@{k}"] = mean_over_queries(recall_at_k, runs, gold, k=k)
    for k in ks:
        out[f"AllGold@{k}"] = mean_over_queries(all_gold_at_k, runs, gold, k=k)
    return out


def propsegment_metrics(
    runs: Mapping[str, Sequence[Hashable]],
    gold: Mapping[str, Iterable[Hashable]],
    ks: Iterable[int] = PROPSEGMENT_KS,
) -> dict[str, float]:
    """{"P@1", "R@5", "R@10", "R@20"} averaged over queries.

    Remove each query's excluded ids (`remove_ids`) before calling this.
    """
    out = {"P@1": mean_over_queries(precision_at_1, runs, gold)}
    for k in ks:
        out[f"R@{k}"] = mean_over_queries(recall_at_k, runs, gold, k=k)
    return out


def rank_scores(doc_ids: Iterable[str]) -> dict[str, float]:
    """Distinct scores in rank order (a repeated id counts where it first
    appears), so ir-measures scores the order a system returns: a searcher's
    hits past its first page may score above the page's last, and tied
    scores would be broken by document id."""
    doc_ids = list(doc_ids)
    return {d: float(len(doc_ids) - i) for i, d in reversed(list(enumerate(doc_ids)))}


def beir_metrics(
    run: Mapping[str, Mapping[str, float]],
    qrels: Mapping[str, Mapping[str, int]],
) -> dict[str, float]:
    """BEIR's headline numbers, computed by ir-measures.

    Returns {"nDCG@10", "Recall@100", "MRR@10"}. nDCG uses the graded
    judgements as linear gains (trec_eval's definition, as in BEIR); Recall and
    MRR (ir-measures' RR) count a document as relevant when its grade is >= 1,
    so grade-0 judgements are non-relevant. Scores are per query; a query of
    `qrels` with no run scores 0, run queries without qrels are ignored, and
    the mean is over all queries of `qrels`. Ties in score are broken the
    trec_eval way (by document id), so give distinct scores if order matters.
    """
    import ir_measures
    from ir_measures import RR, R, nDCG

    names = {nDCG @ 10: "nDCG@10", R @ 100: "Recall@100", RR @ 10: "MRR@10"}
    if not qrels:
        raise ValueError("no queries")
    ir_qrels = {q: {d: int(g) for d, g in docs.items()} for q, docs in qrels.items()}
    ir_run = {
        q: {d: float(s) for d, s in docs.items()}
        for q, docs in run.items()
        if q in ir_qrels and docs
    }
    totals = dict.fromkeys(names.values(), 0.0)
    if ir_run:
        for m in ir_measures.iter_calc(list(names), ir_qrels, ir_run):
            totals[names[m.measure]] += m.value
    return {name: v / len(ir_qrels) for name, v in totals.items()}


def normalize_answer(text: str) -> str:
    """HotpotQA's official normalisation (hotpot_evaluate_v1.py): lower case,
    punctuation removed, the articles a, an, the removed, whitespace collapsed."""
    import re
    import string

    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def holds_answer(context: str, answer: str) -> bool:
    """Whether the normalised answer appears in the normalised context as
    whole words (an empty answer is never held)."""
    needle = normalize_answer(answer)
    return bool(needle) and f" {needle} " in f" {normalize_answer(context)} "
