"""Which sentences a prompt-sized context should offer, beside the ones that scored (lab script, not shipped).

    python eval/notebook/context_packing.py runs/index/hotpotqa-70541f2a14fb/tokens \
        ../shared/data/hotpotqa/hotpot_dev_distractor_600.json OUT.json [--alone]

One search a question, as `Index.context` searches by default (sentence
level, fused with BM25, the second hop; `--alone`: neither), and the same
100 hits packed by the product's `retriever.context.pack` in different
orders. Packing rules that offer more than a hit's own sentence:

- product: each hit its sentence (today's rule);
- lead-after: a document's first sentence is offered right after the first
  hit of that document (an encyclopedia's lead sentence says what its
  subject is, where a bridge question's answer often is);
- lead-before: the same, offered before the hit's own sentence;
- per-doc=m: the hits regrouped so that each document, in the order it first
  appears, gives its m best sentences before the next document is opened;
- prior=w (with --alone): sentences ranked by their score plus w times their
  document's score.

answer@l counted by the eval's own `ContextScores` (HotpotQA's normalisation,
yes/no left out), for odd- and even-numbered questions apart: a rule is chosen on the odd ones
and confirmed on the even ones.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from propdex.eval.answers import YES_NO, ContextScores, normalize
from propdex.eval.datasets import load_hotpotqa
from propdex.retriever import Searcher
from propdex.retriever.context import CONTEXT_K
from propdex.retriever.hits import Hit

BUDGETS = (50, 100, 200, 500)
Rule = Callable[[Sequence[Hit], dict[str, float]], list[Hit]]  # hits, their documents' scores (--alone) -> packing order


def product(hits: Sequence[Hit], docs: dict[str, float]) -> list[Hit]:
    return list(hits)


def lead(before: bool) -> Rule:
    def order(hits: Sequence[Hit], docs: dict[str, float]) -> list[Hit]:
        out, seen = [], set()
        for h in hits:
            first = h.doc_id not in seen
            seen.add(h.doc_id)
            extra = [dataclasses.replace(h, sentence_index=0)] if first and h.sentence_index != 0 else []
            out += [*extra, h] if before else [h, *extra]
        return out
    return order


def per_doc(m: int) -> Rule:
    def order(hits: Sequence[Hit], docs: dict[str, float]) -> list[Hit]:
        by_doc: dict[str, list[Hit]] = {}
        for h in hits:
            by_doc.setdefault(h.doc_id, []).append(h)
        first = [h for group in by_doc.values() for h in group[:m]]
        rest = [h for group in by_doc.values() for h in group[m:]]
        return first + sorted(rest, key=lambda h: h.rank)
    return order


def prior(weight: float) -> Rule:
    """Sentences ranked by their score plus `weight` times their document's
    (its best window's, a document-level search of the same query)."""
    def order(hits: Sequence[Hit], docs: dict[str, float]) -> list[Hit]:
        floor = min(docs.values(), default=0.0)
        return sorted(hits, key=lambda h: -(h.score + weight * docs.get(h.doc_id, floor)))
    return order


RULES = {"product": product, "lead-after": lead(False), "lead-before": lead(True),
         "per-doc=2": per_doc(2), "per-doc=3": per_doc(3)}
PRIORS = {f"prior={w}": prior(w) for w in (0.25, 0.5, 1.0)}  # --alone only: dense scores on one scale


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("index", type=Path)
    p.add_argument("hotpot", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--alone", action="store_true", help="no BM25, no second hop")
    args = p.parse_args()
    task = load_hotpotqa(args.hotpot)
    options = {"hybrid": False, "hops": 1} if args.alone else {"hybrid": True, "hops": 2}
    rules = {**RULES, **(PRIORS if args.alone else {})}
    scores = {r: ContextScores(task, BUDGETS, "sentence") for r in rules}
    with Searcher.load(args.index, device="cpu") as s:
        for q in task.queries:
            if normalize(task.answers[q.id]) in YES_NO:
                continue  # left out of answer@l; no need to search
            hits = s.search(q.text, k=CONTEXT_K, level="sentence", **options)
            docs = {h.doc_id: h.score for h in s.search(q.text, k=CONTEXT_K, level="doc", **options)} if args.alone else {}
            for name, rule in rules.items():
                scores[name].add(q.id, rule(hits, docs))
    table = {f"{r} answer@{w} {half}": round(100 * c.figures()[f"answer@{w}_{half}"], 2)
             for r, c in scores.items() for w in BUDGETS for half in ("odd", "even")}
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "options": options, "answer": table}, indent=1))
    print("| rule | " + " | ".join(f"answer@{w} odd / even" for w in BUDGETS) + " |")
    print("|---|" + "---|" * len(BUDGETS))
    for r in rules:
        print(f"| {r} | " + " | ".join(f"{table[f'{r} answer@{w} odd']:.2f} / {table[f'{r} answer@{w} even']:.2f}"
                                       for w in BUDGETS) + " |")


if __name__ == "__main__":
    main()
