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
(HotpotQA's multi-hop questions name both). Read a sentence at a time, the
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
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from . import weights_path
from .adapters import adapter_stages, merged_stages
from .backbone import Backbone
from .base import Encoder, SentenceLocator, TokenStates, _n_specials, cut_passages, hidden_states, span_pool, tokenize
from .provenance import read_weights, recorded_weights, verified_sha256
from .segment import PairSegmenter, Proposition, word_spans, words, spans_text
from .text import is_wordlike
from .units import Document, Encoded, Kind, Passage, Span

# The head shipped before the frozen, distilled one; indexes built with it keep loading.
LEGACY_HEAD = "proposition-lora"
# What one backbone pass reads: a sentence; a packed passage; a packed passage whose sentences do not see each other.
CONTEXTS = ("sentence", "passage", "isolated")


def leading(v: torch.Tensor, dims: int) -> torch.Tensor:
    """The leading `dims` dimensions, re-normalised (all of them for 0):
    what `proposition:dims=` indexes, and what training's Matryoshka term
    and epoch selection score."""
    return nn.functional.normalize(v[:, :dims] if dims else v, dim=-1)


class PropositionHead(nn.Module):
    """Student: in-context features -> MLP -> L2-normalised `out_dim` vector,
    plus (`query_dim`) the linear map that puts the backbone's mean vector
    of a text - a query, or the teacher's proposition - in the same space.

    With a query map the student's output is a residual on the projected
    in-context means (the proposition's last-layer mean, plus
    `sentence_weight` times its sentence's, as the teacher mixes them):
    untrained, the head is mask pooling seen through the teacher's map."""

    def __init__(self, dim: int, hidden: int, out_dim: int, query_dim: int | None = None, sentence_weight: float = 0.0) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
        self.query = nn.Linear(query_dim, out_dim) if query_dim else None
        self.query_dim = query_dim
        self.sentence_weight = sentence_weight

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out = self.mlp(features)
        if self.query is not None:
            # The base the MLP corrects: the proposition's last-layer mean (the
            # first `query_dim` features) plus its sentence's (the last ones),
            # mixed as in the teacher, through the query map.
            d = self.query_dim
            base = nn.functional.normalize(features[:, :d], dim=-1)
            if self.sentence_weight:
                base = base + self.sentence_weight * nn.functional.normalize(features[:, -d:], dim=-1)
            out = out + self.query(nn.functional.normalize(base, dim=-1))
        return nn.functional.normalize(out, dim=-1)

    def embed(self, vectors: torch.Tensor) -> torch.Tensor:
        """Backbone mean vectors (queries, or texts alone) -> the shared space."""
        if self.query is None:
            raise ValueError("this proposition head has no query map (a LoRA head: queries go through its MLP)")
        return nn.functional.normalize(self.query(nn.functional.normalize(vectors, dim=-1)), dim=-1)


def load_weights(path: str | Path, model: nn.Module) -> tuple[PropositionHead, nn.Module, dict[str, Any]]:
    """The head, the backbone model to use (adapted and merged when the
    weights carry LoRA adapters, else `model` itself), and the config."""
    state, config = read_weights(path, "proposition head", "train one with `propdex train proposition`")
    head = PropositionHead(config["dim"], config["hidden"], config["out_dim"], config.get("query_dim"), config.get("sentence_weight", 0.0))
    head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    if stages := adapter_stages(config):
        model = merged_stages(model, stages, state, path)
    return head.eval(), model.eval(), config


def proposition_features(states: torch.Tensor, offsets: np.ndarray, special: np.ndarray, groups: Sequence[Sequence[Span]], dim: int) -> torch.Tensor:
    """The student's input for each proposition of one sentence, side by side:
    the last layer's mean under the proposition (the residual's base), every
    head layer's mean under it, and every head layer's mean over the
    sentence's text (what the proposition is said in). `states` holds the
    head's layers side by side, `dim` wide each, the last layer last."""
    real = ~special
    pooled = span_pool(states, offsets, real, groups)
    sentence = states[torch.from_numpy(real)].mean(0) if real.any() else states.mean(0)
    return torch.cat([pooled[:, -dim:], pooled, sentence.expand(len(groups), -1)], dim=1)


def feature_dim(dim: int, layers: int) -> int:
    return dim * (1 + 2 * layers)


class PropositionEncoder(Encoder):
    name = "proposition"
    kind = Kind.PROPOSITION

    def __init__(
        self, backbone: Backbone, batch_size: int = 64, head: str = "default", segmenter: str = "default",
        query_segments: bool = False, standalone: bool = False, dims: int | None = None, head_sha256: str | None = None,
        context: str | None = None, beside: float = 0.0,
    ) -> None:
        super().__init__(backbone, batch_size)
        from . import flag

        if head == "default" and recorded_weights(weights_path("proposition"), weights_path(LEGACY_HEAD), head_sha256).name == LEGACY_HEAD:
            head = LEGACY_HEAD  # an index built while the LoRA head was the default
        self.head_path = weights_path("proposition" if head == "default" else head)
        self.segmenter_path = weights_path("segmenter" if segmenter == "default" else segmenter)
        self.head_name, self.segmenter_name = head, segmenter
        self.head, model, self.head_config = load_weights(self.head_path, backbone.model)
        self.head.to(backbone.device)
        if self.head_config["backbone"] != backbone.name and head == "default":
            raise ValueError(f"the packaged proposition head was trained on {self.head_config['backbone']}, not {backbone.name}")
        self.head_sha256 = verified_sha256(self.head_path, head_sha256)
        self.query_segments = flag(query_segments)
        self.standalone = flag(standalone)
        self.distilled = self.head.query is not None
        # A distilled head is trained for its leading dimensions too (Matryoshka):
        # `dims` keeps the first `dims` and re-normalises, for smaller indexes.
        self.out_dim = int(self.head_config["out_dim"])
        self._dim = self.out_dim if dims in (None, "", "None") else int(dims)
        if not 1 <= self._dim <= self.out_dim or (self._dim != self.out_dim and not self.distilled):
            raise ValueError(f"dims must be between 1 and {self.out_dim} (the head's width) and needs a distilled head, got {dims!r}")
        if self.standalone and not self.distilled:
            raise ValueError("standalone=1 needs a distilled head (one with a query map)")
        # A head trained on passage-read states (`train proposition --context passage`) reads them by default.
        context = context or self.head_config.get("context", "sentence")
        if context not in CONTEXTS:
            raise ValueError(f"proposition context must be one of {', '.join(CONTEXTS)}, got {context!r}")
        if context == "isolated" and backbone.runtime != "torch":
            raise ValueError(f"context=isolated reads with an attention mask of its own, which the {backbone.runtime} runtime does not take; use --runtime torch")
        self.context, self.beside = context, float(beside)
        if (self.context != "sentence" or self.beside) and not self.distilled:
            raise ValueError("context= and beside= need a distilled head (one with a query map)")
        if not 0 <= self.beside < 100:
            raise ValueError(f"beside is the weight of the context's vector, from 0 (none) up; got {beside!r}")
        n = backbone.model.config.num_hidden_layers
        last = lambda layers: tuple(n if i == -1 else int(i) for i in layers)  # noqa: E731
        self.head_layers = last(self.head_config.get("layers", (-1,)))
        self.segmenter_layers = last(read_weights(self.segmenter_path, "segmenter")[1].get("backbone_layers") or (-1,))
        self._segmenter: PairSegmenter | None = None
        self._segments: dict[str, list] = {}
        self._column_cache: dict[tuple[int, ...], torch.Tensor] = {}
        if self.distilled:
            # One frozen pass serves both: the head's layers and the segmenter's, side by side.
            self.layers = tuple(sorted(set(self.head_layers) | set(self.segmenter_layers)))
        else:
            # The LoRA head reads its adapted copy; the segmenter, the frozen backbone in a pass of its own.
            self.layers, self.model = self.head_layers, model.to(backbone.device)

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
            out = self._alone(passages, out, progress, query)
        if self.beside and not query and self.context == "sentence":
            out = self._beside_passages(passages, out, progress)
        return out

    def _beside_passages(self, passages: Sequence[Passage], encoded: list[Encoded], progress: bool) -> list[Encoded]:
        """Each sentence's propositions followed by `beside` times `single`'s
        vector of the packed passage the sentence sits in."""
        docs = list({id(p.doc): p.doc for p in passages}.values())
        packed = {id(d): cut_passages(d, self.backbone, window=self.max_length - _n_specials(self.backbone) - self.title_tokens(d)) for d in docs}
        flat = [pp for d in docs for pp in packed[id(d)]]
        vectors = nn.functional.normalize(mean_vectors(self.backbone, [pp.text for pp in flat], [self.title_of(pp.doc) for pp in flat],
                                                       self.batch_size, progress, desc="encode passages"), dim=-1).numpy()
        where = {(id(pp.doc), pp.start): v for pp, v in zip(flat, vectors)}
        out = []
        for p, e in zip(passages, encoded):
            starts = [pp.start for pp in packed[id(p.doc)] if pp.start <= p.start]
            vector = where[(id(p.doc), max(starts))] if starts else np.zeros(self.backbone.dim, np.float32)
            v = e.vectors.copy()
            v[:, self._dim :] = self.beside * vector
            out.append(Encoded(v, e.units))
        return out

    def passages(self, doc: Document) -> list[Passage]:
        """One sentence per passage, the unit the segmenter reads; with
        `context="passage"` or `"isolated"`, `single`'s packed passages."""
        window = self.max_length - _n_specials(self.backbone) - self.title_tokens(doc)
        return cut_passages(doc, self.backbone, window=window, pack=self.context != "sentence")

    def reading(self, passages: Sequence[Passage], enc: dict[str, torch.Tensor], offsets: np.ndarray, special: np.ndarray) -> dict[str, torch.Tensor]:
        """With `context="isolated"`, a packed passage is read as its
        sentences would be one at a time, in one pass: each sentence's tokens
        attend to themselves and to the [CLS] title [SEP] in front, and count
        positions on from it."""
        if self.context != "isolated":
            return {}
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
                # A text query is one need: the backbone's mean vector, projected.
                with torch.inference_mode():
                    vector = self._cut(self.head.embed(means[i].to(self.backbone.device)))
                unit = SentenceLocator(passage.doc).unit([(passage.start, passage.end)], Kind.PROPOSITION)
                out[i] = Encoded(self._with_context(vector, means[i], 1.0), [unit])
                continue
            packed = self.context != "sentence" and not query and not passage.doc.focus
            for piece in sentence_pieces(passage, states) if packed else [(passage, states)]:
                items.append((*piece, whole))
                owners.append(i)
        found = self.features_batch(items)
        if items:
            with torch.inference_mode():
                rows = torch.cat([f for _, f in found])
                vectors = self._cut(self.head(rows.to(self.backbone.device))) if len(rows) else np.zeros((0, self._dim), np.float32)
        per_owner: dict[int, tuple[list, list]] = {}
        at = 0
        for owner, (piece, _, _), (groups, _) in zip(owners, items, found):
            units, rows_of = per_owner.setdefault(owner, ([], []))
            locate = SentenceLocator(piece.doc)
            units.extend(locate.unit([(a + piece.start, b + piece.start) for a, b in g], Kind.PROPOSITION) for g in groups)
            rows_of.extend(range(at, at + len(groups)))
            at += len(groups)
        for i in range(len(passages)):
            if out[i] is not None:
                continue
            units, rows_of = per_owner.get(i, ([], []))
            if not units:
                out[i] = Encoded(np.zeros((0, self.dim), np.float32), [])
            else:
                out[i] = Encoded(self._with_context(vectors[rows_of], means[i], 1.0 if query else self.beside), units)
        return out  # type: ignore[return-value]

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
        out: list[list[tuple[Span, ...]] | None] = [None] * len(items)
        decode: list[int] = []
        for k, (passage, tokens, whole) in enumerate(items):
            doc, text = passage.doc, passage.text
            offsets = words(text)
            if doc.focus:
                out[k] = [tuple((max(a, passage.start) - passage.start, min(b, passage.end) - passage.start)
                                for a, b in doc.focus if a < passage.end and b > passage.start)]
            elif len(offsets) == 0:
                out[k] = []
            elif whole:
                out[k] = [((int(offsets[0, 0]), int(offsets[-1, 1])),)]
            elif text in self._segments:
                out[k] = [word_spans(text, offsets, p) for p in covering(text, offsets, self._segments[text])]
            elif not self.distilled:
                props = self.segmenter.segment([text])[0]
                out[k] = [word_spans(text, offsets, p) for p in covering(text, offsets, props)]
            else:
                decode.append(k)
        if decode:
            # What the segmenter reads: this very pass's states, one per word.
            inputs = []
            for k in decode:
                passage, tokens, _ = items[k]
                offsets = words(passage.text)
                states = tokens.states[:, self._columns(self.segmenter_layers)]
                wstates = span_pool(states, tokens.offsets, ~tokens.special, [[(int(a), int(b))] for a, b in offsets])
                inputs.append((wstates.to(self.backbone.device), passage.text, offsets))
            with torch.inference_mode():
                decoded = self.segmenter.decode_many(inputs)
            for k, (_, text, offsets), props in zip(decode, inputs, decoded):
                out[k] = [word_spans(text, offsets, p) for p in covering(text, offsets, props)]
        return out  # type: ignore[return-value]

    # -- the standalone baseline ---------------------------------------------
    @torch.inference_mode()
    def _alone(self, passages: Sequence[Passage], encoded: list[Encoded], progress: bool, query: bool) -> list[Encoded]:
        """Every proposition re-encoded from its own text, after its title."""
        items = [(i, j) for i, e in enumerate(encoded) for j in range(len(e.units))]
        texts = [unit_text(passages[i].doc, encoded[i].units[j]) for i, j in items]
        titles = [self.title_of(passages[i].doc) for i, _ in items]
        vectors = mean_vectors(self.backbone, texts, titles, self.batch_size, progress)
        projected = self._cut(self.head.embed(vectors.to(self.backbone.device)))
        # A focus query's context is its text alone too; a document's stays what it was read in.
        out = [Encoded(e.vectors.copy(), e.units) for e in encoded]
        for (i, j), v, alone in zip(items, projected, vectors):
            out[i].vectors[j, : self._dim] = v
            if self.beside and query:
                out[i].vectors[j, self._dim :] = nn.functional.normalize(alone, dim=-1).numpy()
        return out


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


@torch.inference_mode()
def mean_vectors(backbone: Backbone, texts: Sequence[str], titles: Sequence[str], batch_size: int = 64, progress: bool = False,
                 desc: str = "encode alone") -> torch.Tensor:
    """(n, dim) the backbone's mean-pooled last layer over `title [SEP] text`
    (just `text` where the title is ""): `single`'s vector of a short text,
    the teacher of the student head."""
    from tqdm.auto import tqdm

    out = torch.zeros(len(texts), backbone.dim)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]) + len(titles[i]))
    for s in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", disable=not progress, leave=False):
        idx = order[s : s + batch_size]
        enc, *_ = tokenize(backbone.tokenizer, [texts[i] for i in idx], [titles[i] for i in idx], backbone.max_length)
        hidden = hidden_states(backbone, enc).float().cpu()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        out[idx] = (hidden * mask).sum(1) / mask.sum(1)
    return out
