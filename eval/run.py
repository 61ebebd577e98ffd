"""`propdex eval`: every named system on the same corpus and queries, in one run.

The command line alone: systems are spelt as eval.systems reads them, run
by eval.runner, rendered by eval.render and stamped by eval.provenance; the
other tasks (segmentation, rr, reconstruction, run) are imported when named.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

from .provenance import run_versions
from .render import markdown, plot_recall
from .runner import TASKS, evaluate
from .systems import split_systems


def add_commands(sub) -> None:
    p = sub.add_parser("eval", help="measure systems side by side", description=__doc__.split("\n\n")[0])
    p.add_argument("task", choices=TASKS)
    p.add_argument("path", help="data file or folder (run: the TREC run file to score)")
    p.add_argument("--qrels", type=Path, help="run: the judgements (TREC qrels, BEIR qrels TSV, or HotpotQA's JSON file)")
    p.add_argument("--systems", default="bm25,single,tokens",
                   help="comma-separated, e.g. bm25,single,tokens:factory=Flat (segmentation: clause,pairs; "
                        "rr: encoders as for search; reconstruction: ratios, e.g. 0.05,0.1,0.25)")
    p.add_argument("--level", choices=("doc", "sentence", "unit"), help="default: doc (propsegment: unit = proposition)")
    p.add_argument("--limit", type=int, help="first N queries (rr: number of queries, default 1000)")
    p.add_argument("--split", default="test", help="beir: the queries and judgements of this split (a split no table "
                                                  "reports, e.g. SciFact's train, is where to choose a setting)")
    p.add_argument("--words", type=_budgets, default=(), metavar="L1,L2,...",
                   help="hotpotqa: also score the contexts Index.context packs into these word budgets "
                        "(answer and supporting-fact recall), e.g. 50,100,200,500")
    p.add_argument("--out", type=Path, help="write the JSON results here")
    p.add_argument("--plot", type=Path, help="HotpotQA: write a Recall@k plot (PNG) here")
    p.add_argument("--work", type=Path, default=Path("runs/index"), help="where system indexes are built and reused")
    p.add_argument("--device", default="auto")
    p.set_defaults(run=_run)


def _run(args) -> int:
    command = "propdex " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.task == "run":
        return _run_score(args, command)
    if args.qrels is not None:
        raise ValueError("--qrels scores a run: propdex eval run RUN --qrels FILE")
    if args.task == "segmentation":
        return _run_segmentation(args, command)
    if args.task in ("rr", "reconstruction"):
        return _run_nugget_task(args, command)
    result = evaluate(
        args.task, args.path, split_systems(args.systems), level=args.level, limit=args.limit,
        work=args.work, device=args.device, command=command, words=args.words, split=args.split,
    )
    table = markdown(result)
    print(f"{result['task']}, level {result['level']}, {result['data'].get('n_queries', '?')} queries")
    print(table)
    _write(args.out, result)
    if args.plot:
        plot_recall(result, args.plot)
    return 0


def _budgets(text: str) -> tuple[int, ...]:
    try:
        budgets = tuple(int(w) for w in text.split(",") if w)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--words takes word budgets like 50,100,200,500, got {text!r}") from None
    if not budgets or min(budgets) < 1:
        raise argparse.ArgumentTypeError(f"--words takes positive word budgets, got {text!r}")
    return budgets


def _run_score(args, command: str) -> int:
    from . import score_run

    if args.qrels is None:
        raise ValueError("propdex eval run RUN needs --qrels FILE")
    result = {"task": "run", "command": command, "versions": run_versions(), **score_run.evaluate_run(args.path, args.qrels)}
    q = result["queries"]
    print(f"{args.path}: {q['run']} queries in the run, {q['judged_in_run']} of {q['judged']} judged queries")
    print(score_run.markdown(result))
    _write(args.out, result)
    return 0


def _write(out: Path | None, result: dict[str, Any]) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1, default=str))


def _run_segmentation(args, command: str) -> int:
    from . import segmentation

    systems = [s for s in args.systems.split(",") if s] if args.systems != "bm25,single,tokens" else ["clause", "pairs"]
    result = segmentation.evaluate_segmentation(args.path, systems, device=args.device)
    result = {"task": "propsegment segmentation (dev)", "command": command, "versions": run_versions(), **result}
    print(f"{result['task']}: {result['n_sentences']} sentences, {result['n_gold']} gold propositions")
    print(segmentation.markdown(result))
    _write(args.out, result)
    return 0


def _run_nugget_task(args, command: str) -> int:
    """`rr` (passage re-ranking) and `reconstruction` (nugget AE BLEU), both on held-out Wikipedia."""
    from . import reconstruction, rr

    systems = [s for s in args.systems.split(",") if s]
    if args.task == "rr":
        task = rr.build_rr(args.path, n_queries=args.limit or 1000)
        result = rr.evaluate_rr(task, systems, device=args.device)
        title, table = f"passage re-ranking (RR), {task.info['queries']} queries", rr.markdown(result)
    else:
        result = reconstruction.evaluate_reconstruction(args.path, [float(r) for r in systems], device=args.device)
        title, table = f"nugget reconstruction, {result['passages']} held-out passages", reconstruction.markdown(result)
    result = {"task": title, "command": command, "versions": run_versions(), **result}
    print(title)
    print(table)
    _write(args.out, result)
    return 0
