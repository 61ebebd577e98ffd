"""How often the second hop should take a place: HotpotQA AllGold@10 of
`tokens+bm25:hops=2` for every place interval, on the questions at odd and
at even positions of the file (0-based) apart: choose on one half, check on
the other.

    python -m propdex.eval.hop_sweep ../shared/data/hotpotqa/hotpot_dev_distractor_600.json

The tokens index under runs/index is reused when there.
"""
from __future__ import annotations

import sys
from pathlib import Path

from .run import System, fuse_outcomes, load_task, run_bm25, run_encoder, second_hop


def main(path: str, work: Path = Path("runs/index")) -> None:
    from propdex.encoders.backbone import Backbone

    task = load_task("hotpotqa", path, None)
    bm25 = run_bm25(task, System.parse("bm25"), "doc", 100)
    tokens = run_encoder(task, System.parse("tokens"), "doc", 100, work, Backbone.load(device="cpu"))
    first = fuse_outcomes([tokens, bm25], "rrf", 100)

    def all_gold(outcome, half: int) -> float:
        hit = [task.gold_docs[q.id] <= set(outcome.rankings[q.id][:10]) for i, q in enumerate(task.queries) if i % 2 == half]
        return 100 * sum(hit) / len(hit)

    print("every  AllGold@10: odd positions  even positions")
    print(f"  -    {all_gold(first, 1):6.2f}  {all_gold(first, 0):6.2f}   (one hop)")
    for every in range(2, 11):
        hopped = second_hop(task, first, 100, every)
        print(f"{every:3d}    {all_gold(hopped, 1):6.2f}  {all_gold(hopped, 0):6.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
