"""Documents cut into passages that fit the model, on sentence boundaries.

A document is tokenized once, here, and each passage keeps its slice of
those tokens, so the encoder does not tokenize it again. Cutting runs on
threads ahead of the encoder (`cut_ahead`): it is mostly tokenizing, which
lets go of the GIL.
"""
from __future__ import annotations

import bisect
import functools
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from typing import Any

import numpy as np

from .backbone import Backbone
from .units import Document, Passage, Tokenized

# `cut_ahead`: threads that cut documents, and how far ahead of the encoder they may run.
CUT_THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
CUT_AHEAD = 64


def cut_ahead(passages: Callable[[Document], list[Passage]], docs: Iterable[Document]) -> Iterator[list[Passage]]:
    """`passages(doc)` of each document, in order, cut on CUT_THREADS
    threads up to CUT_AHEAD documents ahead of the caller. Cutting is
    mostly tokenizing, which lets go of the GIL: the threads cut the next
    documents while the caller encodes, so a build that feeds a GPU is not
    held up by a single CPU thread tokenizing."""
    docs = iter(docs)
    with ThreadPoolExecutor(CUT_THREADS, thread_name_prefix="propdex-cut") as pool:
        pending = deque(pool.submit(passages, d) for d in islice(docs, CUT_AHEAD))
        while pending:
            cut = pending.popleft().result()
            for d in islice(docs, 1):
                pending.append(pool.submit(passages, d))
            yield cut


def cut_passages(doc: Document, backbone: Backbone, window: int, pack: bool = True) -> list[Passage]:
    """Greedy packing of whole sentences into windows of at most `window` tokens
    (with `pack=False`, one sentence per passage).

    A sentence longer than the window is cut at token boundaries, so no text is
    dropped. Passages that hold no focus span are left out: they have nothing
    to represent. The document is tokenized once, here: each passage keeps
    its slice of those tokens (`Passage.tokens`) when that slice is what its
    text tokenizes to, so the encoder does not tokenize it again.
    """
    tokenized, words = document_tokens(backbone.tokenizer, doc.text)
    starts, ends = tokenized.offsets[:, 0].tolist(), tokenized.offsets[:, 1].tolist()
    pieces = _window_pieces(doc.sentences or ((0, len(doc.text)),), starts, ends, window)
    passages = [_passage(doc, group, tokenized, words, starts, ends) for group in _packed(pieces, starts, window, pack)]
    if doc.focus:
        passages = [p for p in passages if any(a < p.end and b > p.start for a, b in doc.focus)]
    return passages


def _n_tokens(starts: list[int], a: int, b: int) -> int:
    """Tokens (by their char `starts`) that start in [a, b)."""
    return bisect.bisect_left(starts, b) - bisect.bisect_left(starts, a)


def _window_pieces(sentences: Iterable[tuple[int, int]], starts: list[int], ends: list[int], window: int) -> list[tuple[int, int, int]]:
    """(start, end, sentence index) of each sentence, or of each run of
    `window` tokens of a sentence longer than that: the pieces windows are
    packed from, so no text is dropped."""
    pieces: list[tuple[int, int, int]] = []
    for si, (a, b) in enumerate(sentences):
        if _n_tokens(starts, a, b) <= window:
            pieces.append((a, b, si))
            continue
        first = bisect.bisect_left(starts, a)
        last = bisect.bisect_left(starts, b)
        for t in range(first, last, window):
            end_token = min(t + window, last) - 1
            pieces.append((starts[t] if t > first else a, ends[end_token] if end_token < last - 1 else b, si))
    return pieces


def _packed(pieces: list[tuple[int, int, int]], starts: list[int], window: int, pack: bool) -> list[list[tuple[int, int, int]]]:
    """Pieces grouped greedily, in order, into windows of at most `window`
    tokens (one piece a group without `pack`)."""
    groups: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    used = 0
    for piece in pieces:
        size = _n_tokens(starts, piece[0], piece[1])
        if current and (used + size > window or not pack):
            groups.append(current)
            current, used = [], 0
        current.append(piece)
        used += size
    if current:
        groups.append(current)
    return groups


def _passage(doc: Document, group: list[tuple[int, int, int]], tokenized: Tokenized, words: list[int] | None,
             starts: list[int], ends: list[int]) -> Passage:
    """The passage of a group of pieces, with its slice of the document's
    tokens where the slice is what its text tokenizes to alone."""
    start, end = group[0][0], group[-1][1]
    first, last = bisect.bisect_left(starts, start), bisect.bisect_left(starts, end)
    if words is None:
        return Passage(doc, start, end, group[0][2])
    # A window that starts or ends inside a word would tokenize otherwise alone ("##ing" vs "ing").
    starts_clean = first == 0 or ends[first - 1] <= start and (first == len(words) or words[first] != words[first - 1])
    ends_clean = last == first or ends[last - 1] <= end and (last == len(words) or words[last] != words[last - 1])
    return Passage(doc, start, end, group[0][2], (tokenized, first, last) if starts_clean and ends_clean else None)


def document_tokens(tokenizer: Any, text: str) -> tuple[Tokenized, list[int] | None]:
    """`text` tokenized without specials or truncation, and each token's word
    (None from a tokenizer that does not say)."""
    core = _cutting_core(tokenizer)
    if core is not None:
        # encode_batch, not encode: only the batch call lets go of the GIL, so cutting threads run side by side.
        found = core.encode_batch([text], add_special_tokens=False)[0]
        ids, offsets, words = found.ids, found.offsets, found.word_ids
    else:
        # verbose=False: a long document is expected here, it is what gets cut.
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        try:
            words = enc.word_ids()
        except (AttributeError, ValueError):
            words = None
    if words is not None and None in words:
        words = None
    return Tokenized(np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64).reshape(-1, 2)), words


@functools.lru_cache(maxsize=16)
def _cutting_core(tokenizer: Any) -> Any:
    """A private copy of a fast tokenizer's Rust core that never truncates or
    pads, or None for a tokenizer without one. Documents are cut on threads
    (`Encoder.cut`) while the encoder tokenizes batches, and the transformers
    wrapper sets truncation and padding on its core for every call: a
    shared core could cut a document at a batch's length."""
    core = getattr(tokenizer, "_tokenizer", None)
    if core is None or not hasattr(core, "to_str"):
        return None
    core = type(core).from_str(core.to_str())
    core.no_truncation()
    core.no_padding()
    return core
