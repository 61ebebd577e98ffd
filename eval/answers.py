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
    """Answer and supporting-fact recall of packed contexts, question by question."""

    def __init__(self, task: Task, budgets: Sequence[int], level: str) -> None:
        if not task.answers or task.gold_sentences is None:
            raise ValueError("--words measures HotpotQA contexts: the task needs answers and supporting facts")
        self.task, self.budgets, self.level = task, list(budgets), level
        self.answered = dict.fromkeys(self.budgets, 0)
        self.support = dict.fromkeys(self.budgets, 0.0)
        self.questions = self.yes_no = 0
        self.words = dict.fromkeys(self.budgets, 0)

    def add(self, qid: str, hits: Sequence[Hit]) -> None:
        answer = self.task.answers[qid]
        gold = self.task.gold_sentences[qid]  # type: ignore[index]
        counted = normalize(answer) not in YES_NO
        self.questions += 1
        self.yes_no += not counted
        for words in self.budgets:
            context = pack(hits, words, self.level)
            self.words[words] += context.words
            self.answered[words] += counted and metrics.holds_answer(context.text, answer)
            whole = {(c.doc_id, c.sentence) for c in context.citations if c.whole}
            self.support[words] += len(gold & whole) / len(gold)

    def figures(self) -> dict[str, Any]:
        scored = self.questions - self.yes_no
        out: dict[str, Any] = {}
        for words in self.budgets:
            out[f"answer@{words}"] = self.answered[words] / max(scored, 1)
            out[f"support@{words}"] = self.support[words] / max(self.questions, 1)
            out[f"mean_words@{words}"] = self.words[words] / max(self.questions, 1)
        return out | {"questions_scored": scored, "yes_no_left_out": self.yes_no}


def normalize(answer: str) -> str:
    return metrics.normalize_answer(answer)
