"""From token states to units: where a span sits in its document, which
tokens a focus keeps, and the mean of the states under a span.

Shared by every encoder's `pool`: a unit is always re-based onto its first
sentence, so it reads the same whichever passage it was cut from.
"""
from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np
import torch

from .units import Document, Kind, Span, Unit


class SentenceLocator:
    """Maps document character offsets to (sentence index, offset in that sentence)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.sentences = doc.sentences or ((0, len(doc.text)),)
        self.starts = [s for s, _ in self.sentences]

    def sentence_of(self, char: int) -> int:
        return max(0, bisect.bisect_right(self.starts, char) - 1)

    def units(self, spans: np.ndarray, kind: Kind) -> list[Unit]:
        """`unit` of each one-span row of (n, 2) document char spans, at once
        (a token index makes a unit per token)."""
        starts = np.asarray(self.starts)
        first = np.maximum(np.searchsorted(starts, spans[:, 0], side="right") - 1, 0)
        last = np.maximum(np.searchsorted(starts, spans[:, 1] - 1, side="right") - 1, 0)
        local = (spans - starts[first][:, None]).tolist()
        doc_id = self.doc.id
        return [Unit(doc_id, f, ((a, b),), kind, l) for f, (a, b), l in zip(first.tolist(), local, last.tolist())]

    def unit(self, spans: Sequence[Span], kind: Kind) -> Unit:
        """A unit for document-level char spans, re-based onto its first sentence."""
        first = self.sentence_of(spans[0][0])
        last = self.sentence_of(max(e for _, e in spans) - 1)
        base = self.starts[first]
        return Unit(self.doc.id, first, tuple((a - base, b - base) for a, b in spans), kind, last)


def focus_mask(doc: Document, char_spans: np.ndarray) -> np.ndarray:
    """True for tokens (document char spans, (n, 2)) that overlap a focus span."""
    if not doc.focus:
        return np.ones(len(char_spans), dtype=bool)
    keep = np.zeros(len(char_spans), dtype=bool)
    for a, b in doc.focus:
        keep |= (char_spans[:, 0] < b) & (char_spans[:, 1] > a)
    return keep


def span_pool(states: torch.Tensor, offsets: np.ndarray, real: np.ndarray, groups: Sequence[Sequence[Span]]) -> torch.Tensor:
    """Mean of the token states under each group of char spans.

    A token belongs to a group when its char span overlaps one of the group's
    spans (subword tokens map through the tokenizer's offsets); `real` masks
    out specials and padding. Rows of groups no token overlaps are zero.
    """
    member = np.zeros((len(groups), len(offsets)), dtype=bool)
    owner = np.array([g for g, spans in enumerate(groups) for _ in spans], dtype=np.int64)
    if len(owner):
        spans = np.array([span for group in groups for span in group], dtype=np.int64).reshape(-1, 2)
        hit = (offsets[None, :, 0] < spans[:, 1, None]) & (offsets[None, :, 1] > spans[:, 0, None]) & real[None]
        np.logical_or.at(member, owner, hit)
    weights = torch.from_numpy(member.astype(np.float32)).to(states.device)
    return (weights @ states) / weights.sum(1, keepdim=True).clamp(min=1)


def l2_normalize(x: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(x.float(), dim=-1).numpy().astype(np.float32, copy=False)
