"""Sentence -> propositions.

A proposition is a set of words of one sentence, possibly non-contiguous
("Ruffalo ... born in Kenosha"), and propositions of a sentence may share
words (the subject, usually). Words are PropSegment's: runs of letters and
digits plus every other non-space character, so gold segmentations and ours
index the same words.

Two segmenters, one interface (`segment(texts) -> [[word index tuples]]`):

- `ClauseSplitter`: the rule-based baseline; contiguous clauses cut at
  punctuation and clause-opening words.
- `PairSegmenter`: trained token-pair scoring on top of the (frozen)
  backbone. Each proposition has an anchor word (`anchors`); the model scores
  every word as an anchor and every (anchor, word) pair as "word belongs to
  the anchor's proposition". Rows are independent, so a shared subject can
  belong to several propositions and a proposition can skip an inserted
  clause.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .text import is_wordlike
from .units import Span

if TYPE_CHECKING:
    import torch

    from .backbone import Backbone

WORD = re.compile(r"[^\W_]+|\S")
Proposition = tuple[int, ...]  # sorted word indices


def words(text: str) -> np.ndarray:
    """(n, 2) char spans of the words of `text` (PropSegment's tokenisation)."""
    spans = [(m.start(), m.end()) for m in WORD.finditer(text)]
    return np.array(spans, dtype=np.int64).reshape(-1, 2)


def word_spans(text: str, word_offsets: np.ndarray, indices: Sequence[int]) -> tuple[Span, ...]:
    """Char spans of a set of words; neighbours separated by whitespace only merge."""
    spans: list[list[int]] = []
    for i in sorted(set(indices)):
        start, end = int(word_offsets[i][0]), int(word_offsets[i][1])
        if spans and not text[spans[-1][1] : start].strip():
            spans[-1][1] = end
        else:
            spans.append([start, end])
    return tuple((s, e) for s, e in spans)


def spans_text(text: str, spans: Sequence[Span]) -> str:
    """The spans' substrings joined by a space: a proposition's own text."""
    return " ".join(text[s:e] for s, e in spans)


class Segmenter(Protocol):
    name: str

    def segment(self, texts: Sequence[str]) -> list[list[Proposition]]:
        """Per text, its propositions as sorted word-index tuples (possibly empty)."""


# --------------------------------------------------------------------------
# the baseline


_CLAUSE_OPENERS = frozenset(
    """and but or while whereas although though because since which who whom whose
    where when after before until unless if so yet nor""".split()
)
_CUT_PUNCT = frozenset(",;:()[]—–")
_END_PUNCT = frozenset(".!?")


def clause_ids(text: str, offsets: np.ndarray | None = None) -> np.ndarray:
    """Per word, the index of its rule-based clause: a new clause starts after
    , ; : brackets and dashes, and at a clause-opening word. Cut punctuation
    gets -1. The baseline splits on these; the trained segmenter sees them as
    a pair feature."""
    offsets = words(text) if offsets is None else offsets
    ids = np.full(len(offsets), -1, dtype=np.int64)
    clause, open_words = 0, 0
    for i, (a, b) in enumerate(offsets):
        tok = text[a:b]
        if tok in _CUT_PUNCT:
            clause += open_words > 0
            open_words = 0
            continue
        if tok in _END_PUNCT:  # propositions rarely include the full stop
            continue
        if tok.lower() in _CLAUSE_OPENERS and open_words:
            clause += 1
            open_words = 0
        ids[i] = clause
        open_words += 1
    return ids


class ClauseSplitter:
    """Contiguous clauses: cut at , ; : brackets and dashes, and before a
    clause-opening word (and, which, who, because, ...). Pieces without a
    letter or digit are dropped; a sentence with no cut is one proposition."""

    name = "clause"

    def segment(self, texts: Sequence[str]) -> list[list[Proposition]]:
        out = []
        for text in texts:
            offsets = words(text)
            ids = clause_ids(text, offsets)
            groups: dict[int, list[int]] = {}
            for i, c in enumerate(ids.tolist()):
                if c >= 0:
                    groups.setdefault(c, []).append(i)
            out.append([tuple(g) for g in groups.values() if any(is_wordlike(text[offsets[i][0]:offsets[i][1]]) for i in g)])
        return out


# --------------------------------------------------------------------------
# the trained segmenter


def anchors(propositions: Sequence[Sequence[int]]) -> list[int]:
    """Each proposition's anchor: the last of its least-shared words.

    Shared words (a subject) cannot tell propositions apart; the words only
    one proposition has can. On PropSegment test 4% of propositions share
    their anchor with another (the last word alone: 16%)."""
    count: dict[int, int] = {}
    for p in propositions:
        for i in set(p):
            count[i] = count.get(i, 0) + 1
    out = []
    for p in propositions:
        least = min(count[i] for i in p)
        out.append(max(i for i in p if count[i] == least))
    return out


def anchor_targets(n_words: int, propositions: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(n,) 1 where a word anchors a proposition; (n, n) row i = the words of
    the proposition anchored at i (rows of non-anchors are all zero)."""
    is_anchor = np.zeros(n_words, dtype=np.float32)
    member = np.zeros((n_words, n_words), dtype=np.float32)
    for anchor, p in zip(anchors(propositions), propositions):
        is_anchor[anchor] = 1.0
        member[anchor, list(p)] = 1.0
    return is_anchor, member


def _pair_head(dim: int, hidden: int, layers: int, heads: int, dropout: float) -> "torch.nn.Module":
    import torch
    from torch import nn

    class PairHead(nn.Module):
        """Word states -> anchor logits (n,) and membership logits (n, n):
        row i scores each word for the proposition anchored at word i. A
        biaffine score over a small Transformer, plus a learned bias per
        signed word distance (propositions are mostly local)."""

        MAX_DISTANCE = 64

        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Sequential(nn.Linear(dim, hidden), nn.LayerNorm(hidden))
            layer = nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout, batch_first=True)
            self.context = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.anchor = nn.Linear(hidden, 1)
            self.left = nn.Linear(hidden, hidden)
            self.right = nn.Linear(hidden, hidden)
            self.distance = nn.Embedding(2 * self.MAX_DISTANCE + 1, 1)
            # rule-based clause distance (0 = same clause, 9 = a cut word)
            self.clauses = nn.Embedding(10, 1)
            nn.init.zeros_(self.distance.weight)
            nn.init.zeros_(self.clauses.weight)
            self.scale = hidden**-0.5

        def forward(self, states: torch.Tensor, mask: torch.Tensor, clauses: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            """states (b, n, dim), mask (b, n) True for real words, clauses (b, n) `clause_ids`."""
            h = self.context(self.proj(states), src_key_padding_mask=~mask)
            member = torch.einsum("bid,bjd->bij", self.left(h), self.right(h)) * self.scale
            pos = torch.arange(states.shape[1], device=states.device)
            dist = (pos[None, :] - pos[:, None]).clamp(-self.MAX_DISTANCE, self.MAX_DISTANCE) + self.MAX_DISTANCE
            gap = (clauses[:, :, None] - clauses[:, None, :]).abs().clamp(max=8)
            gap = gap.masked_fill((clauses[:, :, None] < 0) | (clauses[:, None, :] < 0), 9)
            member = member + self.distance(dist).squeeze(-1) + self.clauses(gap).squeeze(-1)
            return self.anchor(h).squeeze(-1), member

    return PairHead()


class PairSegmenter:
    """Anchor + word-pair scorer on a frozen backbone.

    Saved as `config.json` + `model.safetensors` (the head only); the
    backbone is named in the config and loaded, unchanged, from the hub or
    the packaged MiniLM.
    """

    name = "pairs"
    MAX_WORDS = 160  # words per backbone window; longer texts are cut in windows

    def __init__(self, backbone: "Backbone", config: dict[str, Any], head: "torch.nn.Module | None" = None) -> None:
        self.backbone = backbone
        self.config = config
        self.layers = tuple(config.get("backbone_layers") or (-1,))
        self.head = head or _pair_head(backbone.dim * len(self.layers), config["hidden"], config["layers"], config["heads"], 0.0)
        self.head.to(backbone.device).eval()
        self.threshold = float(config.get("threshold", 0.5))

    @classmethod
    def default_config(cls, n_layers: int = 6) -> dict[str, Any]:
        # backbone_layers: the word states are these hidden layers side by side;
        # the middle layers carry the syntax that proposition boundaries follow.
        return {"hidden": 256, "layers": 2, "heads": 4, "threshold": 0.5, "backbone_layers": [n_layers // 3, 2 * n_layers // 3, n_layers]}

    @classmethod
    def load(cls, path: str | Path, backbone: "Backbone | None" = None, device: str = "auto") -> "PairSegmenter":
        from .backbone import Backbone
        from .provenance import read_weights

        state, config = read_weights(path, "segmenter")
        backbone = backbone or Backbone.load(config["backbone"], device=device)
        seg = cls(backbone, config)
        seg.head.load_state_dict(state)
        seg.head.to(backbone.device).eval()
        return seg

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> None:
        from .provenance import save_weights

        state = {k: v.detach().cpu() for k, v in self.head.state_dict().items()}
        save_weights(state, path, {**self.config, **(extra or {})})

    # -- inference -----------------------------------------------------------
    def segment(self, texts: Sequence[str], progress: bool = False) -> list[list[Proposition]]:
        import torch
        from tqdm.auto import tqdm

        out: list[list[Proposition]] = []
        batch = 32
        for start in tqdm(range(0, len(texts), batch), desc="segment", unit="batch", disable=not progress, leave=False):
            chunk = list(texts[start : start + batch])
            with torch.inference_mode():
                states, offsets = word_states(self.backbone, chunk, self.MAX_WORDS, self.layers)
                out.extend(self.decode_many(list(zip(states, chunk, offsets))))
        return out

    def decode(self, wstates: "torch.Tensor", text: str, offsets: np.ndarray) -> list[Proposition]:
        """Propositions of one text from its word states."""
        return self.decode_many([(wstates, text, offsets)])[0]

    def decode_many(self, items: Sequence[tuple["torch.Tensor", str, np.ndarray]], batch: int = 64) -> list[list[Proposition]]:
        """Propositions of many texts, each given as (word states, text, word
        offsets): windows of MAX_WORDS words, padded into batches, so the
        head runs once per batch and not once per sentence."""
        import torch

        windows = []  # (item, first word, states, clause ids)
        for t, (wstates, text, offsets) in enumerate(items):
            clauses = torch.from_numpy(clause_ids(text, offsets))
            for w0 in range(0, len(offsets), self.MAX_WORDS):
                windows.append((t, w0, wstates[w0 : w0 + self.MAX_WORDS], clauses[w0 : w0 + self.MAX_WORDS]))
        # Alike lengths share a batch: padded to its longest, a batch of mixed ones is mostly padding.
        windows.sort(key=lambda w: len(w[2]))
        out: list[list[tuple[int, Proposition]]] = [[] for _ in items]
        for b0 in range(0, len(windows), batch):
            chunk = windows[b0 : b0 + batch]
            n, device = max(len(x) for _, _, x, _ in chunk), chunk[0][2].device
            x = torch.zeros(len(chunk), n, chunk[0][2].shape[-1], device=device)
            mask = torch.zeros(len(chunk), n, dtype=torch.bool, device=device)
            c = torch.full((len(chunk), n), -1, dtype=torch.long, device=device)
            for r, (_, _, states, clauses) in enumerate(chunk):
                x[r, : len(states)], mask[r, : len(states)], c[r, : len(states)] = states, True, clauses
            with torch.inference_mode():
                anchor, member = (torch.sigmoid(v).float().cpu().numpy() for v in self.head(x, mask, c))
            for r, (t, w0, states, _) in enumerate(chunk):
                k = len(states)
                for i in np.flatnonzero(anchor[r, :k] >= self.threshold):
                    words_in = set(np.flatnonzero(member[r, i, :k] >= self.threshold).tolist()) | {int(i)}
                    out[t].append((w0 + int(i), tuple(w0 + j for j in sorted(words_in))))
        # In the text's order of anchors, whatever order the batches ran in.
        return [list(dict.fromkeys(p for _, p in sorted(props))) for props in out]


def word_states(
    backbone: "Backbone", texts: Sequence[str], max_words: int, layers: Sequence[int] | None = None
) -> tuple[list["torch.Tensor"], list[np.ndarray]]:
    """Per text, one state per word (mean of its subword states) and the words'
    char spans. Texts are encoded in windows of `max_words` words so that no
    word falls off the end of the backbone's window."""
    import torch

    from .base import hidden_states, span_pool

    offsets = [words(t) for t in texts]
    pieces: list[tuple[int, int, int]] = []  # (text, first word, last word)
    for t, offs in enumerate(offsets):
        for w0 in range(0, max(len(offs), 1), max_words):
            pieces.append((t, w0, min(w0 + max_words, len(offs))))
    piece_texts = [texts[t][offsets[t][w0][0] : offsets[t][w1 - 1][1]] if w1 > w0 else "" for t, w0, w1 in pieces]
    enc = backbone.tokenizer(
        piece_texts, padding=True, truncation=True, max_length=backbone.max_length,
        return_offsets_mapping=True, return_special_tokens_mask=True, return_tensors="pt",
    )
    sub_offsets = enc.pop("offset_mapping").numpy()
    special = enc.pop("special_tokens_mask").numpy().astype(bool)
    hidden = hidden_states(backbone, enc, layers).float()
    out = [torch.zeros(len(o), hidden.shape[-1], device=hidden.device) for o in offsets]
    for p, (t, w0, w1) in enumerate(pieces):
        if w1 == w0:
            continue
        real = ~special[p] & (enc["attention_mask"][p].numpy() > 0)
        base = offsets[t][w0][0]
        out[t][w0:w1] = span_pool(hidden[p], sub_offsets[p] + base, real, [[(int(a), int(b))] for a, b in offsets[t][w0:w1]])
    return out, offsets


# --------------------------------------------------------------------------
# the measure


def jaccard_matches(pred: Sequence[Sequence[int]], gold: Sequence[Sequence[int]], theta: float) -> int:
    """Size of the largest one-to-one matching of predicted to gold propositions
    in which matched pairs have word Jaccard >= theta (a duplicate prediction
    cannot match the same gold proposition twice)."""
    if not pred or not gold:
        return 0
    from scipy.optimize import linear_sum_assignment

    ps, gs = [set(p) for p in pred], [set(g) for g in gold]
    ok = np.array([[len(p & g) >= theta * len(p | g) for g in gs] for p in ps], dtype=np.float64)
    rows, cols = linear_sum_assignment(-ok)
    return int(ok[rows, cols].sum())


def segmentation_prf(
    preds: Sequence[Sequence[Sequence[int]]], golds: Sequence[Sequence[Sequence[int]]], theta: float
) -> dict[str, float]:
    """Micro precision / recall / F1 over sentences (PropSegment's Jaccard match)."""
    matched = sum(jaccard_matches(p, g, theta) for p, g in zip(preds, golds))
    n_pred = sum(map(len, preds))
    n_gold = sum(map(len, golds))
    precision = matched / n_pred if n_pred else 0.0
    recall = matched / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}
