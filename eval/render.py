"""A `propdex eval` result as a markdown table and a Recall@k plot, and the
markdown pieces the scoreboard is written with.

Rendering reads only the result dictionary, so older results files render
too: a figure they lack shows as a dash.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .scoring import TOP1_ORIGINS


def markdown(result: dict[str, Any]) -> str:
    systems = result["systems"]
    names = list(next(iter(systems.values()))["metrics"])
    head = ["system", *names, "vec/doc", "B/vec (index)", "B/vec (all in)", "encode s", "p50 ms", "p95 ms"]
    lines = header(head)
    for name, s in systems.items():
        cells = [name, *(f"{100 * s['metrics'][m]:.2f}" for m in names)]
        cells += [cell(s.get("vectors_per_doc"), 1), cell(s.get("bytes_per_vector"), 1),
                  cell(s.get("all_in_bytes_per_vector"), 1), cell(s.get("encode_s"), 1) + (" (shared)" if s.get("encode_shared") else "")]
        cells += [cell(s["latency_ms_p50"], 1), cell(s["latency_ms_p95"], 1)]
        lines.append(row(cells))
    if top1 := {name: s["top1"] for name, s in systems.items() if "top1" in s}:
        lines += ["", top1_markdown(top1)]
    if contexts := {name: s["context"] for name, s in systems.items() if "context" in s}:
        lines += ["", context_markdown(contexts)]
    return "\n".join(lines)


def context_markdown(contexts: dict[str, dict[str, Any]]) -> str:
    """Answer and supporting-fact recall of the packed contexts, per budget."""
    budgets = sorted(int(k.split("@")[1]) for k in next(iter(contexts.values())) if k.startswith("answer@") and k.split("@")[1].isdigit())
    head = ["system", *(f"answer@{w}" for w in budgets), *(f"support@{w}" for w in budgets)]
    lines = header(head)
    for name, c in contexts.items():
        cells = [f"{100 * c[f'answer@{w}']:.2f}" for w in budgets] + [f"{100 * c[f'support@{w}']:.2f}" for w in budgets]
        lines.append(row([name, *cells]))
    return "\n".join(lines)


def top1_markdown(top1: dict[str, dict[str, int]]) -> str:
    """PropSegment's `top1_breakdown` per system: where the top propositions
    come from, and P@1 once the query's own sentence is passed over."""
    head = ["system", "top-1: gold", "sibling", "query's document", "gold's sentence", "gold's document", "other",
            "P@1 past siblings", "siblings holding the query"]
    lines = header(head)
    for name, counts in top1.items():
        past = counts.get("gold_past_siblings")  # absent from older results files
        share = None if past is None else 100 * past / sum(counts[o] for o in TOP1_ORIGINS)
        holding = counts.get("sibling_contains_query")  # absent from older results files
        cells = [name, *(str(counts[o]) for o in TOP1_ORIGINS), cell(share, 2), "–" if holding is None else str(holding)]
        lines.append(row(cells))
    return "\n".join(lines)


def cell(value: float | None, digits: int = 2, scale: float = 1.0) -> str:
    """A figure as a table shows it: `digits` decimals of scale x value, a dash where it is missing."""
    return "–" if value is None else f"{scale * value:.{digits}f}"


def row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def header(cells: Sequence[str]) -> list[str]:
    """A table's head row and the rule under it."""
    return [row(cells), "|" + "---|" * len(cells)]


def cited(source: str, command: str) -> list[str]:
    """Where a table's figures come from, and the command that wrote them right under it."""
    return [source, "```bash", command, "```", ""]


def load(name: str, folder: Path) -> dict[str, Any] | None:
    """A JSON result in `folder`, or None where it is absent."""
    path = folder / name
    return json.loads(path.read_text()) if path.is_file() else None


def plot_recall(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, s in result["systems"].items():
        ks = sorted(int(m.split("@")[1]) for m in s["metrics"] if m.startswith("Recall@"))
        ax.plot(ks, [100 * s["metrics"][f"Recall@{k}"] for k in ks], marker="o", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("k")
    ax.set_ylabel("Recall@k (%)")
    ax.set_title(f"{result['task']} ({result['level']} level)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
