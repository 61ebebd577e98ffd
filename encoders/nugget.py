"""`nugget`: k = ceil(n * r) vectors per passage, each standing for the text
since the previous nugget through its own token (Qin & Van Durme, 2023: each
nugget mostly encodes the segment that ends at it).

Two ways to choose them:

- Frozen (the default, `weights="frozen"`): the backbone's own last-layer
  states, untouched. The n tokens `tokens` would keep are cut into k
  contiguous runs of near-equal length, cuts moved onto word starts
  (`even_cuts`), and a nugget is the mean of its run. Nothing trained can
  move the geometry MaxSim relies on: a run's mean stays in the space the
  query's token vectors search.
- Trained (`weights="lora"`, "ae" or a directory): the paper's model. A
  scorer FFN reads the hidden states after layer l and keeps the k
  best-scoring tokens (n counts every real token, specials included;
  padding never). Two type embeddings (nugget / other) are added to the
  states at layer l, so the upper layers know which tokens were chosen
  (nugget feedback). The chosen tokens' last-layer states, in position
  order, through W^V are the vectors. TopK passes no gradient, so in
  training the scores s are added to every cross-attention logit of a small
  decoder that reconstructs the text from the nuggets (`NuggetDecoder`); the
  scorer learns from how much the decoder attends to what it chose. Layers
  below l stay frozen (l = 0 collapses in the paper); the ones above are
  adapted with LoRA.

Queries keep every token by default (`query="tokens"`); `query="nuggets"`
compresses them as documents are.

The trained model lives in `nugget_model`, its decoder in `nugget_decoder`;
both are re-exported here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import weights_path
from .backbone import Backbone
from .base import SentenceLocator, TokenStates, _n_specials, focus_mask, l2_normalize
from .nugget_decoder import DecoderBlock, NuggetDecoder
from .nugget_model import NuggetModel, Nuggets, load_nugget, n_nuggets, nugget_weights, select
from .provenance import read_config, verified_sha256
from .tokens import TokensEncoder
from .units import Encoded, Kind, Passage, Unit

__all__ = [
    "DEFAULT_RATIO", "DecoderBlock", "NuggetDecoder", "NuggetEncoder", "NuggetModel", "Nuggets", "QUERY_MODES", "SELECTORS",
    "SNAP_REACH", "even_cuts", "load_nugget", "n_nuggets", "nugget_spans", "nugget_weights", "select", "word_starts",
]

QUERY_MODES = ("nuggets", "tokens")
# Frozen nuggets: "runs" pools each run of kept tokens; "comma" is the
# paper's chunking selector (the last comma or period of each of k equal
# chunks, else its last token), a baseline for any learned choice.
SELECTORS = ("runs", "comma")
DEFAULT_RATIO = 0.25
# How far (in tokens) an even cut may move to land on a word start.
SNAP_REACH = 1


def word_starts(offsets: np.ndarray) -> np.ndarray:
    """(n,) bool: the token begins a whitespace-delimited word (char offsets
    (n, 2) of one passage's tokens). Any tokenizer: a token glued to the one
    before it ("##s", "'t", "-of") continues that word."""
    starts = np.ones(len(offsets), dtype=bool)
    after_text = offsets[:-1, 1] > offsets[:-1, 0]  # specials and title tokens have empty spans
    starts[1:] = (offsets[1:, 0] > offsets[:-1, 1]) | ~after_text
    return starts


def even_cuts(starts: np.ndarray, k: int, reach: int = SNAP_REACH) -> list[int]:
    """Cut points 0 = c_0 < c_1 < ... < c_k = n splitting n tokens into
    min(k, n) runs of near-equal length: each even cut round(j n / k) moves
    to the nearest word start within `reach` tokens (the earlier on a tie),
    so a nugget ends where a word does whenever one is close."""
    n = len(starts)
    k = min(k, n)
    moves = sorted(range(-reach, reach + 1), key=lambda d: (abs(d), d))  # nearest first, earlier on a tie
    cuts = [0]
    for j in range(1, k):
        even, last = round(j * n / k), n - (k - j)  # leave a token for each run still to come
        cuts.append(next((p for d in moves if cuts[-1] < (p := even + d) <= last and starts[p]), min(max(even, cuts[-1] + 1), last)))
    return cuts + [n]


class NuggetEncoder(TokensEncoder):
    """Nuggets over the frozen backbone (default, `weights="frozen"`) or from
    a trained nugget model (`weights="lora"`/"ae"/a directory: the paper's
    scorer, feedback, W^V and adapters).

    Frozen nuggets are the last token of each of k = ceil(n r) contiguous,
    near-equal runs of a passage's n kept tokens (the ones `tokens` would
    store), cut at word starts when one is within a token. A nugget's vector
    is the mean of its run's normalised states and its unit the run's text:
    the text since the previous nugget through the nugget itself, as the
    paper reads a nugget. The states are the backbone's own, so nuggets keep
    the geometry MaxSim uses and share `tokens`' forward pass.
    """

    name = "nugget"
    kind = Kind.TOKEN

    def __init__(
        self, backbone: Backbone, batch_size: int = 32, weights: str = "frozen", ratio: float | str | None = None,
        query: str | None = None, window: int | str | None = None, weights_sha256: str | None = None,
        select: str = "runs",
    ) -> None:
        super().__init__(backbone, batch_size)
        if select not in SELECTORS:
            raise ValueError(f"nugget select must be one of {', '.join(SELECTORS)}, got {select!r}")
        self.select = select
        self.query = query or "tokens"
        if self.query not in QUERY_MODES:
            raise ValueError(f"nugget query mode must be one of {', '.join(QUERY_MODES)}, got {query!r}")
        self.weights_name = weights
        self.nugget: NuggetModel | None = None
        if select != "runs" and weights != "frozen":
            raise ValueError("nugget select chooses among frozen states: use it with weights=frozen")
        if weights == "frozen":
            self.path, self.weights_sha256, trained_ratio, self.window = None, None, DEFAULT_RATIO, backbone.max_length
        else:
            # "default" is what indexes built before frozen nuggets recorded.
            self.path = weights_path({"lora": "nugget", "default": "nugget", "ae": "nugget-ae"}.get(weights, weights))
            backbone.check_trained_for(read_config(self.path, "nugget weights"), self.path, "nugget weights", "nugget")
            self.nugget, _, nugget_config = load_nugget(self.path, backbone.model)
            self.weights_sha256 = verified_sha256(self.path, weights_sha256)
            self.nugget.to(backbone.device, backbone.dtype)
            trained_ratio = nugget_config["ratio"]
            # Passages as long as the ones trained on: k grows with n, but the
            # scorer has only seen passages this long.
            self.window = int(window or min(backbone.max_length, nugget_config.get("max_length", 128)))
        self.ratio = float(ratio if ratio is not None else trained_ratio)
        if not 0 < self.ratio <= 1:
            raise ValueError(f"nugget ratio must be in (0, 1], got {self.ratio}")

    @property
    def max_length(self) -> int:
        return self.window

    @property
    def cacheable(self) -> bool:
        return self.nugget is None

    @property
    def pooled_tokens(self) -> float:
        # Frozen runs are means of about 1/r states; a comma chunk or a
        # trained nugget is one token's state.
        return 1 / self.ratio if self.nugget is None and self.select == "runs" else 1.0

    @property
    def passage_units(self) -> int | None:
        # k = ceil(n r) nuggets of a passage of n tokens; comma chunks have
        # no bound but the passage's tokens, so they keep whole documents.
        if self.select == "comma" and self.nugget is None:
            return None
        return n_nuggets([self.max_length - _n_specials(self.backbone)], self.ratio)[0]

    def options(self) -> dict[str, Any]:
        if self.nugget is None:
            return {"weights": "frozen", "ratio": self.ratio, "query": self.query} | ({"select": self.select} if self.select != "runs" else {})
        return {
            "weights": self.weights_name, "ratio": self.ratio, "query": self.query, "window": self.window,
            "weights_sha256": self.weights_sha256,
        }

    def run(self, enc: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        if self.nugget is None:
            return super().run(enc)
        inputs = {k: v.to(self.backbone.device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        out = self.nugget(**inputs, ratio=self.ratio)
        return out.projected, out.chosen

    # -- frozen nuggets ------------------------------------------------------
    def groups(self, idx: np.ndarray, tokens: TokenStates) -> list[list[int]]:
        """The runs of kept tokens (positions `idx`) that become nuggets."""
        cuts = even_cuts(word_starts(tokens.offsets)[idx], n_nuggets([len(idx)], self.ratio)[0])
        return [idx[a:b].tolist() for a, b in zip(cuts, cuts[1:])]

    def _pool_comma(self, passage: Passage, tokens: TokenStates) -> Encoded:
        """The paper's chunking selector over the passage's text tokens,
        punctuation included: one state per chunk, standing for the chunk.
        k counts the tokens `runs` counts, so both spend the same budget."""
        idx = np.flatnonzero(~tokens.special & focus_mask(passage.doc, tokens.offsets + passage.start))
        kept = len(self.kept(passage, tokens, query=False))
        if len(idx) == 0 or kept == 0:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        k = min(n_nuggets([kept], self.ratio)[0], len(idx))
        cuts = [round(j * len(idx) / k) for j in range(k + 1)]
        chunks = [idx[a:b] for a, b in zip(cuts, cuts[1:])]
        chosen = []
        for chunk in chunks:
            marks = [i for i in chunk if passage.text[tokens.offsets[i, 0]:tokens.offsets[i, 1]] in (",", ".")]
            chosen.append(marks[-1] if marks else chunk[-1])
        return Encoded(l2_normalize(tokens.states[chosen]), _run_units(passage, tokens, chunks))

    def emit(self, passage: Passage, tokens: TokenStates, groups: list[list[int]]) -> Encoded:
        # Each token's direction weighs the same in its nugget, as it would
        # in MaxSim; the unit is the run's whole text, punctuation included.
        states = torch.nn.functional.normalize(tokens.states.float(), dim=-1)
        vectors = l2_normalize(torch.stack([states[g].mean(0) for g in groups]))
        return Encoded(vectors, _run_units(passage, tokens, groups))

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        if self.nugget is not None:
            return self._pool_trained(passage, tokens, query=query)
        if self.select == "comma" and not (query and self.query == "tokens"):
            return self._pool_comma(passage, tokens)
        if query and self.query == "nuggets":
            idx = self.kept(passage, tokens, query=True)
            return self.emit(passage, tokens, self.groups(idx, tokens)) if len(idx) else Encoded(np.zeros((0, self.dim), np.float32), [])
        return super().pool(passage, tokens, query=query)

    # -- trained nuggets -----------------------------------------------------
    def _pool_trained(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        doc = passage.doc
        assert tokens.selected is not None
        words = np.flatnonzero(~tokens.special)
        # A query with no token of its own ("") falls back to its nuggets.
        if query and self.query == "tokens" and len(words):
            idx = words
            spans = [(int(a), int(b)) for a, b in tokens.offsets[idx]]
        else:
            idx = np.flatnonzero(tokens.selected)
            spans = nugget_spans(tokens.offsets, tokens.special, idx, len(passage.text))
        char = np.array([(a + passage.start, b + passage.start) for a, b in spans], dtype=np.int64).reshape(-1, 2)
        keep = focus_mask(doc, char) if len(char) else np.zeros(0, bool)
        if not keep.any():
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        locate = SentenceLocator(doc)
        units = [locate.unit([(int(a), int(b))], Kind.TOKEN) for (a, b), k in zip(char, keep) if k]
        return Encoded(l2_normalize(tokens.states[idx[keep]]), units)


def _run_units(passage: Passage, tokens: TokenStates, runs: Sequence[Sequence[int]]) -> list[Unit]:
    """One unit per run of token positions: the text from its first token's
    start to its last token's end, whatever lies between."""
    locate = SentenceLocator(passage.doc)
    return [locate.unit([(int(tokens.offsets[r[0], 0]) + passage.start, int(tokens.offsets[r[-1], 1]) + passage.start)], Kind.TOKEN)
            for r in runs]


def nugget_spans(offsets: np.ndarray, special: np.ndarray, chosen: np.ndarray, length: int) -> list[tuple[int, int]]:
    """Char spans (passage-relative) that the chosen tokens stand for: the text
    since the previous nugget through the token itself. A special token at
    the start stands for the whole passage; one at the end for what is left."""
    spans, previous = [], 0
    for i in chosen:
        if special[i] or offsets[i, 1] <= offsets[i, 0]:
            span = (0, length) if i == 0 or previous >= length else (previous, length)
        else:
            span = (previous, int(offsets[i, 1]))
            previous = int(offsets[i, 1])
        spans.append(span)
    return spans
