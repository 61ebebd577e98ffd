"""Hits re-ranked by BM25 over each hit's own sentence before packing (lab script, not shipped).

    python eval/notebook/context_sentence_bm25.py runs/index/hotpotqa-70541f2a14fb/tokens \
        ../shared/data/hotpotqa/hotpot_dev_distractor_600.json OUT.json [--alone]

The shipped fusion gives a sentence its document's share of BM25's run, so
every sentence of a document gets the same lexical lift. Here each of the
100 hits `Index.context` packs by default (sentence level, fused with BM25,
the second hop; `--alone`: neither) is scored by BM25 over its own title and
sentence (the index's idf, k1 = 1.2, b over the hits' mean length) and the
hits' order is fused with that ranking by reciprocal rank, BM25 weighted w.
answer@l by the eval's `ContextScores`, odd and even questions apart.
"""
from __future__ import annotations

import json
import sys
from collections import Counter

import numpy as np

from propdex.eval.answers import YES_NO, ContextScores, normalize
from propdex.eval.datasets import load_hotpotqa
from propdex.indexer import lexical
from propdex.retriever import Searcher
from propdex.retriever.context import CONTEXT_K

BUDGETS = (50, 100, 200, 500)


def sentence_bm25(bm25: lexical.BM25, query: str, texts: list[str], b: float, k1: float = 1.2) -> list[float]:
    """BM25 of each text as a document of its own, idf from the index's documents."""
    bags = [Counter(lexical.analyze(t)) for t in texts]
    lengths = [sum(bag.values()) for bag in bags]
    avg = max(float(np.mean(lengths)), 1.0) if lengths else 1.0
    terms = lexical.analyze(query)
    idf = {t: bm25.idf(df) if (df := sum(len(p[0]) for seg in bm25.segments if (p := seg.postings(t)) is not None)) else 0.0
           for t in set(terms)}
    return [sum(idf[t] * bag[t] / (bag[t] + k1 * (1 - b + b * n / avg)) for t in terms if bag[t])
            for bag, n in zip(bags, lengths)]


def fused(hits, scores: list[float], weight: float):
    lexical_rank = {i: r for r, i in enumerate(sorted(range(len(hits)), key=lambda i: -scores[i]), start=1)}
    value = [1 / (61 + i) + (weight / (60 + lexical_rank[i]) if scores[i] > 0 else 0.0) for i in range(len(hits))]
    return [hits[i] for i in sorted(range(len(hits)), key=lambda i: (-value[i], i))]


def main() -> None:
    index, hotpot, out = sys.argv[1:4]
    options = {"hybrid": False, "hops": 1} if "--alone" in sys.argv else {"hybrid": True, "hops": 2}
    task = load_hotpotqa(hotpot)
    rules = {"product": None, **{f"w={w}": (w, True, 0.75) for w in (0.5, 1.0, 2.0)},
             "w=1, no title": (1.0, False, 0.75), "w=1, b=0.3": (1.0, True, 0.3)}
    scores = {r: ContextScores(task, BUDGETS, "sentence") for r in rules}
    with Searcher.load(index, device="cpu") as s:
        for q in task.queries:
            if normalize(task.answers[q.id]) in YES_NO:
                continue
            hits = s.search(q.text, k=CONTEXT_K, level="sentence", **options)
            for name, rule in rules.items():
                if rule is None:
                    scores[name].add(q.id, hits)
                    continue
                weight, title, b = rule
                texts = [(h.title + "\n" if title else "") + h.sentence_text for h in hits]
                scores[name].add(q.id, fused(hits, sentence_bm25(s.bm25, q.text, texts, b), weight))
    table = {f"{r} answer@{w} {half}": round(100 * c.figures()[f"answer@{w}_{half}"], 2)
             for r, c in scores.items() for w in BUDGETS for half in ("odd", "even")}
    with open(out, "w") as f:
        json.dump({"command": " ".join(sys.argv), "options": options, "answer": table}, f, indent=1)
    for r in rules:
        print(f"| {r} | " + " | ".join(f"{table[f'{r} answer@{w} odd']:.2f} / {table[f'{r} answer@{w} even']:.2f}"
                                       for w in BUDGETS) + " |")


if __name__ == "__main__":
    main()
