"""Stage 2: exact re-scoring of stage 1's candidates, and aggregation to rows.

Each candidate document is scored from its stored vectors: MaxSim, or for
Cross-Thought an attention softmax over the units of all candidates at
once. A multi-vector query scores a document by its best window of
consecutive sentences (`window` units, about a passage), as ColBERT
retrieves passages: MaxSim over a whole article grows with its length.
Only the windows that hold one of the query's stage-1 hits are decoded and
scored (`hit_windows`; `all_windows=True` scores every window), so a long
article costs stage 2 its hit windows, not its length.

The scores are then aggregated to the level asked for: a row is a document,
a sentence (the MaxSim of its units) or a unit.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import scoring
from .loading import Shard, ordinal_of, shard_of
from .settings import Level

# (score, candidate index, sentence or unit: 0 for a document), best first.
Row = tuple[float, int, int]


@dataclass
class Candidate:
    """One re-scored document: exact similarities of every query vector to
    the units stage 2 scored (all of them, or its hit windows' units)."""

    shard: int
    ordinal: int
    part: np.ndarray  # (m, c) float32: every query vector against each scored unit
    unit_sentences: np.ndarray  # (n, 2), every unit of the document
    score: float
    tier: int = 0  # 1: past stage 1's first `rerank` documents, ranked after them
    cols: np.ndarray | None = None  # the scored units' positions, ascending (None: all n)
    windows: tuple[np.ndarray, int] | None = None  # with a window: each scored unit's window, and the document's windows

    @property
    def key(self) -> int:
        return (self.shard << 32) | self.ordinal

    @cached_property
    def sim(self) -> np.ndarray:
        """(m, n) similarities to every unit, -inf for those not scored."""
        if self.cols is None:
            return self.part
        out = np.full((self.part.shape[0], len(self.unit_sentences)), -np.inf, dtype=np.float32)
        out[:, self.cols] = self.part
        return out

    @cached_property
    def scored_units(self) -> np.ndarray:
        """(c, 2) the sentence ranges of the units stage 2 scored, `part`'s columns."""
        return self.unit_sentences if self.cols is None else self.unit_sentences[self.cols]

    def position(self, columns: np.ndarray) -> np.ndarray:
        """The document positions of columns of `part`."""
        return columns if self.cols is None else self.cols[columns]

    @cached_property
    def sentences(self) -> int:
        """The sentences its units reach: 1 + the last any unit covers."""
        return int(self.unit_sentences[:, 1].max()) + 1 if len(self.unit_sentences) else 0

    def sentence_scores(self, first: int = 0, last: int | None = None) -> np.ndarray:
        """MaxSim per sentence of the document, or of its sentences
        first..last that its units reach (-inf where it has no scored unit)."""
        if first == 0 and (last is None or last >= self.sentences - 1):
            return scoring.sentence_scores(self.part, self.scored_units, self.sentences)
        last = min(self.sentences - 1 if last is None else last, self.sentences - 1)
        if last < first:
            return np.zeros(0, np.float32)
        return scoring.sentence_range_scores(self.part, self.scored_units, first, last)

    def unit_scores(self) -> np.ndarray:
        """Each unit's score (-inf where not scored); title units cover no
        sentence (last < first) and are never a unit hit."""
        out = np.full(len(self.unit_sentences), -np.inf, dtype=np.float32)
        positions, scores = self.unit_rows()
        out[positions] = scores
        return out

    def unit_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """The document positions of the scored units that cover a sentence,
        ascending, and their scores (`unit_scores` without the rest)."""
        units = self.scored_units
        covers = np.flatnonzero(units[:, 1] >= units[:, 0])
        return self.position(covers), scoring.unit_scores(self.part[:, covers])

    def best_window(self, window: int) -> tuple[int, int] | None:
        """The first and last sentence of its best window (`scoring.best_window`),
        from the windows stage 2 scored where it scored by windows."""
        if self.windows is None:
            return scoring.best_window(self.sim, self.unit_sentences, window)
        return scoring.best_group(self.part, self.scored_units, *self.windows)

    def matched_units(self, sentence: int) -> list[int]:
        """The units that are some query vector's best match inside the sentence."""
        units = self.scored_units
        inside = np.flatnonzero((units[:, 0] <= sentence) & (units[:, 1] >= sentence))
        if not len(inside):
            return []
        return sorted(set(self.position(inside[self.part[:, inside].argmax(axis=1)]).tolist()))


def rescore(shards: Sequence[Shard], q: np.ndarray, chosen: np.ndarray, n: int, exclude: set[str], *, blocks: int = 0,
            first: int | None = None, window: int | None = None, hit: Mapping[int, np.ndarray] | None = None) -> list[Candidate]:
    """The chosen documents (keys) scored exactly, best first, and the best
    `n` of them; documents whose id is in `exclude` are left out.

    `blocks` scores by attention over that many blocks (Cross-Thought; one
    query vector). With `first`, `chosen` is in stage 1's order and its first
    `first` documents (once `exclude` is out) rank ahead of the rest, each
    group best first: a page is the same whatever k. With `window`, a
    document scores as its best window's (scoring.window_maxsims), and
    with `hit` (a document's key -> the positions of its units that stage
    1's hits fell on) only the windows that hold a hit are scored
    (`hit_windows`)."""
    if blocks and len(q) != 1:
        raise ValueError(f"attention scoring takes one query vector, got {len(q)}")
    out: list[Candidate] = []
    rotated: dict[int, np.ndarray] = {}  # shards that share a rotation (one codec) rotate the query once
    for shard, ordinals in _by_shard(chosen).items():
        rotate = shards[shard].rotate
        if rotate is not None and id(rotate) not in rotated:
            rotated[id(rotate)] = rotate(q)
        qs = q if rotate is None else rotated[id(rotate)]
        out += _similarities(shards[shard], shard, qs, ordinals, exclude, blocks, window, hit)
    if blocks and out:
        _attend(out)
    _score(out, window)
    if first is not None and len(out) > first:
        _second_tier(out, chosen, first)
    out.sort(key=lambda c: (c.tier, -c.score, c.shard, c.ordinal))
    return out[:n]


def _by_shard(keys: np.ndarray) -> dict[int, list[int]]:
    """The keys' ordinals per shard, in the order met."""
    out: dict[int, list[int]] = {}
    for key in keys.tolist():
        out.setdefault(shard_of(key), []).append(ordinal_of(key))
    return out


def _similarities(shard: Shard, s: int, qs: np.ndarray, ordinals: list[int], exclude: set[str], blocks: int,
                  window: int | None = None, hit: Mapping[int, np.ndarray] | None = None) -> list[Candidate]:
    """Candidates of one shard (number `s`) with every query vector's
    similarities to their stored vectors (`qs`: the query in the shard's
    decoded space), not yet scored; with `window`, only the windows around
    each document's `hit` units are decoded and multiplied."""
    store = shard.store
    if exclude:
        ordinals = [o for o in ordinals if store.doc_id(o) not in exclude]
    if not ordinals:
        return []
    sentences = store.unit_sentences(ordinals)
    windows = scoring.sentence_windows_of(sentences, window) if window else [None] * len(sentences)
    cols = [hit_windows(w, hit.get((s << 32) | o)) if w and hit is not None else None
            for o, w in zip(ordinals, windows)]
    if blocks or store.has_vectors:
        parts = store.vector_rows(ordinals, cols)
        sims = scoring.block_logits(qs, np.concatenate(parts), blocks) if blocks else scoring.similarities(qs, parts)
    else:  # codes: decoded and multiplied a block at a time
        parts = store.vector_ids(ordinals, cols)
        sims = scoring.decoded_similarities(qs, store.decoder or store.decode, np.concatenate(parts))
    bounds = np.cumsum([0] + [len(v) for v in parts])
    return [Candidate(s, o, sims[:, bounds[i] : bounds[i + 1]], sen, 0.0, cols=c,
                      windows=None if w is None else (w[0] if c is None else w[0][c], w[1]))
            for i, (o, sen, c, w) in enumerate(zip(ordinals, sentences, cols, windows))]


def hit_windows(windows: tuple[np.ndarray, int], hit: np.ndarray | None) -> np.ndarray | None:
    """The positions of the units whose window (`windows`: each unit's and
    how many, as `scoring.sentence_windows` packs them) holds a `hit` unit;
    None for every unit (no hit known, or every window hit). Stage 1 chose
    the document for its hits, and a window where none of the query's
    vectors found a near neighbour is seldom its best: on a long article,
    the windows that were hit are a small part of what exact MaxSim would
    decode and multiply."""
    groups, n = windows
    if hit is None or not len(hit):
        return None
    was_hit = np.zeros(n, bool)
    was_hit[groups[hit[hit < len(groups)]]] = True
    keep = np.flatnonzero(was_hit[groups])
    return None if len(keep) == len(groups) else keep


def _attend(cands: list[Candidate]) -> None:
    """Block logits to attention weights: the softmax runs over every
    candidate unit of every shard at once, as Cross-Thought attends."""
    alpha = scoring.attention(np.concatenate([c.part for c in cands], axis=1))
    bounds = np.cumsum([0] + [c.part.shape[1] for c in cands])
    for i, c in enumerate(cands):
        c.part = alpha[None, bounds[i] : bounds[i + 1]]


def _score(cands: list[Candidate], window: int | None) -> None:
    """Each candidate's score: MaxSim over the document, or over its best window."""
    if window is None:
        for c in cands:
            c.score = scoring.maxsim(c.part)
    elif cands:
        scores = scoring.windowed_maxsims(np.concatenate([c.part for c in cands], axis=1), [c.windows for c in cands])
        for c, score in zip(cands, scores.tolist()):
            c.score = score


def _second_tier(cands: list[Candidate], chosen: np.ndarray, first: int) -> None:
    """Mark the candidates past stage 1's first `first` (in `chosen`'s order) to rank after them."""
    place = {key: i for i, key in enumerate(chosen.tolist())}
    cands.sort(key=lambda c: place[c.key])
    for c in cands[first:]:
        c.tier = 1


def rows(cands: Sequence[Candidate], k: int, level: Level) -> list[Row]:
    """The best k rows of the candidates at `level`, best first. Second-tier
    candidates stay behind the first tier's, and ties fall to the shard,
    ordinal and sentence or unit: the same query ranks the same way. The
    rows of all candidates are ranked in one sort, since a query has dozens
    of candidates and each hundreds of sentences or thousands of units."""
    if level == "doc":
        return [(c.score, ci, 0) for ci, c in enumerate(cands[:k])]
    if not cands:
        return []
    if level == "sentence":
        scores = scoring.sentence_scores_of([c.part for c in cands], [c.scored_units for c in cands], [c.sentences for c in cands])
        positions = [np.arange(len(s)) for s in scores]
    else:
        positions, scores = zip(*(c.unit_rows() for c in cands))
    owner = np.repeat(np.arange(len(cands)), [len(s) for s in scores])
    score, position = np.concatenate(scores), np.concatenate(positions)
    tier, shard, ordinal = np.array([(c.tier, c.shard, c.ordinal) for c in cands], dtype=np.int64).T[:, owner]
    keep = _contenders(score, tier, k)
    score, owner, position, tier, shard, ordinal = (a[keep] for a in (score, owner, position, tier, shard, ordinal))
    best = np.lexsort((position, ordinal, shard, -score, tier))[:k]
    return list(zip(score[best].tolist(), owner[best].tolist(), position[best].tolist()))


def _contenders(score: np.ndarray, tier: np.ndarray, k: int) -> np.ndarray:
    """The rows that may be among the best k (finite scores, the first tier
    first, a tier's rows at or above its k-th best score, ties and all):
    the full sort then orders a few dozen rows, not every unit."""
    keep = []
    for t in (0, 1):
        mine = np.flatnonzero((tier == t) & np.isfinite(score))
        if k <= 0 or not len(mine):
            continue
        if len(mine) > k:
            kth = np.partition(score[mine], len(mine) - k)[len(mine) - k]
            mine = mine[score[mine] >= kth]
        keep.append(mine)
        k -= len(mine)
    return np.concatenate(keep) if keep else np.zeros(0, np.int64)
