"""`proposition`: one small vector per proposition (the sub-sentence encoder).

The backbone stays frozen, so the geometry it was trained for is intact,
and each sentence goes through it once, after its document's title. That
one pass serves both halves of the encoder:

- the trained segmenter reads its layers' word states and finds the
  sentence's propositions;
- each proposition's vector is the student head over its in-context
  features (the mean of its tokens' states, beside the sentence's), in the
  *teacher's* space.

The teacher is the backbone encoding the proposition's own text alone
(after the title), mixed with its sentence's mean, through the head's
`query` map (centred principal components to start with); the student is
distilled from it on Wikipedia sentences (`propdex train proposition`). A
text query is the teacher's side: the backbone's mean vector through the
same map, so queries and propositions share one space and a query needs no
segmenting; a query given as a document with a focus (PropSegment's
propositions in context) is its proposition's own text, encoded alone.

The head is trained for its leading 64 dimensions too (Matryoshka), so
`dims=64` gives the paper's 64-d propositions from the same weights.
`context="passage"` reads the backbone as `single` does, a packed passage
of whole sentences per pass, and pools each sentence's propositions from
that pass: one pass serves `single`'s passage vector, the segmenter and the
head, so encoding costs about what `single`'s does (the default,
`"sentence"`, reads one sentence at a time, as the default head was
trained; a head trained with `--context passage` defaults to `"passage"`).
`beside=w` stores `single`'s vector of the proposition's passage beside
it, weighted by w, and a query's own mean vector beside the query's: a
proposition then scores its cosine plus w times its passage's, so a
document is found by its best fact *and* by what it is about as a whole
(a multi-hop question names both). Read a sentence at a time, the
passage vectors take a second, packed pass (`single`'s encoding cost on
top); with `context="passage"` they come from the one pass.

`standalone=True` is the Dense X Retrieval baseline as a system: the same
propositions, each encoded alone (a second backbone pass per proposition),
i.e. the teacher at indexing time; it shows what in-context encoding buys
in quality and time.

A document that names its propositions itself (`focus`) is encoded under
that mask and not re-segmented. The head shipped before this one
(`weights/proposition-lora`: an MLP over LoRA-adapted layers, queries
through the MLP too, the segmenter in a pass of its own) still loads, and
indexes built with it keep working.

The head and its teacher live in `proposition_head`, the glue to the
segmenter in `proposition_segments`; both are re-exported here.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from . import weights_path
from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, _n_specials, cut_passages, span_pool
from .proposition_head import PropositionHead, feature_dim, leading, load_weights, mean_vectors, proposition_features
from .proposition_segments import (
    covering, isolated_reading, known_propositions, sentence_blocks, sentence_pieces, spans_of, unit_text, units_by_owner, word_inputs,
)
from .provenance import read_config, recorded_weights, verified_sha256
from .segment import PairSegmenter, words
from .units import Document, Encoded, Kind, Passage, Span

__all__ = [
    "CONTEXTS", "LEGACY_HEAD", "PropositionEncoder", "PropositionHead", "beside_passages", "checked_context", "checked_dims",
    "covering", "encode_alone", "feature_dim", "isolated_reading", "known_propositions", "leading", "load_weights", "mean_vectors",
    "proposition_features", "sentence_blocks", "sentence_pieces", "spans_of", "unit_text", "units_by_owner", "word_inputs",
]

# The head shipped before the frozen, distilled one; indexes built with it keep loading.
LEGACY_HEAD = "proposition-lora"
# What one backbone pass reads: a sentence; a packed passage; a packed passage whose sentences do not see each other.
CONTEXTS = ("sentence", "passage", "isolated")


def checked_dims(dims: int | str | None, out_dim: int, distilled: bool) -> int:
    """The leading dimensions an index keeps (`dims`; all of them for none).
    A distilled head is trained for its leading dimensions too
    (Matryoshka), so a prefix, re-normalised, is a smaller index of the
    same space; any other head gives its whole width."""
    kept = out_dim if dims in (None, "", "None") else int(dims)
    if not 1 <= kept <= out_dim or (kept != out_dim and not distilled):
        raise ValueError(f"dims must be between 1 and {out_dim} (the head's width) and needs a distilled head, got {dims!r}")
    return kept


def checked_context(context: str, beside: float | str, runtime: str, distilled: bool) -> tuple[str, float]:
    """What one pass reads (`CONTEXTS`) and the weight of the passage's
    vector stored beside each proposition (`beside`). Both need a distilled
    head, whose query map puts passages and propositions in one space; the
    isolated reading takes an attention mask of its own, which only the
    torch runtime accepts."""
    if context not in CONTEXTS:
        raise ValueError(f"proposition context must be one of {', '.join(CONTEXTS)}, got {context!r}")
    if context == "isolated" and runtime != "torch":
        raise ValueError(f"context=isolated reads with an attention mask of its own, which the {runtime} runtime does not take; use --runtime torch")
    weight = float(beside)
    if (context != "sentence" or weight) and not distilled:
        raise ValueError("context= and beside= need a distilled head (one with a query map)")
    if not 0 <= weight < 100:
        raise ValueError(f"beside is the weight of the context's vector, from 0 (none) up; got {beside!r}")
    return context, weight


class PropositionEncoder(Encoder):
    """One vector per proposition: the segmenter finds a sentence's
    propositions and the head encodes each from the same backbone pass (the
    module's docstring says how); the head and its teacher live in
    `proposition_head`, the segmentation glue in `proposition_segments`."""

    name = "proposition"
    kind = Kind.PROPOSITION

    def __init__(
        self, backbone: Backbone, batch_size: int = 64, head: str = "default", segmenter: str = "default",
        query_segments: bool = False, standalone: bool = False, dims: int | None = None, head_sha256: str | None = None,
        context: str | None = None, beside: float = 0.0,
    ) -> None:
        super().__init__(backbone, batch_size)
        from . import flag

        model = self._load_head(head, segmenter, head_sha256)
        self.query_segments = flag(query_segments)
        self.standalone = flag(standalone)
        self.distilled = self.head.query is not None
        self.out_dim = int(self.head_config["out_dim"])
        self._dim = checked_dims(dims, self.out_dim, self.distilled)
        if self.standalone and not self.distilled:
            raise ValueError("standalone=1 needs a distilled head (one with a query map)")
        # A head trained on passage-read states (`train proposition --context passage`) reads them by default.
        context = context or self.head_config.get("context", "sentence")
        self.context, self.beside = checked_context(context, beside, backbone.runtime, self.distilled)
        self._choose_layers(model)

    def _load_head(self, head: str, segmenter: str, head_sha256: str | None) -> nn.Module:
        """Load the head (checked against the sha256 an index recorded) and
        name the segmenter; returns the backbone model the head reads."""
        backbone = self.backbone
        if head == "default" and recorded_weights(weights_path("proposition"), weights_path(LEGACY_HEAD), head_sha256).name == LEGACY_HEAD:
            head = LEGACY_HEAD  # an index built while the LoRA head was the default
        self.head_path = weights_path("proposition" if head == "default" else head)
        self.segmenter_path = weights_path("segmenter" if segmenter == "default" else segmenter)
        self.head_name, self.segmenter_name = head, segmenter
        backbone.check_trained_for(read_config(self.head_path, "proposition head"), self.head_path, "proposition head", "proposition")
        self.head, model, self.head_config = load_weights(self.head_path, backbone.model)
        self.head.to(backbone.device)
        self.head_sha256 = verified_sha256(self.head_path, head_sha256)
        return model

    def _choose_layers(self, model: nn.Module) -> None:
        """The backbone layers the pass keeps: the head's and the segmenter's
        side by side (a distilled head), or the head's, read through its
        adapted copy of the backbone (the LoRA head)."""
        n = self.backbone.model.config.num_hidden_layers
        last = lambda layers: tuple(n if i == -1 else int(i) for i in layers)  # noqa: E731
        self.head_layers = last(self.head_config.get("layers", (-1,)))
        self.segmenter_layers = last(read_config(self.segmenter_path, "segmenter").get("backbone_layers") or (-1,))
        self._segmenter: PairSegmenter | None = None
        self._segments: dict[str, list] = {}
        self._column_cache: dict[tuple[int, ...], torch.Tensor] = {}
        if self.distilled:
            # One frozen pass serves both: the head's layers and the segmenter's, side by side.
            self.layers = tuple(sorted(set(self.head_layers) | set(self.segmenter_layers)))
        else:
            # The LoRA head reads its adapted copy; the segmenter, the frozen backbone in a pass of its own.
            self.layers, self.model = self.head_layers, model.to(self.backbone.device)
    @property
    def dim(self) -> int:
        return self._dim + (self.backbone.dim if self.beside else 0)

    def options(self) -> dict[str, Any]:
        options = {
            "head": self.head_name, "segmenter": self.segmenter_name,
            "query_segments": self.query_segments, "head_sha256": self.head_sha256,
        }
        if self.standalone:
            options["standalone"] = True
        if self._dim != self.out_dim:
            options["dims"] = self._dim
        if self.context != "sentence":
            options["context"] = self.context
        if self.beside:
            options["beside"] = self.beside
        return options

    def _cut(self, vectors: torch.Tensor) -> np.ndarray:
        """The leading `dims` dimensions, re-normalised."""
        if self._dim != self.out_dim:
            vectors = leading(vectors.float(), self._dim)
        return vectors.float().cpu().numpy()

    @property
    def segmenter(self) -> PairSegmenter:
        if self._segmenter is None:
            self._segmenter = PairSegmenter.load(self.segmenter_path, backbone=self.backbone)
        return self._segmenter

    def _columns(self, layers: tuple[int, ...]) -> torch.Tensor:
        """Where `layers` sit in the side-by-side states of this encoder's pass
        (computed once per layer set: `pool` asks for each passage)."""
        if layers not in self._column_cache:
            d = self.backbone.dim
            self._column_cache[layers] = torch.cat([torch.arange(self.layers.index(i) * d, (self.layers.index(i) + 1) * d) for i in layers])
        return self._column_cache[layers]

    # -- the front door -------------------------------------------------------
    def encode(self, passages: Sequence[Passage], *, query: bool = False, progress: bool = False) -> list[Encoded]:
        if not self.distilled:
            need = [p.text for p in passages if not p.doc.focus and (self.query_segments or not query)]
            self._segments = dict(zip(need, self.segmenter.segment(need, progress=progress))) if need else {}
        try:
            out = super().encode(passages, query=query, progress=progress)
        finally:
            self._segments = {}
        # Queries are the teacher's side: a text query already is; a proposition
        # given in context (a focus) is its own text, encoded alone.
        if self.distilled and (self.standalone and not query or query and any(p.doc.focus for p in passages)):
            out = encode_alone(self, passages, out, progress, query)
        if self.beside and not query and self.context == "sentence":
            out = beside_passages(self, passages, out, progress)
        return out

    def _window(self, doc: Document) -> int:
        """Text tokens a packed passage of `doc` holds: the model's length,
        less the specials and the title in front."""
        return self.max_length - _n_specials(self.backbone) - self.title_tokens(doc)

    def passages(self, doc: Document) -> list[Passage]:
        """One sentence per passage, the unit the segmenter reads; with
        `context="passage"` or `"isolated"`, `single`'s packed passages."""
        return cut_passages(doc, self.backbone, window=self._window(doc), pack=self.context != "sentence")

    def reading(self, passages: Sequence[Passage], enc: dict[str, torch.Tensor], offsets: np.ndarray, special: np.ndarray) -> dict[str, torch.Tensor]:
        """With `context="isolated"`, a packed passage is read as its
        sentences would be one at a time, in one pass (`isolated_reading`)."""
        return isolated_reading(passages, enc, offsets, special) if self.context == "isolated" else {}

    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        return self.pool_batch([passage], [tokens], query=query)[0]

    def pool_batch(self, passages: Sequence[Passage], tokens: Sequence[TokenStates], *, query: bool) -> list[Encoded]:
        """A batch's propositions: the segmenter and the head each run once
        over all of its sentences."""
        out: list[Encoded | None] = [None] * len(passages)
        # The text everything was read in, as `single` pools it.
        means = [t.states[:, self._columns((self.head_layers[-1],))].mean(0, keepdim=True) for t in tokens] if self.distilled else [None] * len(tokens)
        items, owners = [], []
        for i, (passage, states) in enumerate(zip(passages, tokens)):
            whole = query and not passage.doc.focus and not self.query_segments
            if whole and self.distilled:
                out[i] = self._query_vector(passage, means[i])
                continue
            packed = self.context != "sentence" and not query and not passage.doc.focus
            for piece in sentence_pieces(passage, states) if packed else [(passage, states)]:
                items.append((*piece, whole))
                owners.append(i)
        found = self.features_batch(items)
        vectors = self._head_vectors([f for _, f in found]) if items else None
        per_owner = units_by_owner(owners, [piece for piece, _, _ in items], [groups for groups, _ in found])
        for i in range(len(passages)):
            if out[i] is not None:
                continue
            units, rows_of = per_owner.get(i, ([], []))
            if not units:
                out[i] = Encoded(np.zeros((0, self.dim), np.float32), [])
            else:
                out[i] = Encoded(self._with_context(vectors[rows_of], means[i], 1.0 if query else self.beside), units)
        return out  # type: ignore[return-value]

    def _query_vector(self, passage: Passage, mean: torch.Tensor) -> Encoded:
        """A text query is one need: the backbone's mean vector of it, through
        the head's query map (the teacher's side)."""
        with torch.inference_mode():
            vector = self._cut(self.head.embed(mean.to(self.backbone.device)))
        unit = SentenceLocator(passage.doc).unit([(passage.start, passage.end)], Kind.PROPOSITION)
        return Encoded(self._with_context(vector, mean, 1.0), [unit])

    def _head_vectors(self, features: list[torch.Tensor]) -> np.ndarray:
        """The head over the features of every proposition of a batch, at once."""
        with torch.inference_mode():
            rows = torch.cat(features)
            return self._cut(self.head(rows.to(self.backbone.device))) if len(rows) else np.zeros((0, self._dim), np.float32)

    def _with_context(self, vectors: np.ndarray, mean: torch.Tensor | None, weight: float) -> np.ndarray:
        """`vectors` followed, with `beside`, by `weight` times the unit-length
        mean vector of the text they were read in (one row, shared)."""
        if not self.beside:
            return vectors
        context = weight * nn.functional.normalize(mean.float(), dim=-1).cpu().numpy()
        return np.concatenate([vectors, np.repeat(context, len(vectors), 0)], 1).astype(np.float32)

    def features(self, passage: Passage, tokens: TokenStates, whole: bool = False) -> tuple[list[tuple[Span, ...]], torch.Tensor]:
        """A passage's propositions (passage-relative char spans) and the
        head's input for each: what `pool` encodes and what training caches."""
        return self.features_batch([(passage, tokens, whole)])[0]

    def features_batch(self, items: Sequence[tuple[Passage, TokenStates, bool]]) -> list[tuple[list[tuple[Span, ...]], torch.Tensor]]:
        """`features` of many (passage, states, whole) at once."""
        out = []
        for (passage, tokens, _), groups in zip(items, self.propositions_batch(items)):
            groups = [g for g in groups if g]
            if not groups:
                out.append(([], torch.zeros(0, self.head.mlp[0].in_features)))
            elif not self.distilled:
                out.append((groups, span_pool(tokens.states, tokens.offsets, ~tokens.special, groups)))
            else:
                states = tokens.states[:, self._columns(self.head_layers)]
                out.append((groups, proposition_features(states, tokens.offsets, tokens.special, groups, self.backbone.dim)))
        return out

    def propositions(self, passage: Passage, tokens: TokenStates, whole: bool = False) -> list[tuple[Span, ...]]:
        """Char spans (passage-relative) of each proposition: the document's
        focus, the whole text (`whole`), or what the segmenter reads in this
        very pass's states."""
        return self.propositions_batch([(passage, tokens, whole)])[0]

    def propositions_batch(self, items: Sequence[tuple[Passage, TokenStates, bool]]) -> list[list[tuple[Span, ...]]]:
        """`propositions` of many (passage, states, whole): the segmenter
        decodes all the texts it reads in one go."""
        out = [known_propositions(passage, whole, self._segments) for passage, _, whole in items]
        decode = [k for k, found in enumerate(out) if found is None]
        if not self.distilled:
            for k in decode:
                text = items[k][0].text
                out[k] = spans_of(text, words(text), self.segmenter.segment([text])[0])
        elif decode:
            # What the segmenter reads: this very pass's states, one per word.
            columns = self._columns(self.segmenter_layers)
            inputs = [word_inputs(items[k][0], items[k][1], columns, self.backbone.device) for k in decode]
            with torch.inference_mode():
                decoded = self.segmenter.decode_many(inputs)
            for k, (_, text, offsets), props in zip(decode, inputs, decoded):
                out[k] = spans_of(text, offsets, props)
        return out  # type: ignore[return-value]


def beside_passages(encoder: PropositionEncoder, passages: Sequence[Passage], encoded: list[Encoded], progress: bool) -> list[Encoded]:
    """Each sentence's propositions followed by `beside` times `single`'s
    vector of the packed passage the sentence sits in: a proposition then
    scores its own cosine plus `beside` times its passage's, so a document
    is found by its best fact and by what it is about as a whole."""
    docs = list({id(p.doc): p.doc for p in passages}.values())
    packed = {id(d): cut_passages(d, encoder.backbone, window=encoder._window(d)) for d in docs}
    flat = [pp for d in docs for pp in packed[id(d)]]
    vectors = nn.functional.normalize(mean_vectors(encoder.backbone, [pp.text for pp in flat], [encoder.title_of(pp.doc) for pp in flat],
                                                   encoder.batch_size, progress, desc="encode passages"), dim=-1).numpy()
    where = {(id(pp.doc), pp.start): v for pp, v in zip(flat, vectors)}
    out = []
    for p, e in zip(passages, encoded):
        starts = [pp.start for pp in packed[id(p.doc)] if pp.start <= p.start]
        vector = where[(id(p.doc), max(starts))] if starts else np.zeros(encoder.backbone.dim, np.float32)
        v = e.vectors.copy()
        v[:, encoder._dim :] = encoder.beside * vector
        out.append(Encoded(v, e.units))
    return out


@torch.inference_mode()
def encode_alone(encoder: PropositionEncoder, passages: Sequence[Passage], encoded: list[Encoded], progress: bool, query: bool) -> list[Encoded]:
    """Every proposition re-encoded from its own text, after its title,
    through the head's query map: the standalone baseline (`standalone=1`)
    for documents, and the teacher's side for a query given in context."""
    items = [(i, j) for i, e in enumerate(encoded) for j in range(len(e.units))]
    texts = [unit_text(passages[i].doc, encoded[i].units[j]) for i, j in items]
    titles = [encoder.title_of(passages[i].doc) for i, _ in items]
    vectors = mean_vectors(encoder.backbone, texts, titles, encoder.batch_size, progress)
    projected = encoder._cut(encoder.head.embed(vectors.to(encoder.backbone.device)))
    # A focus query's context is its text alone too; a document's stays what it was read in.
    out = [Encoded(e.vectors.copy(), e.units) for e in encoded]
    for (i, j), v, alone in zip(items, projected, vectors):
        out[i].vectors[j, : encoder._dim] = v
        if encoder.beside and query:
            out[i].vectors[j, encoder._dim :] = nn.functional.normalize(alone, dim=-1).numpy()
    return out
