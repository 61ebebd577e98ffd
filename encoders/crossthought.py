"""`crossthought`: short sequences read through N slots.

Cross-Thought (Wang et al., 2020). Text is cut into contiguous sequences of
at most 64 tokens (each after its document's title); N slot embeddings read
each sequence on its own, and their final states E (N, d) are the sequence's
embedding.

The slots read a frozen backbone (`CrossThoughtModel`): they pass through
its layers with its own weights, attending to the words, while no word
attends to them. The backbone's geometry is never touched, its word states
are exactly the ones `single` pools, and one backbone pass gives both.

Pre-training (`propdex train crossthought`) sends slot n of every sequence in
a sample through one cross-sequence Transformer layer, in which slot n
attends only to slot n of the *other* sequences; a top layer over
[cross-slot outputs; the sequence's word states] predicts masked words.
Words a short sequence cannot recover from itself must come through the
slots of its neighbours, which is what trains the slots to carry meaning and
the cross layer's W^Q, W^K to find the right neighbour. A second term
distils the backbone's own ranking of the sample's sequences into those
attention logits, so they rank the way the geometry they read does.

Retrieval reads the slots beside the words they summarise. By default
(`words=1`) a sequence's vector is its slots' N*H key blocks (a query's:
its query blocks), scaled to unit length, followed by the mean of its word
states as `single` pools them, also unit length: the inner product is the
cosine of the attention logits' blocks plus the cosine of the two means, an
exact inner-product search in FAISS with nothing to calibrate. The slots
then add what a sequence's neighbours taught them to a backbone geometry
that stays whole, where alone they would replace it.

`words=0` keeps the paper's scoring of the slots alone: stage 2 re-scores
the candidates by alpha, the softmax over candidates averaged over heads and
slots (`retriever.scoring.attention`), or (`score=dot`) by the summed
logits. The control model (masked LM only, no cross layer) has no W^Q, W^K;
its slot part is the cosine of its slot states, averaged over slots, as the
paper scores its MLM baselines.

The model and its weights live in `crossthought_model`, re-exported here.
"""
from __future__ import annotations

import bisect
import math
from typing import Any

import numpy as np
import torch
from torch import nn

from . import flag, weights_path
from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, _n_specials, document_tokens
from .crossthought_model import (
    SEQUENCE_TOKENS, SLOT_PATH, UNTRAINED, CrossLayer, CrossThoughtModel, LowRank, MaskedWordHead, crossthought_weights,
    load_crossthought, mask_words, model_config, read_layer, slot_path_adapters, untrained,
)
from .provenance import read_config, recorded_weights, verified_sha256
from .single import passage_mean
from .units import Document, Encoded, Kind, Passage

__all__ = [
    "DEFAULT_WEIGHTS", "LEGACY_PREFIX", "SEQUENCE_TOKENS", "SLOT_PATH", "UNTRAINED", "CrossLayer", "CrossThoughtEncoder",
    "CrossThoughtModel", "LowRank", "MaskedWordHead", "crossthought_weights", "cut_sequences", "load_crossthought", "mask_words",
    "model_config", "read_layer", "sequence_passages", "slot_path_adapters", "tokenized_sequences", "untrained", "word_starts",
]

DEFAULT_WEIGHTS = "crossthought-3"
# The weights of the inline LoRA design, shipped under these names before the frozen reader.
LEGACY_PREFIX = "crossthought-lora-"


def cut_sequences(word_start: np.ndarray, length: int = SEQUENCE_TOKENS) -> list[tuple[int, int]]:
    """Contiguous [a, b) token ranges of at most `length` tokens covering all
    n tokens once and in order. A cut goes before the last word start that
    fits, so a word is not split (unless it alone is longer than `length`):
    the text of a range then tokenizes back to exactly its tokens."""
    if length < 1:
        raise ValueError(f"sequence length must be at least 1, got {length}")
    n = len(word_start)
    starts = np.flatnonzero(word_start).tolist()
    ranges, a = [], 0
    while a < n:
        b = min(a + length, n)
        if b < n and not word_start[b]:
            back = starts[bisect.bisect_right(starts, b) - 1] if starts else a
            b = back if back > a else b
        ranges.append((a, b))
        a = b
    return ranges


def word_starts(offsets: np.ndarray) -> np.ndarray:
    """Tokens that begin a whitespace-separated word: the first token, and any
    with a gap since the previous token's end (tokenizer-agnostic)."""
    starts = np.ones(len(offsets), dtype=bool)
    if len(offsets) > 1:
        starts[1:] = offsets[1:, 0] > offsets[:-1, 1]
    return starts


def tokenized_sequences(tokenizer: Any, text: str, length: int = SEQUENCE_TOKENS) -> tuple[list[int], np.ndarray, list[tuple[int, int]]]:
    """A text's token ids (no specials), their (n, 2) char offsets, and its
    short sequences as token ranges (`cut_sequences`)."""
    tokens, _ = document_tokens(tokenizer, text)
    return tokens.ids.tolist(), tokens.offsets, cut_sequences(word_starts(tokens.offsets), length)


