"""Where HotpotQA AllGold@10 is lost: per question type, and whether a missed
gold paragraph is one whose title the question names.

    python -m propdex.eval.hotpot_misses ../shared/data/hotpotqa/hotpot_dev_distractor_600.json

Runs bm25, tokens and their RRF fusion as `propdex eval` does (the tokens
index under runs/index is reused when there).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .run import System, fuse_outcomes, load_task, run_bm25, run_encoder


def main(path: str, work: Path = Path("runs/index")) -> None:
    from propdex.encoders.backbone import Backbone

    task = load_task("hotpotqa", path, None)
    raw = {q["_id"]: q for q in json.loads(Path(path).read_text())}
    bm25 = run_bm25(task, System.parse("bm25"), "doc", 100)
    tokens = run_encoder(task, System.parse("tokens"), "doc", 100, work, Backbone.load(device="cpu"))
    fused = fuse_outcomes([tokens, bm25], "rrf", 100)
    for name, outcome in (("bm25", bm25), ("tokens", tokens), ("tokens+bm25", fused)):
        by_type: dict[str, list[bool]] = {}
        for q in task.queries:
            by_type.setdefault(raw[q.id]["type"], []).append(task.gold_docs[q.id] <= set(outcome.rankings[q.id][:10]))
        print(name, "AllGold@10 by type:", {t: f"{100 * sum(v) / len(v):.2f} ({len(v)} questions)" for t, v in by_type.items()})
    named = unnamed = 0
    for q in task.queries:
        for title in task.gold_docs[q.id] - set(fused.rankings[q.id][:10]):
            if title.lower() in raw[q.id]["question"].lower():
                named += 1
            else:
                unnamed += 1
    print(f"tokens+bm25 gold paragraphs missing from the top 10: {named + unnamed}; "
          f"title named in the question: {named}, not named: {unnamed}")


if __name__ == "__main__":
    main(sys.argv[1])
