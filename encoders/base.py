"""The one interface every encoder implements, and the machinery they share.

`Encoder.encode(passages)` is the single front door, for documents and for
queries alike: it runs the backbone over length-sorted batches and hands each
passage's token states to the encoder's `pool`, which decides which vectors to
emit and what unit each one stands for.

The machinery lives beside it, one job a module, and is re-exported here
for the encoders and callers that import it from this module:
`batching` (tokenized batches, titles, the backbone's states), `cutting`
(documents into passages, on threads) and `pooling` (units, focus masks,
span means).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from .backbone import Backbone
from .batching import (
    TITLE_TOKENS, _alone, _assemble, _n_specials, clip_title, expanded, hidden_states, prompt_length, sliced_tokens, special_template,
    title_ids, tokenize, wrapper_batch,
)
from .cutting import CUT_AHEAD, CUT_THREADS, _cutting_core, cut_ahead, cut_passages, document_tokens
from .pooling import SentenceLocator, focus_mask, l2_normalize, span_pool
from .units import Document, Encoded, Kind, Passage, Span, Tokenized, Unit

__all__ = [
    "CUT_AHEAD", "CUT_THREADS", "TITLE_TOKENS", "Backbone", "Document", "Encoded", "Encoder", "Kind", "Passage", "SentenceLocator",
    "Span", "TokenStates", "Tokenized", "Unit", "_alone", "_assemble", "_cutting_core", "_n_specials", "_query_passage", "clip_title",
    "cut_passages", "document_tokens", "focus_mask", "hidden_states", "l2_normalize", "sliced_tokens", "span_pool", "special_template",
    "title_ids", "tokenize", "wrapper_batch",
]


@dataclass
class TokenStates:
    """One passage after the backbone: a row per real token (specials included)."""

    states: torch.Tensor  # (n, dim) last-layer hidden states, float32
    offsets: np.ndarray  # (n, 2) char offsets into the passage text; (0, 0) for specials and title tokens
    # (n,) bool: not passage text - the tokenizer's specials and the title's
    # tokens, which give context (and enter a mean) but never become a unit.
    special: np.ndarray
    ids: np.ndarray  # (n,) token ids
    selected: np.ndarray | None = None  # (n,) bool: tokens the encoder's model chose (nugget)
    slots: torch.Tensor | None = None  # (prefix, dim) states of positions the encoder put before the tokens
    title: np.ndarray | None = None  # (n,) bool: the title's tokens (a subset of `special`)
    # Leading positions a checkpoint's prompt and the specials before it take
    # (encoders/recipe.py; 0 without a prompt): what a pooling that leaves the prompt out skips.
    prompt_length: int = 0


class Encoder(ABC):
    """Turns passages into vectors plus one unit record per vector."""

    name: ClassVar[str]
    kind: ClassVar[Kind]
    # Hidden layers whose states are concatenated into TokenStates.states
    # (0 = embeddings); None = the last layer only.
    layers: tuple[int, ...] | None = None
    # The network the states come from, when not the backbone's own (adapters).
    model: torch.nn.Module | None = None
    # Positions the encoder's `run` puts in front of the tokenizer's (Cross-Thought's slots).
    prefix: int = 0
    # Vectors made of this many attention-logit blocks (query blocks against
    # key blocks) are re-scored in stage 2 by the softmax over candidates
    # averaged over blocks; 0: by the inner product itself.
    attention_blocks: int = 0
    # A document's title goes in front of every passage cut from it
    # (`[CLS] title [SEP] text [SEP]`, as DPR encodes Wikipedia); set by
    # `load_encoder(title=...)`, recorded in the index's encoder config.
    title: bool = True

    def __init__(self, backbone: Backbone, batch_size: int = 32) -> None:
        self.backbone = backbone
        self.batch_size = batch_size

    # -- what an index records about the encoder ---------------------------

    def options(self) -> dict[str, Any]:
        """Encoder-specific settings that change the vectors (recorded in the manifest)."""
        return {}

    def config(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "backbone": self.backbone.name,
            "max_length": self.backbone.max_length,
            "dim": self.dim,
            "title": self.title,
            **self.options(),
            # A checkpoint's own recipe, where it makes other vectors than propdex's pooling.
            **({"recipe": self.backbone.recipe.describe()} if self.backbone.recipe.changes_vectors else {}),
        }

    def encode(
        self, passages: Sequence[Passage], *, query: bool = False, progress: bool = False
    ) -> list[Encoded]:
        """Encode passages; the i-th result belongs to the i-th passage."""
        results: list[Encoded | None] = [None] * len(passages)
        cache = self.backbone.state_cache if self.cacheable else None
        # Length-sorted batches waste little compute on padding.
        order = sorted(range(len(passages)), key=lambda i: len(passages[i].text))
        bar = tqdm(total=len(passages), desc=f"encode {self.name}", unit="psg", disable=not progress, leave=False)
        for start in range(0, len(order), self.batch_size):
            batch = [order[i] for i in range(start, min(start + self.batch_size, len(order)))]
            states = self._batch_states(passages, batch, cache, query)
            for i, encoded in zip(batch, self.pool_batch([passages[i] for i in batch], [states[i] for i in batch], query=query)):
                results[i] = encoded
            bar.update(len(batch))
        bar.close()
        return results  # type: ignore[return-value]

    def _batch_states(self, passages: Sequence[Passage], batch: list[int], cache: dict | None, query: bool = False) -> dict[int, TokenStates]:
        """Token states of the passages `batch` numbers: from `cache` (the
        backbone's, shared by the encoders that read its plain last layer)
        where it holds them, the rest from one forward pass, then cached, so
        a corpus read by several such encoders goes through the model once."""
        states: dict[int, TokenStates] = {}
        if cache is not None:
            keys = {i: (passages[i].text, self.title_of(passages[i].doc), self.max_length, query) for i in batch}
            states = {i: cache[keys[i]] for i in batch if keys[i] in cache}
            self.backbone.state_cache_hits += len(states)
        todo = [i for i in batch if i not in states]
        if todo:
            fresh = dict(zip(todo, self.forward([passages[i] for i in todo], query=query)))
            if cache is not None:
                cache.update((keys[i], fresh[i]) for i in todo)
            states |= fresh
        return states

    @property
    def cacheable(self) -> bool:
        """Are this encoder's token states the backbone's own last layer, so
        that encoders on one backbone can share them (Backbone.state_cache)?"""
        return self.model is None and self.layers is None and self.prefix == 0 and type(self).run is Encoder.run

    def encode_queries(self, queries: Sequence[str | Document]) -> list[Encoded]:
        return self.encode([_query_passage(q) for q in queries], query=True)

    @abstractmethod
    def pool(self, passage: Passage, tokens: TokenStates, *, query: bool) -> Encoded:
        """Choose the vectors of one passage and say what each stands for."""

    def pool_batch(self, passages: Sequence[Passage], tokens: Sequence[TokenStates], *, query: bool) -> list[Encoded]:
        """`pool` over one batch; encoders whose heads run better on many
        passages at once (the proposition segmenter) override it."""
        return [self.pool(p, t, query=query) for p, t in zip(passages, tokens)]

    # -- shared machinery ------------------------------------------------------
    @torch.inference_mode()
    def forward(self, passages: Sequence[Passage], query: bool = False) -> list[TokenStates]:
        """Run the backbone on one batch; returns per-passage states without
        padding. Title tokens, when the passage's document has a title, are
        in the states and marked `special`, as are the tokens of the
        checkpoint's query or document prompt (or ColBERT marker). A
        late-interaction checkpoint's queries are read at their own length,
        padded with [MASK]s that are states too (query expansion), and its
        states are projected (encoders/recipe.py)."""
        titles = [self.title_of(p.doc) for p in passages]
        tokenizer, late = self.backbone.tokenizer, self.backbone.recipe.late
        prompt = self.backbone.prompt_ids(query)
        length = late.query_length if late and query else self.max_length
        enc, offsets, special, title = tokenize(tokenizer, [p.text for p in passages], titles, length,
                                                [sliced_tokens(p) for p in passages], prompt)
        expand = late is not None and query and late.expansion
        if expand:
            enc, offsets, special, title = expanded((enc, offsets, special, title), length, tokenizer.mask_token_id, late.attend_to_expansion)
        ids = enc["input_ids"].numpy()
        mask = enc["attention_mask"]
        hidden, selected = self.run(enc | self.reading(passages, enc, offsets, special))
        hidden = self.backbone.recipe.project(hidden.float()).cpu()
        chosen = selected.cpu().numpy() if selected is not None else None
        lengths = [length] * len(passages) if expand else mask.sum(1).tolist()
        p, lead = self.prefix, prompt_length(tokenizer, prompt)
        return [
            TokenStates(hidden[i, p : p + n], offsets[i, :n], special[i, :n], ids[i, :n], None if chosen is None else chosen[i, :n],
                        hidden[i, :p] if p else None, title[i, :n], lead)
            for i, n in enumerate(lengths)
        ]

    def title_of(self, doc: Document) -> str:
        """The title text this encoder puts in front of the document's passages ("" for none)."""
        return clip_title(self.backbone.tokenizer, doc.title)[0] if self.title else ""

    def title_tokens(self, doc: Document) -> int:
        """Window tokens a document's title takes (its tokens and one more
        separator), and the checkpoint's document prompt, if it has one."""
        n = clip_title(self.backbone.tokenizer, doc.title)[1] if self.title else 0
        prompt = self.backbone.prompt_ids(query=False)
        return (n + _n_specials(self.backbone, pair=True) - _n_specials(self.backbone) if n else 0) + (0 if prompt is None else len(prompt))

    @property
    def max_length(self) -> int:
        """Tokens per passage, specials included: a late-interaction
        checkpoint's own document length (its library reads that many,
        whatever the transformer was saved with), else the backbone's."""
        late = self.backbone.recipe.late
        # Backbone.load lifted the tokenizer's limit to the checkpoint's lengths, within the model's positions.
        return self.backbone.max_length if late is None else min(late.document_length, self.backbone.tokenizer.model_max_length)

    @property
    def query_length(self) -> int:
        """Word pieces of a query's text the encoder reads; the rest is cut
        (a late-interaction checkpoint reads queries at its own length)."""
        late, prompt = self.backbone.recipe.late, self.backbone.prompt_ids(query=True)
        length = late.query_length if late else self.max_length
        return length - _n_specials(self.backbone) - (0 if prompt is None else len(prompt))

    @property
    def dim(self) -> int:
        return self.backbone.recipe.token_dim(self.backbone.dim)

    @property
    def pooled_tokens(self) -> float:
        """How many token states a stored vector is the mean of (1: a
        token's own state, or a vector that is not a mean of tokens). A
        query token meets such a mean at a lower cosine than it meets a
        token, and the coarse quantiser filed the mean between its tokens'
        lists, so stage 1 probes this many times the lists for it
        (retriever.candidates.default_nprobe)."""
        return 1.0

    @property
    def passage_units(self) -> int | None:
        """The most vectors one passage of a document yields, or None when
        documents are not read passage by passage into many vectors. The
        searcher scores a document by its best window of this many
        vectors (`window`): the span the encoder itself reads at once, so
        a long document does not outscore a short one by its length."""
        return None

    def reading(self, passages: Sequence[Passage], enc: dict[str, torch.Tensor], offsets: np.ndarray, special: np.ndarray) -> dict[str, torch.Tensor]:
        """Model inputs that change how a batch is read (an attention mask
        of another shape, position ids); none by default: every token of a
        passage reads every other."""
        return {}

    def run(self, enc: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(batch, prefix + length, dim) states of a tokenized batch and, for
        encoders that choose tokens, a (batch, length) bool mask of the choice."""
        return hidden_states(self.backbone, enc, self.layers, self.model), None

    def passages(self, doc: Document) -> list[Passage]:
        """Cut a document into windows that fit the model, on sentence boundaries."""
        return cut_passages(doc, self.backbone, window=self.max_length - _n_specials(self.backbone) - self.title_tokens(doc))


    def cut(self, docs: Iterable[Document]) -> Iterator[list[Passage]]:
        """`passages(doc)` of each document, in order, cut on threads ahead
        of the caller (`cutting.cut_ahead`): cutting is mostly tokenizing,
        which lets go of the GIL, so the next documents are cut while the
        caller encodes and a build that feeds a GPU is not held up by one CPU."""
        return cut_ahead(self.passages, docs)


def _query_passage(query: str | Document) -> Passage:
    if isinstance(query, Document):
        return Passage(query, 0, len(query.text), 0)
    return Passage.of_text(query)
