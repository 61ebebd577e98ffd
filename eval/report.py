"""Render eval result JSON files as the markdown sections of eval/RESULTS.md.

    python -m propdex.eval.report eval/results/scifact.json eval/results/hotpotqa.json ...

Each section: the exact command that produced the numbers, the commit and
library versions it ran on, and the table `propdex eval` printed.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .run import markdown


def section(path: Path) -> str:
    result = json.loads(path.read_text())
    v = result["versions"]
    if "ratios" in result or str(result.get("task", "")).startswith("passage re-ranking"):  # nugget tasks
        from . import reconstruction, rr

        table = reconstruction.markdown(result) if "ratios" in result else rr.markdown(result)
        return "\n".join([
            f"### {result['task']} ({path.name})", "", "```bash", result["command"], "```",
            f"commit {v.get('git')}; torch {v.get('torch')}, transformers {v.get('transformers')}, python {v.get('python')}",
            "", table, "",
        ])
    if "level" not in result:  # segmentation
        from .segmentation import markdown as segmentation_table

        return "\n".join([
            f"### {result['task']} ({path.name})", "", "```bash", result["command"], "```",
            f"commit {v.get('git')}; torch {v.get('torch')}, transformers {v.get('transformers')}, python {v.get('python')}; "
            f"{result['n_sentences']} sentences, {result['n_gold']} gold propositions",
            "", segmentation_table(result), "",
        ])
    data = result.get("data", {})
    counts = ", ".join(f"{k[2:]} {v_}" for k, v_ in data.items() if k.startswith("n_"))
    return "\n".join([
        f"### {result['task']}, level {result['level']} ({path.name})",
        "",
        "```bash",
        result["command"],
        "```",
        f"commit {v.get('git')}; torch {v.get('torch')}, transformers {v.get('transformers')}, "
        f"faiss {v.get('faiss-cpu', v.get('faiss-gpu'))}, python {v.get('python')}; data: {counts}",
        "",
        markdown(result),
        "",
    ])


def main(paths: list[str]) -> None:
    print("\n".join(section(Path(p)) for p in paths))


if __name__ == "__main__":
    main(sys.argv[1:])
