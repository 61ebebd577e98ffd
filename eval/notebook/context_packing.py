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

answer@l as the eval counts it (HotpotQA's normalisation, yes/no left out),
for odd- and even-numbered questions apart: a rule is chosen on the odd ones
and confirmed on the even ones.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from propdex.eval.metrics import holds_answer, normalize_answer
from propdex.retriever import Searcher
from propdex.retriever.context import CONTEXT_K, pack
from propdex.retriever.hits import Hit

BUDGETS = (50, 100, 200, 500)


def product(hits: Sequence[Hit]) -> list[Hit]:
    return list(hits)


def lead(before: bool) -> Callable[[Sequence[Hit]], list[Hit]]:
    def order(hits: Sequence[Hit]) -> list[Hit]:
        out, seen = [], set()
        for h in hits:
            first = h.doc_id not in seen
            seen.add(h.doc_id)
            extra = [dataclasses.replace(h, sentence_index=0)] if first and h.sentence_index != 0 else []
            out += [*extra, h] if before else [h, *extra]
        return out
    return order


def per_doc(m: int) -> Callable[[Sequence[Hit]], list[Hit]]:
    def order(hits: Sequence[Hit]) -> list[Hit]:
        by_doc: dict[str, list[Hit]] = {}
        for h in hits:
            by_doc.setdefault(h.doc_id, []).append(h)
        first = [h for group in by_doc.values() for h in group[:m]]
        rest = [h for group in by_doc.values() for h in group[m:]]
        return first + sorted(rest, key=lambda h: h.rank)
    return order


def prior(weight: float) -> Callable[[Sequence[Hit], dict[str, float]], list[Hit]]:
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
    questions = json.loads(args.hotpot.read_text())
    options = {"hybrid": False, "hops": 1} if args.alone else {"hybrid": True, "hops": 2}
    rules = {**RULES, **(PRIORS if args.alone else {})}
    answered = {(r, w, half): [] for r in rules for w in BUDGETS for half in ("odd", "even")}
    with Searcher.load(args.index, device="cpu") as s:
        for n, q in enumerate(questions, start=1):
            if normalize_answer(q["answer"]) in ("yes", "no"):
                continue
            hits = s.search(q["question"], k=CONTEXT_K, level="sentence", **options)
            docs = {h.doc_id: h.score for h in s.search(q["question"], k=CONTEXT_K, level="doc", **options)} if args.alone else {}
            half = "odd" if n % 2 else "even"
            for name, rule in rules.items():
                ordered = rule(hits, docs) if name in PRIORS else rule(hits)
                for w in BUDGETS:
                    answered[(name, w, half)].append(holds_answer(pack(ordered, w, "sentence").text, q["answer"]))
    table = {f"{r} answer@{w} {half}": round(100 * sum(v) / len(v), 2) for (r, w, half), v in answered.items()}
    args.out.write_text(json.dumps({"command": " ".join(sys.argv), "options": options, "answer": table}, indent=1))
    print("| rule | " + " | ".join(f"answer@{w} odd / even" for w in BUDGETS) + " |")
    print("|---|" + "---|" * len(BUDGETS))
    for r in rules:
        print(f"| {r} | " + " | ".join(f"{table[f'{r} answer@{w} odd']:.2f} / {table[f'{r} answer@{w} even']:.2f}"
                                       for w in BUDGETS) + " |")


if __name__ == "__main__":
    main()
