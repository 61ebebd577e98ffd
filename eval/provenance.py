"""What a results file records of the software that produced it: library versions and the git commit.

Every eval, bench and scoreboard file carries it, so that a figure can be
traced to the code that measured it.
"""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from propdex.indexer.manifest import library_versions


def run_versions() -> dict[str, Any]:
    """What a results file records of the software that produced it."""
    return {**library_versions(), "git": _git_head()}


# The files whose changes change a figure: a run from a checkout that differs
# from its commit in any of them says so ("<commit>-modified").
CODE = ("encoders", "indexer", "retriever", "propdex", "pyproject.toml", ":(glob)eval/*.py")


def _git_head(places: tuple[Path, ...] | None = None) -> str | None:
    """The commit of the checkout propdex runs from, or (installed from a
    wheel) of the one the command runs in; with "-modified" where that
    checkout's code differs from the commit (a run of code never committed)."""
    for where in places or (Path(__file__).resolve().parents[1], Path.cwd()):
        try:
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True).stdout.strip()
        except OSError:
            return None
        if head:
            changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *CODE], cwd=where,
                                     capture_output=True, text=True).stdout.strip()
            return f"{head}-modified" if changed else head
    return None
