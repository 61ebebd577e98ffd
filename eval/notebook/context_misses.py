"""Where a grain's packed context loses the answer, question by question (lab script, not shipped).

    python eval/notebook/context_misses.py runs/index/hotpotqa-70541f2a14fb ../shared/data/hotpotqa/hotpot_dev_distractor_600.json \
        --systems proposition:unit tokens:sentence single:sentence --words 50,100

For every HotpotQA question with a span answer, each system's context (the
product's `Searcher.context`, no BM25, no second hop, as the scoreboard's
alone rows) is sorted into: answered; a gold document's sentence that holds
the answer was cited but cut (a unit's characters leave the answer out);
a gold document was cited but not the sentence with the answer; no gold
document in the context at all. Prints one table a budget.
"""
from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

from propdex.eval.metrics import holds_answer, normalize_answer
from propdex.retriever import Searcher
from propdex.retriever.hits import sentences_of


def classify(ctx, answer: str, gold_docs: set[str], searcher: Searcher) -> str:
    if holds_answer(ctx.text, answer):
        return "answered"
    cited_gold = [c for c in ctx.citations if c.doc_id in gold_docs]
    if not cited_gold:
        return "no gold document"
    for c in cited_gold:
        doc = searcher.document(c.doc_id)
        start, end = sentences_of(doc)[c.sentence]
        if holds_answer(doc.text[start:end], answer):
            return "answer's sentence cut"
    return "gold document, other sentences"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("indexes", type=Path)
    p.add_argument("hotpot", type=Path)
    p.add_argument("--systems", nargs="+", default=["proposition:unit", "tokens:sentence", "single:sentence"])
    p.add_argument("--words", default="50,100")
    args = p.parse_args()
    budgets = [int(w) for w in args.words.split(",")]
    questions = [q for q in json.loads(args.hotpot.read_text()) if normalize_answer(q["answer"]) not in ("yes", "no")]
    outcome: dict[tuple[str, int], dict[str, str]] = {}
    words_used = collections.defaultdict(list)
    for spec in args.systems:
        grain, level = spec.split(":")
        with Searcher.load(args.indexes / grain, device="cpu") as s:
            for q in questions:
                gold = {t for t, _ in q["supporting_facts"]}
                for words, ctx in zip(budgets, s.contexts(q["question"], budgets, level, hybrid=False, hops=1)):
                    outcome.setdefault((spec, words), {})[q["_id"]] = classify(ctx, q["answer"], gold, s)
                    words_used[(spec, words)].append((ctx.words, len({c.doc_id for c in ctx.citations}), len(ctx.citations)))
    kinds = ("answered", "answer's sentence cut", "gold document, other sentences", "no gold document")
    for words in budgets:
        print(f"\n{len(questions)} span-answer questions, {words} words\n")
        print("| system | " + " | ".join(kinds) + " | words used | documents | pieces |")
        print("|---|" + "---|" * (len(kinds) + 3))
        for spec in args.systems:
            tally = collections.Counter(outcome[(spec, words)].values())
            used = words_used[(spec, words)]
            mean = [sum(u[i] for u in used) / len(used) for i in range(3)]
            print(f"| {spec} | " + " | ".join(f"{100 * tally[k] / len(questions):.2f}" for k in kinds)
                  + f" | {mean[0]:.1f} | {mean[1]:.1f} | {mean[2]:.1f} |")
        a, b = args.systems[0], args.systems[1]
        lost = [qid for qid, o in outcome[(b, words)].items() if o == "answered" and outcome[(a, words)][qid] != "answered"]
        why = collections.Counter(outcome[(a, words)][qid] for qid in lost)
        print(f"\nAnswered by {b} but not {a}: {len(lost)}; {a}'s context there: "
              + ", ".join(f"{k} {why[k]}" for k in kinds[1:]))


if __name__ == "__main__":
    main()
