"""Where HotpotQA's sentence-level Recall@k is lost: a gold sentence missing
from a system's top k sentences either belongs to a document the system's own
document ranking leaves out of its top k (the document was not found), or to
one it ranks there (the document was found, the sentence was not picked).

    python -m propdex.eval.sentence_misses ../shared/data/hotpotqa/hotpot_dev_distractor_600.json \
        --systems tokens,proposition:beside=1

Each system runs at both levels as `propdex eval hotpotqa` runs it (indexes
under --work are reused). The two counts say which fix could help: a better
document ranking, or a better choice of sentence within the documents found.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

from .metrics import hotpotqa_metrics
from .run import System, load_task, run_encoder, run_versions, split_systems


def miss_split(sentences: Mapping[str, Sequence[tuple[Hashable, int]]], documents: Mapping[str, Sequence[Hashable]],
               gold: Mapping[str, set[tuple[Hashable, int]]], k: int = 10) -> dict[str, int]:
    """{"found", "document_missed", "sentence_missed"}: the gold sentences in
    the top k sentences; those missing there whose document is not in the top
    k documents; and those missing whose document is."""
    out = {"found": 0, "document_missed": 0, "sentence_missed": 0}
    for q, golds in gold.items():
        top_sentences, top_documents = set(sentences.get(q, ())[:k]), set(documents.get(q, ())[:k])
        for g in golds:
            key = "found" if g in top_sentences else "sentence_missed" if g[0] in top_documents else "document_missed"
            out[key] += 1
    return out


def main(argv: Sequence[str] | None = None) -> dict[str, dict[str, float]]:
    from propdex.encoders.backbone import Backbone

    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m propdex.eval.sentence_misses", description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="HotpotQA distractor JSON")
    p.add_argument("--systems", required=True, help="encoder specs, as propdex eval takes them (no fusion)")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--work", type=Path, default=Path("runs/index"))
    p.add_argument("--out", type=Path, help="write the figures as JSON here too")
    args = p.parse_args(argv)
    task = load_task("hotpotqa", args.path, None)
    backbone = Backbone.load(device="cpu")
    result = {}
    for spec in split_systems(args.systems):
        system = System.parse(spec)
        if "+" in spec or system.name == "bm25":
            raise SystemExit(f"sentence_misses: {spec!r}: give one encoder system (a fusion has no document ranking of its own)")
        runs = {level: run_encoder(task, system, level, 100, args.work, backbone).rankings for level in ("sentence", "doc")}
        split = miss_split(runs["sentence"], runs["doc"], task.gold_sentences, args.k)
        recall = {f"sentence Recall@{args.k}": round(100 * hotpotqa_metrics(runs["sentence"], task.gold_sentences, [args.k])[f"Recall@{args.k}"], 2),
                  f"document Recall@{args.k}": round(100 * hotpotqa_metrics(runs["doc"], task.gold_docs, [args.k])[f"Recall@{args.k}"], 2)}
        result[spec] = recall | split
        print(spec, json.dumps(result[spec]), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"command": "python -m propdex.eval.sentence_misses " + " ".join(argv), "versions": run_versions(), "k": args.k,
                                        "gold_sentences": sum(map(len, task.gold_sentences.values())), "systems": result}, indent=1))
    return result


if __name__ == "__main__":
    main()
