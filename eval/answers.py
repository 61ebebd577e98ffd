"""How much of the answer a prompt-sized context holds (HotpotQA, `--words`).

For each budget l, each question's hits are packed into at most l words by
the product's own packing (`retriever.context.pack`, what `Index.context`
returns) and scored two ways:

- answer@l: the gold answer, normalised as HotpotQA's official script
  normalises it, appears in the context (Dense X Retrieval's EM@l in spirit).
  Yes/no questions are counted apart and left out: their answer is a word
  any context may hold.
- support@l: the share of the question's supporting-fact sentences that the
  context holds whole.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from propdex.retriever.context import pack
from propdex.retriever.hits import Hit

from . import metrics
from .datasets import Task

BUDGETS = (50, 100, 200, 500)
YES_NO = ("yes", "no")


class ContextScores:
    """Answer and supporting-fact recall of packed contexts, question by
    question; figures for all questions and for the odd- and even-numbered
    ones (1st, 3rd, ... in the file), so that a default chosen on one half
    is confirmed on the other."""

    def __init__(self, task: Task, budgets: Sequence[int], level: str) -> None:
        if not task.answers or task.gold_sentences is None:
            raise ValueError("--words measures HotpotQA contexts: the task needs answers and supporting facts")
        self.task, self.budgets, self.level = task, list(budgets), level
        self.number = {q.id: n for n, q in enumerate(task.queries, start=1)}
        # Per question: (number, counted, {budget: (answered, support share, words)}).
        self.rows: list[tuple[int, bool, dict[int, tuple[bool, float, int]]]] = []

    def add(self, qid: str, hits: Sequence[Hit]) -> None:
        answer = self.task.answers[qid]
        gold = self.task.gold_sentences[qid]  # type: ignore[index]
        counted = normalize(answer) not in YES_NO
        row = {}
        for words in self.budgets:
            context = pack(hits, words, self.level)
            whole = {(c.doc_id, c.sentence) for c in context.citations if c.whole}
            row[words] = (counted and metrics.holds_answer(context.text, answer), len(gold & whole) / len(gold), context.words)
        self.rows.append((self.number[qid], counted, row))

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for half, keep in (("", lambda n: True), ("_odd", lambda n: n % 2 == 1), ("_even", lambda n: n % 2 == 0)):
            rows = [r for r in self.rows if keep(r[0])]
            scored = [r for r in rows if r[1]]
            for words in self.budgets:
                out[f"answer@{words}{half}"] = sum(r[2][words][0] for r in scored) / max(len(scored), 1)
                out[f"support@{words}{half}"] = sum(r[2][words][1] for r in rows) / max(len(rows), 1)
                if not half:
                    out[f"mean_words@{words}"] = sum(r[2][words][2] for r in rows) / max(len(rows), 1)
        scored = sum(1 for r in self.rows if r[1])
        return out | {"questions_scored": scored, "yes_no_left_out": len(self.rows) - scored}


def normalize(answer: str) -> str:
    return metrics.normalize_answer(answer)
