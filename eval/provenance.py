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


def _git_head() -> str | None:
    """The commit of the checkout propdex runs from, or (installed from a wheel) of the one the command runs in."""
    for where in (Path(__file__).resolve().parents[1], Path.cwd()):
        try:
            head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True).stdout.strip()
        except OSError:
            return None
        if head:
            return head
    return None
