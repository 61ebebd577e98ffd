"""`single`: one mean-pooled vector per passage (the DPR-style baseline).

A checkpoint with a sentence-transformers recipe of its own (CLS pooling,
Dense layers, prompts: encoders/recipe.py) is pooled by it instead, so a
passage's vector is the one its library makes, at unit length.

`weights` names adapters trained for it (`propdex train docsplit --encoder
single`), merged into a private copy of the backbone; none by default."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from . import weights_path
from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, focus_mask, l2_normalize
from .recipe import Recipe
from .units import Encoded, Kind, Passage


class SingleEncoder(Encoder):
    name = "single"
    kind = Kind.PASSAGE

    def __init__(self, backbone: Backbone, batch_size: int = 32, weights: str | None = None, weights_sha256: str | None = None) -> None:
        super().__init__(backbone, batch_size)
        if backbone.recipe.late:
            raise ValueError(f"{backbone.source} is a {backbone.recipe.library} ColBERT checkpoint: it makes token vectors, "
                             "index it with tokens (or nugget), not single")
        self.weights, self.weights_sha256 = weights, None
        if weights:
            self.model, self.weights_sha256 = load_adapted(weights, backbone, weights_sha256)

    def options(self) -> dict[str, Any]:
        return {"weights": self.weights, "weights_sha256": self.weights_sha256} if self.weights else {}

    @property
    def dim(self) -> int:
        return self.backbone.recipe.dim(self.backbone.dim)

    def pool_batch(self, passages: Sequence[Passage], tokens: Sequence[TokenStates], *, query: bool) -> list[Encoded]:
        """A batch's means at once; passage by passage only where a focus
        masks what is pooled. Per passage, pooling cost a GPU build more
        than the forward pass did."""
        if any(p.doc.focus for p in passages) or not passages or self.backbone.recipe.changes_vectors:
            return super().pool_batch(passages, tokens, query=query)
        vectors = l2_normalize(torch.stack([t.states.mean(0) for t in tokens]))
        locators: dict[int, SentenceLocator] = {}
        out = []
        for i, p in enumerate(passages):
            locate = locators.get(id(p.doc)) or locators.setdefault(id(p.doc), SentenceLocator(p.doc))
            out.append(Encoded(vectors[i : i + 1], [locate.unit([(p.start, p.end)], Kind.PASSAGE)]))
        return out

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        vector, spans = passage_mean(passage, tokens, self.backbone.recipe)
        if vector is None:
            return Encoded(np.zeros((0, self.dim), np.float32), [])
        return Encoded(vector, [SentenceLocator(passage.doc).unit(spans, Kind.PASSAGE)])


def passage_mean(passage: Passage, tokens: TokenStates, recipe: Recipe = Recipe()) -> tuple[np.ndarray | None, list[tuple[int, int]]]:
    """`single`'s vector of a passage, (1, dim) and unit length, and the char
    spans it stands for; (None, []) when nothing in the passage is pooled.
    A checkpoint's `recipe` pools, where it changes the vectors."""
    doc = passage.doc
    char_spans = tokens.offsets + passage.start
    if doc.focus:
        # Mask pooling: the whole passage is context, only the focus is averaged.
        keep = ~tokens.special & focus_mask(doc, char_spans)
        spans = [(max(a, passage.start), min(b, passage.end)) for a, b in doc.focus if a < passage.end and b > passage.start]
    else:
        # Plain mean pooling over every real token, specials included, as
        # sentence-transformers does, so vectors match the model card's.
        keep = np.ones(len(char_spans), dtype=bool)
        spans = [(passage.start, passage.end)]
    if not recipe.include_prompt:
        keep[: tokens.prompt_length] = False
    if not keep.any() or not spans:
        return None, []
    if recipe.changes_vectors:
        return l2_normalize(recipe.pool(tokens.states, keep)[None]), spans
    return l2_normalize(tokens.states[keep].mean(0, keepdim=True)), spans


def load_adapted(weights: str, backbone: Backbone, expected_sha256: str | None = None) -> tuple[Any, str]:
    """The backbone with the adapters of a weights directory merged in, and the weights' sha256."""
    from .adapters import adapter_stages, merged_stages
    from .provenance import read_weights, verified_sha256

    path = weights_path(weights)
    state, config = read_weights(path, "adapter weights")
    sha = verified_sha256(path, expected_sha256)
    model = merged_stages(backbone.model, adapter_stages(config), state, path)
    return model.to(backbone.device).eval(), sha