def sequence_passages(doc: Document, backbone: Backbone, length: int = SEQUENCE_TOKENS) -> list[Passage]:
    """A document cut into short sequences, one `Passage` each; sequences
    holding no focus span are left out."""
    _, offsets, ranges = tokenized_sequences(backbone.tokenizer, doc.text, length)
    locate = SentenceLocator(doc)
    passages = []
    for a, b in ranges:
        start, end = int(offsets[a, 0]), int(offsets[b - 1, 1])
        if doc.focus and not any(fa < end and fb > start for fa, fb in doc.focus):
            continue
        passages.append(Passage(doc, start, end, locate.sentence_of(start)))
    return passages


class CrossThoughtEncoder(Encoder):
    """One unit per short sequence; its vector is its N slots' key blocks
    (queries: query blocks), or, for the control, its unit slot states /
    sqrt(N); with `words` (the default) both unit length and followed by the
    sequence's mean word state.

    Slots alone (`words=0`): `score="alpha"` re-scores candidates by the
    paper's attention weight (softmax over candidates, averaged over heads
    and slots); `score="dot"` by the summed logits themselves, stage 1's
    inner product."""

    name = "crossthought"
    kind = Kind.SLOT

    def __init__(self, backbone: Backbone, batch_size: int = 32, weights: str = DEFAULT_WEIGHTS,
                 weights_sha256: str | None = None, score: str = "alpha", words: bool | str = True) -> None:
        super().__init__(backbone, batch_size)
        if score not in ("alpha", "dot"):
            raise ValueError(f"crossthought score must be alpha or dot, got {score!r}")
        self.weights_name, self.score, self.words = str(weights), score, flag(words)
        if self.words and score != "alpha":
            raise ValueError("crossthought score= chooses how slots alone are scored; it needs words=0")
        name = self.weights_name
        if name == UNTRAINED or name.startswith(UNTRAINED + "-"):
            slots = int(name.split("-", 1)[1]) if "-" in name else 5
            self.ct, self.ct_config = untrained(backbone.model, backbone.tokenizer, slots)
            self.weights_sha256 = None
        else:
            self.path = weights_path(name)
            if name.startswith("crossthought-") and not name.startswith(LEGACY_PREFIX):
                # An index built while the inline LoRA weights had this name.
                self.path = recorded_weights(self.path, weights_path(LEGACY_PREFIX + name[len("crossthought-"):]), weights_sha256)
            backbone.check_trained_for(read_config(self.path, "Cross-Thought weights"), self.path, "Cross-Thought weights", "crossthought")
            self.ct, self.ct_config = load_crossthought(self.path, backbone.model)
            self.weights_sha256 = verified_sha256(self.path, weights_sha256)
        self.ct.to(backbone.device, backbone.dtype)
        self.length = int(self.ct_config["sequence_tokens"])
        self.prefix = self.ct.n_slots

    @property
    def dim(self) -> int:
        return (self.ct.n_slots + (1 if self.words else 0)) * self.backbone.dim

    @property
    def attention_blocks(self) -> int:
        slots_alone = self.ct.cross is not None and self.score == "alpha" and not self.words
        return self.ct.n_slots * self.ct.heads if slots_alone else 0

    @property
    def max_length(self) -> int:
        return self.length + _n_specials(self.backbone)

    def options(self) -> dict[str, Any]:
        options = {"weights": self.weights_name, "weights_sha256": self.weights_sha256, "words": self.words}
        return options | ({"score": self.score} if self.score != "alpha" else {})

    def passages(self, doc: Document) -> list[Passage]:
        return sequence_passages(doc, self.backbone, self.length)

    def run(self, enc: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        ids, mask = (enc[k].to(self.backbone.device) for k in ("input_ids", "attention_mask"))
        slots, words = self.ct.states(ids, mask)
        return torch.cat([slots, words], 1), None

    @torch.inference_mode()
    def vectors(self, slots: torch.Tensor, *, query: bool) -> np.ndarray:
        """(b, N, d) slot states -> (b, N*d) slot parts for the inner-product index."""
        cross = self.ct.cross
        if cross is None:
            out = nn.functional.normalize(slots.float(), dim=-1) / math.sqrt(slots.shape[1])
        else:
            slots = slots.to(self.backbone.device, self.backbone.dtype)  # `forward` gives float32 states on the CPU
            out = cross.queries(slots) if query else cross.keys(slots)
        return out.flatten(1).float().cpu().numpy()

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        assert tokens.slots is not None
        unit = SentenceLocator(passage.doc).unit([(passage.start, passage.end)], Kind.SLOT)
        vector = self.vectors(tokens.slots[None], query=query)
        if self.words:
            mean, _ = passage_mean(passage, tokens)
            if mean is None:  # nothing pooled: the words add nothing to any score
                mean = np.zeros((1, self.backbone.dim), np.float32)
            # Two unit-length halves: their inner product is the sum of two cosines.
            vector = np.concatenate([vector / np.linalg.norm(vector, axis=1, keepdims=True), mean], 1)
        return Encoded(vector, [unit])
