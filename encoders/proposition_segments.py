"""The glue between the proposition encoder and its segmenter: which
propositions a passage has, in passage-relative char spans, and the
sentence structure a packed passage is read and pooled in.

A passage's propositions come, in this order, from the document's own
focus, from nothing (a text of no words), from the whole text (a query
that is one need), from segments found beforehand, or from the segmenter
reading the encoder's own pass, one state a word. Whatever the segmenter
leaves uncovered becomes one more proposition: no word is lost to the index.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from .base import TokenStates
from .pooling import SentenceLocator, span_pool
from .segment import Proposition, spans_text, word_spans, words
from .text import is_wordlike
from .units import Document, Kind, Passage, Span, Unit


def sentence_pieces(passage: Passage, tokens: TokenStates) -> list[tuple[Passage, TokenStates]]:
    """A packed passage's sentences, each with its own tokens' states (read
    in the whole passage): what `pool` reads one sentence at a time."""
    doc, out = passage.doc, []
    real = ~tokens.special
    for si, (a, b) in enumerate(doc.sentences or ((0, len(doc.text)),)):
        a, b = max(a, passage.start), min(b, passage.end)
        if a >= b:
            continue
        lo, hi = a - passage.start, b - passage.start
        keep = np.flatnonzero(real & (tokens.offsets[:, 0] < hi) & (tokens.offsets[:, 1] > lo))
        if len(keep):
            piece = Passage(doc, a, b, si)
            out.append((piece, TokenStates(tokens.states[torch.from_numpy(keep)], tokens.offsets[keep] - lo, np.zeros(len(keep), bool), tokens.ids[keep])))
    return out


def sentence_blocks(passage: Passage, offsets: np.ndarray, special: np.ndarray) -> np.ndarray:
    """(L,) the block each token of a tokenized passage reads in under
    `context="isolated"`: 0 for what comes before the text ([CLS], the title,
    its [SEP]), 1 + k for the passage's k-th sentence; what follows the
    text (the closing [SEP], padding) joins the last sentence."""
    bounds = [max(a, passage.start) - passage.start for a, b in (passage.doc.sentences or ((0, len(passage.doc.text)),))
              if a < passage.end and b > passage.start]
    blocks = np.zeros(len(offsets), np.int64)
    real = np.flatnonzero(~special)
    if not len(real):
        return blocks
    blocks[real] = 1 + np.maximum(np.searchsorted(np.asarray(bounds), offsets[real, 0], side="right") - 1, 0)
    blocks[real[-1] + 1 :] = blocks[real[-1]]  # padding is masked out as a key anyway
    return blocks


def isolated_reading(passages: Sequence[Passage], enc: dict[str, torch.Tensor], offsets: np.ndarray,
                     special: np.ndarray) -> dict[str, torch.Tensor]:
    """Model inputs that read each packed passage of a batch as its
    sentences would be read one at a time, in one pass (`context="isolated"`):
    each sentence's tokens attend to themselves and to the [CLS] title [SEP]
    in front, and count positions on from it, so a sentence's states do not
    depend on its neighbours."""
    blocks = np.stack([sentence_blocks(p, o, sp) for p, o, sp in zip(passages, offsets, special)])
    keys = enc["attention_mask"].numpy().astype(bool)
    prefix = blocks == 0
    # Query i reads key j in its own block, or in the prefix (which reads only itself).
    allowed = keys[:, None, :] & ((blocks[:, :, None] == blocks[:, None, :]) | prefix[:, None, :])
    positions = np.zeros(blocks.shape, np.int64)
    for r, row in enumerate(blocks):
        t = int(prefix[r].sum())
        positions[r, prefix[r]] = np.arange(t)
        for b in np.unique(row[row > 0]):
            at = row == b
            positions[r, at] = t + np.arange(int(at.sum()))
    return {"attention_mask": torch.from_numpy(allowed[:, None]), "position_ids": torch.from_numpy(positions)}


def covering(text: str, offsets: np.ndarray, props: Sequence[Proposition]) -> list[Proposition]:
    """The segmenter's propositions, plus one made of the words none covers:
    no word of the sentence is lost to the index."""
    props = list(props)
    covered = {i for p in props for i in p}
    rest = tuple(i for i in range(len(offsets)) if i not in covered and is_wordlike(text[offsets[i, 0] : offsets[i, 1]]))
    return props + [rest] if rest else props


def unit_text(doc: Document, unit) -> str:
    """A unit's own text: its spans in its sentence, joined by a space."""
    base = doc.sentences[unit.sentence][0] if doc.sentences else 0
    return spans_text(doc.text[base:], unit.spans)


def known_propositions(passage: Passage, whole: bool, segments: dict[str, list]) -> list[tuple[Span, ...]] | None:
    """A passage's propositions where the segmenter need not read it: the
    document's focus, none for a text of no words, the whole text
    (`whole`), or the segments found for its text beforehand (`segments`);
    None where the segmenter must read it."""
    doc, text = passage.doc, passage.text
    offsets = words(text)
    if doc.focus:
        return [tuple((max(a, passage.start) - passage.start, min(b, passage.end) - passage.start)
                      for a, b in doc.focus if a < passage.end and b > passage.start)]
    if len(offsets) == 0:
        return []
    if whole:
        return [((int(offsets[0, 0]), int(offsets[-1, 1])),)]
    if text in segments:
        return spans_of(text, offsets, segments[text])
    return None


def spans_of(text: str, offsets: np.ndarray, props: Sequence[Proposition]) -> list[tuple[Span, ...]]:
    """The char spans of each of the segmenter's propositions (word indices
    into `offsets`), and of the words none covers (`covering`)."""
    return [word_spans(text, offsets, p) for p in covering(text, offsets, props)]


def word_inputs(passage: Passage, tokens: TokenStates, columns: torch.Tensor, device: str | torch.device
                ) -> tuple[torch.Tensor, str, np.ndarray]:
    """What the segmenter reads of one passage: the mean under each word of
    the `columns` (its layers) of this very pass's states, on `device`; the
    text; and its words' char offsets."""
    offsets = words(passage.text)
    states = tokens.states[:, columns]
    wstates = span_pool(states, tokens.offsets, ~tokens.special, [[(int(a), int(b))] for a, b in offsets])
    return wstates.to(device), passage.text, offsets


def units_by_owner(owners: Sequence[int], pieces: Sequence[Passage], groups: Sequence[Sequence[tuple[Span, ...]]]
                   ) -> dict[int, tuple[list[Unit], list[int]]]:
    """For each passage of a batch (`owners` numbers the passage each piece
    was cut from), its propositions' units, re-based onto their sentences,
    and their rows in the head's output, which holds every piece's
    propositions in order."""
    per_owner: dict[int, tuple[list[Unit], list[int]]] = {}
    at = 0
    for owner, piece, found in zip(owners, pieces, groups):
        units, rows_of = per_owner.setdefault(owner, ([], []))
        locate = SentenceLocator(piece.doc)
        units.extend(locate.unit([(a + piece.start, b + piece.start) for a, b in g], Kind.PROPOSITION) for g in found)
        rows_of.extend(range(at, at + len(found)))
        at += len(found)
    return per_owner
