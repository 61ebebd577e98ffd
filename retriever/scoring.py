"""Pure scoring functions: exact late-interaction scores and their aggregation.

Every score here is one formula, sum_i max_{j in G} <q_i, d_j>, for a group G
of a document's vectors: the whole document (MaxSim), one sentence, or one
unit. With a single query vector it is simply the best unit in the group.
Cross-Thought first turns its block inner products into attention weights
(`attention`); the groups then take the best unit's weight the same way.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

# torch multiplies stage 2's blocks; it is imported where they are, so that
# the commands that only read an index's records (info, verify, delete) and
# `--help` do not pay for it.


def similarities(queries: np.ndarray, parts: Sequence[np.ndarray], block_rows: int = 4096) -> np.ndarray:
    """(m, n) inner products of the queries with the rows of `parts` laid end
    to end (n rows in all), in float32.

    Stage 2 hands in a view of the memory-mapped float16 store per
    candidate document. They are widened into one reused float32 block of
    `block_rows` rows and multiplied a block at a time, by torch: torch
    widens float16 and multiplies faster than numpy and OpenBLAS, and one
    block is reused where widening all candidates at once would fault in a
    fresh array as large as all of their vectors, which costs more than
    the product. The result is exactly numpy's float32 product.
    """
    import torch

    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    dim = q.shape[1]
    n = sum(len(p) for p in parts)
    out = torch.empty((len(q), n), dtype=torch.float32)
    block = torch.empty((min(block_rows, n), dim), dtype=torch.float32)
    done = filled = 0  # columns written to `out`; rows waiting in `block`
    for part in parts:
        # DLPack carries the memory map's read-only flag, where from_numpy would warn.
        rows = torch.from_dlpack(part) if len(part) else None
        at = 0
        while rows is not None and at < len(part):
            take = min(len(part) - at, len(block) - filled)
            block[filled : filled + take].copy_(rows[at : at + take])
            filled, at = filled + take, at + take
            if filled == len(block):
                torch.mm(q, block.T, out=out[:, done : done + filled])
                done, filled = done + filled, 0
    if filled:
        torch.mm(q, block[:filled].T, out=out[:, done : done + filled])
    return out.numpy()


DECODED_ROWS = 1024  # rows decoded and multiplied at a time: a block of MiniLM's is 1.5 MB, within a core's cache


def decoded_similarities(queries: np.ndarray, decode: Callable[[np.ndarray], "np.ndarray | torch.Tensor"], ids: np.ndarray,
                         block_rows: int = DECODED_ROWS) -> np.ndarray:
    """(m, n) inner products of the queries with the vectors `decode` makes
    of the n vector `ids` (a store that keeps codes, not vectors), in float32.

    The rows are decoded a block at a time and each block is multiplied as
    soon as it is decoded, while it is still in the CPU's cache: decoding
    every candidate first writes an array as large as all their vectors to
    memory and reads it back for the product, which costs more than either.
    No block is shorter than half of `block_rows` unless all of `ids` are
    (a short tail joins the block before it): BLAS takes another kernel for
    a product over a few rows, and a document's score would then depend on
    where a block happened to end. A decoder on a device (a GPU) returns
    torch tensors there: each block is multiplied there and only the
    product comes back. A decoder with `products(queries, ids, out)`
    (`indexer.decoding.CodesReader`) makes a block's products itself,
    without decoding its rows whole.
    """
    import torch

    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    out = torch.empty((len(q), len(ids)), dtype=torch.float32)
    bounds = list(range(0, len(ids), block_rows)) + [len(ids)]
    if len(bounds) > 2 and bounds[-1] - bounds[-2] < block_rows // 2:
        del bounds[-2]
    on_device: dict[torch.device, torch.Tensor] = {}
    products = getattr(decode, "products", None)
    for a, b in zip(bounds[:-1], bounds[1:]):
        if products is not None:
            products(q, ids[a:b], out[:, a:b])
            continue
        rows = decode(ids[a:b])
        if isinstance(rows, torch.Tensor):
            qd = on_device.setdefault(rows.device, q.to(rows.device))
            out[:, a:b] = torch.mm(qd, rows.T).cpu()
        else:
            torch.mm(q, torch.from_numpy(rows).T, out=out[:, a:b])
    return out.numpy()


def block_logits(query: np.ndarray, vectors: np.ndarray, blocks: int) -> np.ndarray:
    """(blocks, n) inner products of one query vector with n vectors, block by
    block (Cross-Thought: a block is one slot and head, its product a logit)."""
    q = query.astype(np.float32, copy=False).reshape(blocks, -1)
    v = vectors.astype(np.float32, copy=False).reshape(len(vectors), blocks, -1)
    return np.einsum("be,nbe->bn", q, v)


def attention(logits: np.ndarray) -> np.ndarray:
    """Cross-Thought's alpha: per block, the softmax of the (blocks, n) logits
    over the n candidates, then the mean over blocks: (n,)."""
    if logits.shape[1] == 0:
        return np.zeros(0, np.float32)
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (weights / weights.sum(axis=1, keepdims=True)).mean(axis=0).astype(np.float32)


def maxsim(sim: np.ndarray) -> float:
    """Sum over query vectors of the best document vector (ColBERT's MaxSim)."""
    if sim.shape[1] == 0:
        return float("-inf")
    return float(sim.max(axis=1).sum())


def sentence_windows(unit_sentences: np.ndarray, window: int) -> tuple[np.ndarray, int]:
    """Each unit's window and the number of windows: a document's sentences
    packed in order into windows of at most `window` units (a sentence with
    more units is a window of its own): the encoder's packing of passages,
    counted in stored vectors instead of tokens, since the store keeps no
    passage boundaries. Units are grouped by the sentence they start in."""
    return sentence_windows_of([unit_sentences], window)[0]


def sentence_windows_of(unit_sentences: Sequence[np.ndarray], window: int) -> list[tuple[np.ndarray, int]]:
    """`sentence_windows` of several documents, computed together: stage 2
    asks it of dozens of candidates a query, and a few numpy calls over all
    of their units cost less than a dozen a document. The documents'
    sentences are numbered one after another (a sentence of a later
    document always after those of an earlier one), and a window never
    runs past its document's last sentence."""
    sizes = np.array([len(us) for us in unit_sentences], dtype=np.int64)
    doc_of_unit = np.repeat(np.arange(len(sizes)), sizes)
    first = np.concatenate([us[:, 0] for us in unit_sentences]).astype(np.int64) if len(sizes) else np.zeros(0, np.int64)
    # Each document's sentences after the last one's: sentence keys increase across documents.
    spans = np.array([int(us[:, 0].max()) + 1 if len(us) else 0 for us in unit_sentences], dtype=np.int64)
    first += np.repeat(np.cumsum(spans) - spans, sizes)
    if len(first) and (first[1:] >= first[:-1]).all():
        # Units in sentence order, as the encoders emit them: runs, not a sort.
        starts = run_starts(first)
        counts = np.diff(np.append(starts, len(first)))
        doc_of_group, inverse = doc_of_unit[starts], None
    else:
        _, start_of_key, inverse, counts = np.unique(first, return_index=True, return_inverse=True, return_counts=True)
        doc_of_group = doc_of_unit[start_of_key]
    # A window from sentence i runs to the last sentence of its document whose
    # units still fit (at least i itself): one search for every i, then a jump
    # a window, so a long article costs its windows, not its sentences.
    used = np.concatenate(([0], np.cumsum(counts)))
    end = np.searchsorted(doc_of_group, np.arange(len(sizes)), side="right")[doc_of_group]  # past each group's document
    past = np.minimum(np.maximum(np.searchsorted(used, used[:-1] + window, side="right") - 1, np.arange(1, len(counts) + 1)), end)
    jumps = past.tolist()
    bounds = [0]
    while bounds[-1] < len(jumps):
        bounds.append(jumps[bounds[-1]])
    of_group = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    of_unit = np.repeat(of_group, counts) if inverse is None else of_group[inverse.reshape(-1)]
    # Windows numbered within their document.
    per_doc = np.bincount(doc_of_group[bounds[:-1]], minlength=len(sizes)) if len(bounds) > 1 else np.zeros(len(sizes), np.int64)
    of_unit -= np.repeat(np.cumsum(per_doc) - per_doc, sizes)
    return [(g, int(n)) for g, n in zip(np.split(of_unit, np.cumsum(sizes)[:-1]), per_doc)]


def window_maxsim(sim: np.ndarray, unit_sentences: np.ndarray, window: int) -> float:
    """MaxSim of the document's best window of consecutive sentences
    (`sentence_windows`). MaxSim over a whole document grows with its
    length, since every query vector takes its best of all the document's
    vectors; a window bounds that, as a passage does for ColBERT."""
    return float(window_maxsims(sim, [unit_sentences], window)[0])


def best_window(sim: np.ndarray, unit_sentences: np.ndarray, window: int | None) -> tuple[int, int] | None:
    """The first and last sentence of the document's best window
    (`sentence_windows`; a one-vector query's: the window of its best unit),
    or None where no unit covers a sentence; with no `window`, the sentences
    its units cover."""
    if window:
        return best_group(sim, unit_sentences, *sentence_windows(unit_sentences, window))
    return _covered_span(unit_sentences, np.ones(len(unit_sentences), bool))


def best_group(sim: np.ndarray, unit_sentences: np.ndarray, groups: np.ndarray, n_groups: int) -> tuple[int, int] | None:
    """The first and last sentence covered by the units of the best group
    (`groups[j]`: column j's), scored as `window_maxsims` scores windows,
    title units and all; None where it covers none."""
    if not len(groups):
        return None
    return _covered_span(unit_sentences, groups == int(np.argmax(group_maxsim(sim, groups, n_groups))))


def _covered_span(unit_sentences: np.ndarray, members: np.ndarray) -> tuple[int, int] | None:
    """The first and last sentence the member units cover (title units cover none)."""
    members = members & (unit_sentences[:, 1] >= unit_sentences[:, 0])
    if not members.any():
        return None
    return int(unit_sentences[members, 0].min()), int(unit_sentences[members, 1].max())


def window_maxsims(sim: np.ndarray, unit_sentences: Sequence[np.ndarray], window: int) -> np.ndarray:
    """`window_maxsim` of each of several documents whose columns lie side by
    side in `sim`, in order: (documents,), -inf for a document without
    units. Every window of every document is one group of a single
    `group_maxsim`: stage 2 scores its candidates in one call, since a
    document's windows are few and small, and one call per document would
    spend more in numpy's per-call overhead than in the arithmetic."""
    return windowed_maxsims(sim, sentence_windows_of(unit_sentences, window))


def windowed_maxsims(sim: np.ndarray, windows: Sequence[tuple[np.ndarray, int]]) -> np.ndarray:
    """`window_maxsims` from each document's windows as given: the window
    of each of its columns in `sim`, and how many windows it has (a window
    without a column scores -inf)."""
    groups, counts, offset = [], [], 0
    for g, n in windows:
        groups.append(g + offset)
        counts.append(n)
        offset += n
    out = np.full(len(counts), -np.inf, dtype=np.float32)
    if not offset:
        return out
    best = group_maxsim(sim, np.concatenate(groups), offset)
    counts_arr = np.asarray(counts)
    has = counts_arr > 0
    # A document's windows are consecutive groups: its best is one reduceat segment.
    out[has] = np.maximum.reduceat(best, (np.cumsum(counts_arr) - counts_arr)[has])
    return out


def group_maxsim(sim: np.ndarray, groups: np.ndarray, n_groups: int) -> np.ndarray:
    """MaxSim restricted to each group of columns: (n_groups,) scores.

    `groups[j]` is the group of column j; groups with no column score -inf.
    """
    best = np.full((sim.shape[0], n_groups), -np.inf, dtype=np.float32)
    if sim.shape[1]:
        if (groups[1:] >= groups[:-1]).all():  # in order already (windows, sentences): no copy of `sim`
            sorted_groups, columns = groups, sim
        else:
            order = np.argsort(groups, kind="stable")
            sorted_groups, columns = groups[order], sim[:, order]
        starts = run_starts(sorted_groups)
        best[:, sorted_groups[starts]] = np.maximum.reduceat(columns, starts, axis=1)
    return best.sum(axis=0)


def run_starts(values: np.ndarray) -> np.ndarray:
    """Where each run of equal neighbours in `values` begins (a sorted
    array's distinct values), by index: stage 2 asks it of every candidate,
    so it builds no temporary index expression (`np.r_` costs more than the
    comparison here)."""
    change = np.empty(len(values), bool)
    if len(values):
        change[0] = True
        np.not_equal(values[1:], values[:-1], out=change[1:])
    return np.flatnonzero(change)


def sentence_columns(unit_sentences: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expand units over the sentences they cover: (column index, sentence) pairs.

    A passage unit covering sentences 3..5 counts for each of them, so a
    sentence's score is the best unit that contains it.
    """
    first, last = unit_sentences[:, 0], unit_sentences[:, 1]
    spans = last - first + 1
    columns = np.repeat(np.arange(len(first)), spans)
    offsets = np.arange(len(columns)) - np.repeat(np.cumsum(spans) - spans, spans)
    return columns, np.repeat(first, spans) + offsets


def sentence_scores(sim: np.ndarray, unit_sentences: np.ndarray, n_sentences: int) -> np.ndarray:
    columns, sentences = sentence_columns(unit_sentences)
    return group_maxsim(sim[:, columns], sentences, n_sentences)


def sentence_scores_of(sims: Sequence[np.ndarray], unit_sentences: Sequence[np.ndarray], n_sentences: Sequence[int]) -> list[np.ndarray]:
    """`sentence_scores` of several documents, in one `group_maxsim` over
    their columns side by side, each document's sentences numbered after the
    last document's: sentence-level aggregation scores every candidate's
    sentences, and one call per candidate spends more in numpy's per-call
    overhead than in the arithmetic (as `window_maxsims`)."""
    if not len(sims):
        return []
    first = np.cumsum(n_sentences) - n_sentences  # each document's first sentence in the joint numbering
    shift = np.repeat(first, [len(us) for us in unit_sentences])
    joint = sentence_scores(np.concatenate(sims, axis=1), np.concatenate(unit_sentences) + shift[:, None], int(np.sum(n_sentences)))
    return np.split(joint, first[1:])


def sentence_range_scores(sim: np.ndarray, unit_sentences: np.ndarray, first: int, last: int) -> np.ndarray:
    """`sentence_scores` of sentences first..last alone, (last - first + 1,),
    from the units that touch them, cut to the range: a hit's passage needs
    its own sentences' scores, and a long document has hundreds more."""
    touch = (unit_sentences[:, 0] <= last) & (unit_sentences[:, 1] >= first)
    inside = np.minimum(np.maximum(unit_sentences[touch], first), last) - first
    return sentence_scores(sim[:, touch], inside, last - first + 1)


def unit_scores(sim: np.ndarray) -> np.ndarray:
    """A unit's score: its best match over the query vectors."""
    return sim.max(axis=0) if sim.shape[0] else np.zeros(sim.shape[1], np.float32)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first, ties by index: the k
    asked for are the first k of any longer answer (argpartition alone
    picks tied scores at the cut arbitrarily)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < len(scores):
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]  # the k-th largest
        above = np.flatnonzero(scores > kth)
        part = np.concatenate([above, np.flatnonzero(scores == kth)[: k - len(above)]])
    else:
        part = np.arange(len(scores))
    return part[np.lexsort((part, -scores[part]))]


def approximate_doc_scores(
    hit_scores: np.ndarray, hit_docs: np.ndarray, n_query_vectors: int, query_of_hit: np.ndarray, floor: np.ndarray,
    hit_windows: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Stage-1 MaxSim estimate per candidate document, from ANN hits only.

    For query vector i and document d the estimate is the best hit of i in d;
    where i found nothing in d it is imputed with i's weakest retrieved score
    (`floor[i]`), an upper bound on what was missed (as XTR imputes). With
    `hit_windows` (the window of its document each hit fell in) the estimate
    is made per window and a document takes its best window's, as stage 2
    scores it. Returns (candidate doc keys, estimated scores).
    """
    if hit_windows is None:
        docs, inverse = np.unique(hit_docs, return_inverse=True)
        return docs, _imputed_sums(hit_scores, query_of_hit, inverse.reshape(-1), floor, len(docs))
    windows, inverse = np.unique(np.stack([hit_docs, hit_windows], axis=1), axis=0, return_inverse=True)
    window_scores = _imputed_sums(hit_scores, query_of_hit, inverse.reshape(-1), floor, len(windows))
    docs, doc_of_window = np.unique(windows[:, 0], return_inverse=True)
    best = np.full(len(docs), -np.inf, np.float32)
    np.maximum.at(best, doc_of_window.reshape(-1), window_scores)
    return docs, best


def _imputed_sums(hit_scores: np.ndarray, query_of_hit: np.ndarray, group_of_hit: np.ndarray, floor: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group, the sum over query vectors of each one's best hit in it (its floor where it has none)."""
    best = np.repeat(floor[:, None], n_groups, axis=1).astype(np.float32)
    np.maximum.at(best, (query_of_hit, group_of_hit), hit_scores)
    return best.sum(axis=0)
