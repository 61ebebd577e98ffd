"""Where nuggets lose HotpotQA documents that `tokens` finds (lab script, not shipped).

    python eval/notebook/nugget_misses.py runs/index/hotpotqa-70541f2a14fb/tokens-X runs/index/hotpotqa-70541f2a14fb/nugget-Y \
        ../shared/data/hotpotqa/hotpot_dev_distractor_600.json

Both indexes searched as the scoreboard's alone rows (document level, no BM25, one hop), top 10. Gold
documents (the supporting facts' titles) are counted found or missed by each, split by question type
(bridge, comparison), by the gold document's length in words, and by where the answer sits: for every
gold document `tokens` finds and nuggets miss, does it hold the answer string, and is that answer
shorter than a nugget's run (1/r word pieces), so that one nugget averages it with the words around it?
Also how far down the nugget ranking such a document fell.
"""
from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

from propdex.eval.metrics import holds_answer, normalize_answer
from propdex.retriever import Searcher

K = 10
LENGTHS = ((0, 60), (60, 120), (120, 10**9))
LENGTH_ROWS = [f"{a}-{b} words" if b < 10**9 else f"{a}+ words" for a, b in LENGTHS]


def length_row(words: int) -> str:
    return next(row for row, (a, b) in zip(LENGTH_ROWS, LENGTHS) if a <= words < b)


def ranks(searcher: Searcher, questions: list[dict], depth: int = 100) -> list[dict[str, int]]:
    return [{h.doc_id: r for r, h in enumerate(searcher.search(q["question"], k=depth, level="doc", hybrid=False, hops=1), 1)}
            for q in questions]


def main(tokens_index: str, nugget_index: str, hotpot: str) -> None:
    questions = json.loads(Path(hotpot).read_text())
    with Searcher.load(tokens_index, device="cpu") as s:
        tok = ranks(s, questions)
        docs = {}
        for q in questions:
            for t, _ in q["supporting_facts"]:
                docs.setdefault(t, s.document(t).text)
        pieces = lambda text: len(s.encoder.backbone.tokenizer(text, add_special_tokens=False)["input_ids"])  # noqa: E731
        answer_pieces = {q["_id"]: pieces(q["answer"]) for q in questions}
    with Searcher.load(nugget_index, device="cpu") as s:
        nug = ranks(s, questions)
        ratio = float(s.manifest["encoder"].get("ratio", 0.25))
    run = round(1 / ratio)
    table = collections.defaultdict(lambda: collections.Counter())
    lost = []
    for q, t, n in zip(questions, tok, nug):
        for g in dict.fromkeys(title for title, _ in q["supporting_facts"]):
            ft, fn = t.get(g, 999) <= K, n.get(g, 999) <= K
            for key in ("all", q["type"], length_row(len(docs[g].split()))):
                table[key]["gold"] += 1
                table[key]["tokens"] += ft
                table[key]["nugget"] += fn
                table[key]["tokens only"] += ft and not fn
                table[key]["nugget only"] += fn and not ft
            if ft and not fn:
                lost.append((q, g, n.get(g)))
    print(f"| gold documents | n | tokens Recall@{K} | nugget Recall@{K} | found by tokens only | by nugget only |")
    print("|---|---|---|---|---|---|")
    for key in ["all", "bridge", "comparison", *LENGTH_ROWS]:
        c = table[key]
        print(f"| {key} | {c['gold']} | {100 * c['tokens'] / c['gold']:.2f} | {100 * c['nugget'] / c['gold']:.2f} | "
              f"{c['tokens only']} | {c['nugget only']} |")
    span = [(q, g, r) for q, g, r in lost if normalize_answer(q["answer"]) not in ("yes", "no")]
    holds = [(q, g, r) for q, g, r in span if holds_answer(docs[g], q["answer"])]
    short = [x for x in holds if answer_pieces[x[0]["_id"]] <= run]
    depth = collections.Counter("11-20" if r and r <= 20 else "21-100" if r else ">100" for _, _, r in lost)
    print(f"\n{len(lost)} gold documents found by tokens and missed by nugget (top {K}); {len(span)} of span-answer "
          f"questions; {len(holds)} of them hold the answer string; {len(short)} of those with an answer of at most "
          f"{run} word pieces (one run at r = {ratio}). Nugget rank of the lost documents: {dict(depth)}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
