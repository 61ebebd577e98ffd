"""`proposition`: one small vector per proposition (the sub-sentence encoder).

Each sentence is encoded once, alone, with full attention. The trained
segmenter (on the frozen backbone, in batches before encoding) finds its
propositions, and each proposition's vector is the mean of the token
states under its mask, through an MLP (Linear, ReLU, Linear) to 64 dims,
L2-normalised. A document that names its propositions itself (`focus`, as
PropSegment's corpus does) is encoded under that mask and not re-segmented.

Queries are one proposition by default: the whole query text under one mask.
A question is one information need; split into parts, each part would match
passages that answer only half of it (`query_segments=True` gives MaxSim over
the segmented parts, for long multi-fact queries).
"""
from __future__ import annotations

from pathlib import Path
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from . import weights_path
from .adapters import adapter_stages, merged_stages
from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, _n_specials, cut_passages, span_pool
from .provenance import read_weights, verified_sha256
from .segment import PairSegmenter, Segmenter, word_spans, words
from .text import is_wordlike
from .units import Document, Encoded, Kind, Passage, Span


class PropositionHead(nn.Module):
    """Mask-pooled token states -> MLP -> L2-normalised `out_dim` vector.

    The token states are several backbone layers side by side (config
    `layers`): the last layer alone has mixed the whole sentence into every
    token, the embedding layer has not mixed it at all, and the head learns
    how much of each a proposition needs."""

    def __init__(self, dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.mlp(pooled), dim=-1)


def load_weights(path: str | Path, model: nn.Module) -> tuple[PropositionHead, nn.Module, dict[str, Any]]:
    """The head, the backbone model to use (adapted and merged when the
    weights carry LoRA adapters, else `model` itself), and the config."""
    state, config = read_weights(path, "proposition head", "train one with `propdex train proposition`")
    head = PropositionHead(config["dim"], config["hidden"], config["out_dim"])
    head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    if stages := adapter_stages(config):
        model = merged_stages(model, stages, state, path)
    return head.eval(), model.eval(), config


class PropositionEncoder(Encoder):
    name = "proposition"
    kind = Kind.PROPOSITION

    def __init__(
        self, backbone: Backbone, batch_size: int = 64, head: str = "default", segmenter: str = "default",
        query_segments: bool = False, head_sha256: str | None = None,
    ) -> None:
        super().__init__(backbone, batch_size)
        self.head_path = weights_path("proposition" if head == "default" else head)
        self.segmenter_path = weights_path("segmenter" if segmenter == "default" else segmenter)
        self.head_name, self.segmenter_name = head, segmenter
        self.head, self.model, self.head_config = load_weights(self.head_path, backbone.model)
        self.head.to(backbone.device)
        self.model.to(backbone.device)
        self.adapted = self.model is not backbone.model
        if self.head_config["backbone"] != backbone.name and head == "default":
            raise ValueError(f"the packaged proposition head was trained on {self.head_config['backbone']}, not {backbone.name}")
        self.head_sha256 = verified_sha256(self.head_path, head_sha256)
        self.layers = tuple(self.head_config.get("layers", (-1,)))
        self.query_segments = query_segments
        self._segmenter: Segmenter | None = None
        self._segments: dict[str, list] = {}

    @property
    def dim(self) -> int:
        return int(self.head_config["out_dim"])

    def options(self) -> dict[str, Any]:
        return {
            "head": self.head_name, "segmenter": self.segmenter_name,
            "query_segments": self.query_segments, "head_sha256": self.head_sha256,
        }

    @property
    def segmenter(self) -> PairSegmenter:
        if self._segmenter is None:
            self._segmenter = PairSegmenter.load(self.segmenter_path, backbone=self.backbone)
        return self._segmenter  # type: ignore[return-value]

    def encode(self, passages: Sequence[Passage], *, query: bool = False, progress: bool = False) -> list[Encoded]:
        # Segment the passages that need it up front, in batches: the
        # segmenter reads the frozen backbone, the encoder its adapted copy.
        need = [p.text for p in passages if not p.doc.focus and (self.query_segments or not query)]
        self._segments = dict(zip(need, self.segmenter.segment(need, progress=progress))) if need else {}
        try:
            return super().encode(passages, query=query, progress=progress)
        finally:
            self._segments = {}

    def passages(self, doc: Document) -> list[Passage]:
        """One sentence per passage: a sentence is encoded alone, as it was in training."""
        return cut_passages(doc, self.backbone, window=self.max_length - _n_specials(self.backbone) - self.title_tokens(doc), pack=False)

    def propositions(self, passage: Passage, tokens: TokenStates, *, query: bool) -> list[tuple[Span, ...]]:
        """Char spans (passage-relative) of each proposition to encode."""
        doc = passage.doc
        if doc.focus:
            return [tuple((max(a, passage.start) - passage.start, min(b, passage.end) - passage.start)
                          for a, b in doc.focus if a < passage.end and b > passage.start)]
        text = passage.text
        offsets = words(text)
        if len(offsets) == 0:
            return []
        if query and not self.query_segments:
            return [((int(offsets[0, 0]), int(offsets[-1, 1])),)]
        props = self._segments.get(text)
        if props is None:
            props = self.segmenter.segment([text])[0]
        props = list(props)
        # Words no proposition covers are not lost: they form one more.
        covered = {i for p in props for i in p}
        rest = [i for i in range(len(offsets)) if i not in covered and is_wordlike(text[offsets[i, 0] : offsets[i, 1]])]
        if rest:
            props.append(tuple(rest))
        return [word_spans(text, offsets, p) for p in props]

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        groups = [g for g in self.propositions(passage, tokens, query=query) if g]
        if not groups:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        pooled = span_pool(tokens.states, tokens.offsets, ~tokens.special, groups)
        with torch.inference_mode():
            vectors = self.head(pooled.to(self.backbone.device)).float().cpu().numpy()
        locate = SentenceLocator(passage.doc)
        units = [locate.unit([(a + passage.start, b + passage.start) for a, b in g], Kind.PROPOSITION) for g in groups]
        return Encoded(vectors, units)
