"""`propdex eval run RUN --qrels FILE`: score any TREC run, propdex's or another tool's.

Judgements come as TREC qrels (`qid 0 docno grade`), a BEIR qrels TSV (with
its `query-id corpus-id score` header), or a HotpotQA JSON file, whose
supporting facts are the gold documents (or, for a run of `ID#SENTENCE`
docnos, the gold sentences). Graded judgements are scored by ir-measures
(nDCG@10, Recall@100, MRR@10, as `eval beir` reports them); HotpotQA's by
Recall@k and AllGold@k, as `eval hotpotqa` reports them. Both orders a run
as `retriever.trec.read_run` does, so `propdex search --topics ... --run`
scored here gives the figures `propdex eval` gives for the same system.
"""
from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from propdex.retriever import trec

from . import metrics


@dataclass(frozen=True)
class Qrels:
    """Judgements: graded (`graded[qid][doc_id]`) or HotpotQA's gold sets."""

    graded: dict[str, dict[str, int]] | None = None
    gold_docs: dict[str, set[str]] | None = None
    gold_sentences: dict[str, set[tuple[str, int]]] | None = None


def read_qrels(path: str | Path) -> Qrels:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no qrels file {path}")
    if path.suffix == ".json":
        questions = json.loads(path.read_text(encoding="utf-8"))
        try:
            facts = {str(q["_id"]): [(t, int(i)) for t, i in q["supporting_facts"]] for q in questions}
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: a JSON qrels file is HotpotQA's: records with '_id' and 'supporting_facts'") from None
        return Qrels(gold_docs={q: {t for t, _ in f} for q, f in facts.items()}, gold_sentences={q: set(f) for q, f in facts.items()})
    graded: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            parts = line.split()
            if not parts or (n == 1 and parts[0] == "query-id"):  # BEIR's header
                continue
            if len(parts) == 3:
                qid, doc, grade = parts
            elif len(parts) == 4:
                qid, _, doc, grade = parts
            else:
                raise ValueError(f"{path}:{n}: a qrels line is 'qid 0 docno grade' (TREC) or 'qid<TAB>docno<TAB>grade' (BEIR)")
            try:
                graded.setdefault(qid, {})[str(trec.parse_docno(doc))] = int(grade)
            except ValueError:
                raise ValueError(f"{path}:{n}: the grade must be an integer, got {grade!r}") from None
    if not graded:
        raise ValueError(f"{path}: no judgements")
    return Qrels(graded=graded)


def score_run(run: Mapping[str, Sequence[Hashable]], qrels: Qrels) -> dict[str, float]:
    """The run's figures under these judgements (means over the judged queries)."""
    if qrels.graded is not None:
        if any(isinstance(i, tuple) for ids in run.values() for i in ids):
            raise ValueError("graded qrels judge documents: score a document-level run")
        return metrics.beir_metrics({q: metrics.rank_scores(ids) for q, ids in run.items()}, qrels.graded)
    sentence = any(isinstance(i, tuple) for ids in run.values() for i in ids)
    gold = qrels.gold_sentences if sentence else qrels.gold_docs
    assert gold is not None
    return metrics.hotpotqa_metrics(run, gold)


def evaluate_run(path: str | Path, qrels_path: str | Path) -> dict[str, Any]:
    run = trec.read_run(path)
    qrels = read_qrels(qrels_path)
    judged = qrels.graded or qrels.gold_docs or {}
    return {
        "run": str(path), "qrels": str(qrels_path),
        "queries": {"run": len(run), "judged": len(judged), "judged_in_run": len(set(run) & set(judged))},
        "metrics": score_run(run, qrels),
    }


def markdown(result: dict[str, Any]) -> str:
    names = list(result["metrics"])
    return "\n".join(["| run | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1),
                      f"| {Path(result['run']).name} | " + " | ".join(f"{100 * result['metrics'][m]:.2f}" for m in names) + " |"])
