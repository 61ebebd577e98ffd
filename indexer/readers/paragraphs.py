"""Lines to paragraphs, one a line: the joiner shared by the wikitext
renderer and the text reader.

Sentences are split at line breaks, so a paragraph wrapped over several
lines must become one line before it is split, while headings and list
items must stay lines of their own. Each caller says, per line, whether it
starts and whether it ends a block of its own; the joining is done here,
once, so both formats follow the same rule.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

# Runs of spaces, tabs, no-break, thin and zero-width spaces: one space.
SPACES = re.compile(r"[ \t\u00a0\u2009\u200b]+")
_LINE_WITH_WORDS = re.compile(r"\w")


def paragraphs(lines: Iterable[tuple[str, bool, bool]]) -> str:
    """Lines, each with whether it starts and whether it ends a block of its
    own, to paragraphs, one a line: a line joins the one before unless it
    starts a block or that one ended one; a line without a word ends a
    paragraph and is dropped, so one blank line at most separates blocks."""
    out: list[str] = []
    joinable = False  # whether the last line is paragraph text a line may continue
    for line, starts, ends in lines:
        if not _LINE_WITH_WORDS.search(line):
            if out and out[-1]:
                out.append("")
            joinable = False
            continue
        if joinable and not starts:
            out[-1] += " " + line
        else:
            out.append(line)
        joinable = not ends
    return "\n".join(out).strip()
