"""Search settings against quality and latency on one built index, at k = 10.

Eval ranks 100 deep for its Recall@100 columns (stage 2 re-scores 200
documents there, with the same first page); this sweep searches exactly
as a user asking for 10 hits does, one query at a time on `--threads`
threads, once per setting, on the same loaded index:

    python -m propdex.eval.search_sweep beir ../shared/data/beir/scifact runs/bench/scifact-tokens \\
        --settings default "nprobe=32,rerank=100" "nprobe=8"

A setting is `default` or comma-separated SearchSettings options (`k=`
too: fewer hits than the metrics read). BEIR tasks
report nDCG@10, HotpotQA Recall@2/5/10; each setting gets p50/p95 ms
(query encoding included). JSON goes to `--out` with the command and versions.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any



def parse_setting(text: str) -> dict[str, int]:
    if text == "default":
        return {}
    try:
        return {k: int(v) for k, v in (kv.split("=") for kv in text.split(","))}
    except ValueError:
        raise ValueError(f"a setting is 'default' or name=integer,...; got {text!r}") from None


def sweep(task_name: str, path: str, index: Path, settings: list[str], threads: int, split: str = "test",
          runtime: str = "torch") -> dict[str, Any]:
    from propdex.encoders import encoder_from_config
    from propdex.indexer.manifest import read_manifest
    from propdex.indexer.settings import store_of
    from propdex.retriever import Searcher

    from .metrics import beir_metrics, hotpotqa_metrics
    from .peers import latency, timed
    from .run import load_task

    task = load_task(task_name, path, None, split)
    manifest = read_manifest(index)
    encoder = encoder_from_config(manifest["encoder"], device="cpu", runtime=runtime)
    rows = {}
    with Searcher.load(index, encoder=encoder, threads=threads) as searcher:
        for setting in settings:
            options = parse_setting(setting)
            run, times = timed([(q.id, q.text) for q in task.queries],
                               lambda text: [(h.doc_id, h.score) for h in searcher.search(text, **({"k": 10} | options))])
            if task.qrels is not None:
                quality = {"nDCG@10": beir_metrics(run, task.qrels)["nDCG@10"]}
            else:
                # A run maps ids to rank_scores, best highest (the dict's own order is not the ranking).
                quality = hotpotqa_metrics({q: sorted(r, key=r.get, reverse=True) for q, r in run.items()}, task.gold_docs, ks=(2, 5, 10))
            rows[setting] = {k: round(100 * v, 2) for k, v in quality.items()} | latency(times)
            print(setting, json.dumps(rows[setting]), flush=True)
    return {"task": task.name, "index": str(index), "factory": manifest["index"]["factory"],
            "store": store_of(manifest), "threads": threads, "query_runtime": runtime, "split": split, "queries": len(task.queries), "settings": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m propdex.eval.search_sweep", description=__doc__.split("\n\n")[0])
    p.add_argument("task", help="beir or hotpotqa")
    p.add_argument("path")
    p.add_argument("index", type=Path)
    p.add_argument("--settings", nargs="+", default=["default"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--split", default="test", help="BEIR queries to search: test, or train to choose settings on queries no table reports")
    p.add_argument("--runtime", default="torch", help="what runs the query encoder's backbone: torch, onnx, onnx-int8")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    for setting in args.settings:
        parse_setting(setting)  # a typo fails before the index loads
    if args.task not in ("beir", "hotpotqa"):
        p.error(f"task must be beir or hotpotqa, got {args.task!r}")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))  # before numpy (imported below) starts its BLAS threads
    from .run import run_versions

    result = {"command": "python -m propdex.eval.search_sweep " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
              "versions": run_versions(), **sweep(args.task, args.path, args.index, args.settings, args.threads, args.split, args.runtime)}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
