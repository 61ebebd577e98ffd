"""The one interface every encoder implements, and the machinery they share.

`Encoder.encode(passages)` is the single front door, for documents and for
queries alike: it runs the backbone over length-sorted batches and hands each
passage's token states to the encoder's `pool`, which decides which vectors to
emit and what unit each one stands for.
"""
from __future__ import annotations

import bisect
import functools
import os
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar

import numpy as np
import torch
from tqdm.auto import tqdm

from .backbone import Backbone
from .units import Document, Encoded, Kind, Passage, Span, Tokenized, Unit

# `Encoder.cut`: threads that cut documents, and how far ahead of the encoder they may run.
CUT_THREADS = min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
CUT_AHEAD = 64


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
    # Options added after indexes were first built, at the values that
    # reproduce what those indexes stored (their manifests lack them).
    legacy_options: ClassVar[dict[str, Any]] = {}
    # A document's title goes in front of every passage cut from it
    # (`[CLS] title [SEP] text [SEP]`, as DPR encodes Wikipedia); set by
    # `load_encoder(title=...)`, recorded in the index's encoder config.
    title: bool = True

    def __init__(self, backbone: Backbone, batch_size: int = 32) -> None:
        self.backbone = backbone
        self.batch_size = batch_size

    # -- what an index records about the encoder ---------------------------
    @property
    def dim(self) -> int:
        return self.backbone.dim

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
        }

    # -- the front door ------------------------------------------------------
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
            states: dict[int, TokenStates] = {}
            if cache is not None:
                keys = {i: (passages[i].text, self.title_of(passages[i].doc), self.max_length) for i in batch}
                states = {i: cache[keys[i]] for i in batch if keys[i] in cache}
                self.backbone.state_cache_hits += len(states)
            todo = [i for i in batch if i not in states]
            if todo:
                fresh = dict(zip(todo, self.forward([passages[i] for i in todo])))
                if cache is not None:
                    cache.update((keys[i], fresh[i]) for i in todo)
                states |= fresh
            for i, encoded in zip(batch, self.pool_batch([passages[i] for i in batch], [states[i] for i in batch], query=query)):
                results[i] = encoded
            bar.update(len(batch))
        bar.close()
        return results  # type: ignore[return-value]

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
    def forward(self, passages: Sequence[Passage]) -> list[TokenStates]:
        """Run the backbone on one batch; returns per-passage states without
        padding. Title tokens, when the passage's document has a title, are
        in the states and marked `special`."""
        titles = [self.title_of(p.doc) for p in passages]
        enc, offsets, special, title = tokenize(self.backbone.tokenizer, [p.text for p in passages], titles, self.max_length,
                                                [sliced_tokens(p) for p in passages])
        ids = enc["input_ids"].numpy()
        mask = enc["attention_mask"]
        hidden, selected = self.run(enc | self.reading(passages, enc, offsets, special))
        hidden = hidden.float().cpu()
        chosen = selected.cpu().numpy() if selected is not None else None
        lengths = mask.sum(1).tolist()
        p = self.prefix
        return [
            TokenStates(hidden[i, p : p + n], offsets[i, :n], special[i, :n], ids[i, :n], None if chosen is None else chosen[i, :n],
                        hidden[i, :p] if p else None, title[i, :n])
            for i, n in enumerate(lengths)
        ]

    def title_of(self, doc: Document) -> str:
        """The title text this encoder puts in front of the document's passages ("" for none)."""
        return clip_title(self.backbone.tokenizer, doc.title)[0] if self.title else ""

    def title_tokens(self, doc: Document) -> int:
        """Window tokens a document's title takes: its tokens and one more separator."""
        n = clip_title(self.backbone.tokenizer, doc.title)[1] if self.title else 0
        return n + _n_specials(self.backbone, pair=True) - _n_specials(self.backbone) if n else 0

    @property
    def max_length(self) -> int:
        """Tokens per passage, specials included."""
        return self.backbone.max_length

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
        """`passages(doc)` of each document, in order, cut on CUT_THREADS
        threads up to CUT_AHEAD documents ahead of the caller. Cutting is
        mostly tokenizing, which lets go of the GIL: the threads cut the next
        documents while the caller encodes, and a build that feeds a GPU is
        held up by the CPU (one thread cut 20 documents a second)."""
        docs = iter(docs)
        with ThreadPoolExecutor(CUT_THREADS, thread_name_prefix="propdex-cut") as pool:
            pending = deque(pool.submit(self.passages, d) for d in islice(docs, CUT_AHEAD))
            while pending:
                passages = pending.popleft().result()
                for d in islice(docs, 1):
                    pending.append(pool.submit(self.passages, d))
                yield passages


TITLE_TOKENS = 32  # at most this many of a title's tokens go in front of each passage


@functools.lru_cache(maxsize=4096)
def clip_title(tokenizer: Any, title: str) -> tuple[str, int]:
    """The title cut after its TITLE_TOKENS-th token (whole, when shorter), and its tokens."""
    title = title.strip()
    if not title:
        return "", 0
    offsets = document_tokens(tokenizer, title)[0].offsets
    if len(offsets) <= TITLE_TOKENS:
        return title, len(offsets)
    # A cut inside a word can split into other pieces: count what the encoder will see.
    clipped = title[: offsets[TITLE_TOKENS - 1][1]]
    return clipped, len(document_tokens(tokenizer, clipped)[0].ids)


def tokenize(tokenizer: Any, texts: Sequence[str], titles: Sequence[str], max_length: int,
             tokens: Sequence[tuple[np.ndarray, np.ndarray] | None] | None = None) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """A padded batch (input_ids, attention_mask[, token_type_ids]), the (b, L, 2)
    char offsets into each text, the (b, L) mask of tokens that are not text
    and the (b, L) mask of title tokens.

    A text with a title is tokenized as the pair (title, text); its title
    tokens get offsets (0, 0) and count as special. Token types stay 0: a
    sentence encoder is trained on single segments, and DPR-style `title
    [SEP] text` is one segment to it. Texts without a title are tokenized
    alone, exactly as before titles existed.

    The batch is assembled from each text's tokens, the same batch bit for
    bit as the tokenizer's own (the transformers wrapper, the fallback, is
    slow on long batches): `tokens` gives a text's ids and offsets where
    they are known already (`sliced_tokens`), the others are tokenized
    alone here.
    """
    if (template := special_template(tokenizer)) is not None:
        tokens = [t if t is not None else _alone(tokenizer, text) for t, text in zip(tokens or [None] * len(texts), texts)]
        assembled = _assemble(tokenizer, template, tokens, titles, max_length)
        if assembled is not None:
            return assembled
    return wrapper_batch(tokenizer, texts, titles, max_length)


def wrapper_batch(tokenizer: Any, texts: Sequence[str], titles: Sequence[str], max_length: int) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """`tokenize`'s batch as the transformers tokenizer makes it: for a row
    to truncate, a tokenizer without a fast core, and as the reference the
    assembled batch is tested against."""
    groups = [[i for i, t in enumerate(titles) if not t], [i for i, t in enumerate(titles) if t]]
    parts = []
    for titled, rows in enumerate(groups):
        if not rows:
            continue
        args = ([titles[i] for i in rows], [texts[i] for i in rows]) if titled else ([texts[i] for i in rows],)
        # A title adds at most TITLE_TOKENS + 1 tokens beyond the text's window.
        limit = min(max_length + (TITLE_TOKENS + 1) * titled, tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else 1 << 30)
        enc = tokenizer(*args, padding=True, truncation="only_second" if titled else True, max_length=limit,
                        return_offsets_mapping=True, return_special_tokens_mask=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping").numpy()
        special = enc.pop("special_tokens_mask").numpy().astype(bool)
        title = np.zeros_like(special)
        if titled:
            for r in range(len(rows)):
                title[r] = [s == 0 for s in enc.sequence_ids(r)]
            special |= title
            offsets[title] = 0
        if "token_type_ids" in enc:
            enc["token_type_ids"] = torch.zeros_like(enc["token_type_ids"])
        parts.append((rows, enc, offsets, special, title))
    if len(parts) == 1:
        rows, enc, offsets, special, title = parts[0]
        return dict(enc), offsets, special, title
    # Both kinds in one batch: pad both to one length, put rows back in order.
    length = max(p[1]["input_ids"].shape[1] for p in parts)
    n = len(texts)
    keys = list(parts[0][1].keys())
    out = {k: torch.full((n, length), tokenizer.pad_token_id if k == "input_ids" else 0, dtype=parts[0][1][k].dtype) for k in keys}
    all_offsets = np.zeros((n, length, 2), dtype=parts[0][2].dtype)
    all_special = np.ones((n, length), dtype=bool)
    all_title = np.zeros((n, length), dtype=bool)
    for rows, enc, offsets, special, title in parts:
        width = enc["input_ids"].shape[1]
        for k in keys:
            out[k][rows, :width] = enc[k]
        all_offsets[rows, :width] = offsets
        all_special[rows, :width] = special
        all_title[rows, :width] = title
    return out, all_offsets, all_special, all_title


def sliced_tokens(passage: Passage) -> tuple[np.ndarray, np.ndarray] | None:
    """A passage's token ids and char offsets into its text, from its
    document's tokenization (None when the cut did not keep them)."""
    if passage.tokens is None:
        return None
    tokenized, first, last = passage.tokens
    return tokenized.ids[first:last], tokenized.offsets[first:last] - passage.start


def _alone(tokenizer: Any, text: str) -> tuple[np.ndarray, np.ndarray]:
    tokenized, _ = document_tokens(tokenizer, text)
    return tokenized.ids, tokenized.offsets


@functools.lru_cache(maxsize=16)
def special_template(tokenizer: Any) -> tuple[tuple[list[int], list[int]], tuple[list[int], list[int], list[int]]] | None:
    """Where the tokenizer puts its specials: (before, after) one text and
    (before, between, after) a pair, found by tokenizing "a" and ("a", "b");
    None when that cannot be read off (another layout, left padding)."""
    try:
        a = tokenizer("a", add_special_tokens=False)["input_ids"]
        b = tokenizer("b", add_special_tokens=False)["input_ids"]
        one, two = tokenizer("a"), tokenizer("a", "b")
        kinds_one, kinds_two = one.sequence_ids(0), two.sequence_ids(0)
    except (AttributeError, ValueError, TypeError):
        return None
    if getattr(tokenizer, "padding_side", "right") != "right" or tokenizer.pad_token_id is None:
        return None

    def split(ids: list[int], kinds: list[int | None], texts: list[list[int]]) -> list[list[int]] | None:
        parts: list[list[int]] = [[]]
        for i, k in zip(ids, kinds):
            if k is None:
                parts[-1].append(i)
            elif len(parts) == 2 * k + 1:
                parts += [[i], []]  # the text's first token, then what follows it
            else:
                parts[-2].append(i)
        if len(parts) != 2 * len(texts) + 1 or [parts[2 * j + 1] for j in range(len(texts))] != texts:
            return None
        return parts[0::2]

    single, pair = split(one["input_ids"], kinds_one, [a]), split(two["input_ids"], kinds_two, [a, b])
    if single is None or pair is None:
        return None
    return (single[0], single[1]), (pair[0], pair[1], pair[2])


@functools.lru_cache(maxsize=4096)
def title_ids(tokenizer: Any, title: str) -> np.ndarray:
    """A (clipped) title's token ids, no specials; shared, do not modify."""
    return document_tokens(tokenizer, title)[0].ids


def _assemble(tokenizer: Any, template: tuple, tokens: Sequence[tuple[np.ndarray, np.ndarray]], titles: Sequence[str], max_length: int):
    """`tokenize`'s batch built from tokens already cut and the tokenizer's
    `special_template`, or None when a row would be truncated."""
    (before, after), (pair_before, between, pair_after) = template
    model_max = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else 1 << 30
    rows = []  # (ids, kind per token: 0 special, 1 title, 2 text, text offsets)
    for (ids, offsets), title in zip(tokens, titles):
        if title:
            t = title_ids(tokenizer, title)
            parts = (pair_before, t, between, ids, pair_after)
            limit = min(max_length + TITLE_TOKENS + 1, model_max)
        else:
            parts = (before, ids, after)
            limit = min(max_length, model_max)
        kinds = (0, 1, 0, 2, 0) if title else (0, 2, 0)
        if sum(len(p) for p in parts) > limit:
            return None
        rows.append((np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]),
                     np.concatenate([np.full(len(p), k, dtype=np.int8) for p, k in zip(parts, kinds)]), offsets))
    length = max(len(r[0]) for r in rows)
    n = len(rows)
    input_ids = np.full((n, length), tokenizer.pad_token_id, dtype=np.int64)
    attention = np.zeros((n, length), dtype=np.int64)
    all_offsets = np.zeros((n, length, 2), dtype=np.int64)
    special = np.ones((n, length), dtype=bool)
    title = np.zeros((n, length), dtype=bool)
    for r, (ids, kinds, offsets) in enumerate(rows):
        m = len(ids)
        input_ids[r, :m] = ids
        attention[r, :m] = 1
        text = kinds == 2
        all_offsets[r, :m][text] = offsets
        special[r, :m] = ~text
        title[r, :m] = kinds == 1
    enc = {"input_ids": torch.from_numpy(input_ids)}
    if "token_type_ids" in tokenizer.model_input_names:
        enc["token_type_ids"] = torch.zeros_like(enc["input_ids"])
    enc["attention_mask"] = torch.from_numpy(attention)
    return enc, all_offsets, special, title


def hidden_states(backbone: Backbone, enc: Any, layers: Sequence[int] | None = None, model: torch.nn.Module | None = None) -> torch.Tensor:
    """(batch, length, dim * len(layers)) states of a tokenized batch, from
    `model` (default: the backbone's)."""
    model = model or backbone.model
    if backbone.runtime != "torch" and model is backbone.model:
        every = range(backbone.model.config.num_hidden_layers + 1)
        return backbone.session.states(enc, [every[-1]] if layers is None else [every[i] for i in layers])
    inputs = {k: v.to(backbone.device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids", "position_ids")}
    if layers is None:
        return model(**inputs).last_hidden_state
    every = model(**inputs, output_hidden_states=True).hidden_states
    return torch.cat([every[i] for i in layers], dim=-1)


def _n_specials(backbone: Backbone, pair: bool = False) -> int:
    return backbone.tokenizer.num_special_tokens_to_add(pair=pair)


def _query_passage(query: str | Document) -> Passage:
    if isinstance(query, Document):
        return Passage(query, 0, len(query.text), 0)
    return Passage.of_text(query)


def cut_passages(doc: Document, backbone: Backbone, window: int, pack: bool = True) -> list[Passage]:
    """Greedy packing of whole sentences into windows of at most `window` tokens
    (with `pack=False`, one sentence per passage).

    A sentence longer than the window is cut at token boundaries, so no text is
    dropped. Passages that hold no focus span are left out: they have nothing
    to represent. The document is tokenized once, here: each passage keeps
    its slice of those tokens (`Passage.tokens`) when that slice is what its
    text tokenizes to, so the encoder does not tokenize it again.
    """
    sentences = doc.sentences or ((0, len(doc.text)),)
    tokenized, words = document_tokens(backbone.tokenizer, doc.text)
    token_starts = tokenized.offsets[:, 0].tolist()
    token_ends = tokenized.offsets[:, 1].tolist()

    def n_tokens(a: int, b: int) -> int:
        return bisect.bisect_left(token_starts, b) - bisect.bisect_left(token_starts, a)

    pieces: list[tuple[int, int, int]] = []  # (start, end, sentence index)
    for si, (a, b) in enumerate(sentences):
        if n_tokens(a, b) <= window:
            pieces.append((a, b, si))
            continue
        first = bisect.bisect_left(token_starts, a)
        last = bisect.bisect_left(token_starts, b)
        for t in range(first, last, window):
            end_token = min(t + window, last) - 1
            pieces.append((token_starts[t] if t > first else a, token_ends[end_token] if end_token < last - 1 else b, si))

    def passage(group: list[tuple[int, int, int]]) -> Passage:
        start, end = group[0][0], group[-1][1]
        first, last = bisect.bisect_left(token_starts, start), bisect.bisect_left(token_starts, end)
        if words is None:
            return Passage(doc, start, end, group[0][2])
        # A window that starts or ends inside a word would tokenize otherwise alone ("##ing" vs "ing").
        starts_clean = first == 0 or token_ends[first - 1] <= start and (first == len(words) or words[first] != words[first - 1])
        ends_clean = last == first or token_ends[last - 1] <= end and (last == len(words) or words[last] != words[last - 1])
        return Passage(doc, start, end, group[0][2], (tokenized, first, last) if starts_clean and ends_clean else None)

    passages: list[Passage] = []
    current: list[tuple[int, int, int]] = []
    used = 0
    for piece in pieces:
        size = n_tokens(piece[0], piece[1])
        if current and (used + size > window or not pack):
            passages.append(passage(current))
            current, used = [], 0
        current.append(piece)
        used += size
    if current:
        passages.append(passage(current))
    if doc.focus:
        passages = [p for p in passages if any(a < p.end and b > p.start for a, b in doc.focus)]
    return passages


def document_tokens(tokenizer: Any, text: str) -> tuple[Tokenized, list[int] | None]:
    """`text` tokenized without specials or truncation, and each token's word
    (None from a tokenizer that does not say)."""
    core = _cutting_core(tokenizer)
    if core is not None:
        # encode_batch, not encode: only the batch call lets go of the GIL, so cutting threads run side by side.
        found = core.encode_batch([text], add_special_tokens=False)[0]
        ids, offsets, words = found.ids, found.offsets, found.word_ids
    else:
        # verbose=False: a long document is expected here, it is what gets cut.
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, truncation=False, verbose=False)
        ids, offsets = enc["input_ids"], enc["offset_mapping"]
        try:
            words = enc.word_ids()
        except (AttributeError, ValueError):
            words = None
    if words is not None and None in words:
        words = None
    return Tokenized(np.asarray(ids, dtype=np.int64), np.asarray(offsets, dtype=np.int64).reshape(-1, 2)), words


@functools.lru_cache(maxsize=16)
def _cutting_core(tokenizer: Any) -> Any:
    """A private copy of a fast tokenizer's Rust core that never truncates or
    pads, or None for a tokenizer without one. Documents are cut on threads
    (`Encoder.cut`) while the encoder tokenizes batches, and the transformers
    wrapper sets truncation and padding on its core for every call: a
    shared core could cut a document at a batch's length."""
    core = getattr(tokenizer, "_tokenizer", None)
    if core is None or not hasattr(core, "to_str"):
        return None
    core = type(core).from_str(core.to_str())
    core.no_truncation()
    core.no_padding()
    return core


class SentenceLocator:
    """Maps document character offsets to (sentence index, offset in that sentence)."""

    def __init__(self, doc: Document) -> None:
        self.doc = doc
        self.sentences = doc.sentences or ((0, len(doc.text)),)
        self.starts = [s for s, _ in self.sentences]

    def sentence_of(self, char: int) -> int:
        return max(0, bisect.bisect_right(self.starts, char) - 1)

    def units(self, spans: np.ndarray, kind: Kind) -> list[Unit]:
        """`unit` of each one-span row of (n, 2) document char spans, at once
        (a token index makes a unit per token)."""
        starts = np.asarray(self.starts)
        first = np.maximum(np.searchsorted(starts, spans[:, 0], side="right") - 1, 0)
        last = np.maximum(np.searchsorted(starts, spans[:, 1] - 1, side="right") - 1, 0)
        local = (spans - starts[first][:, None]).tolist()
        doc_id = self.doc.id
        return [Unit(doc_id, f, ((a, b),), kind, l) for f, (a, b), l in zip(first.tolist(), local, last.tolist())]

    def unit(self, spans: Sequence[Span], kind: Kind) -> Unit:
        """A unit for document-level char spans, re-based onto its first sentence."""
        first = self.sentence_of(spans[0][0])
        last = self.sentence_of(max(e for _, e in spans) - 1)
        base = self.starts[first]
        return Unit(self.doc.id, first, tuple((a - base, b - base) for a, b in spans), kind, last)


def focus_mask(doc: Document, char_spans: np.ndarray) -> np.ndarray:
    """True for tokens (document char spans, (n, 2)) that overlap a focus span."""
    if not doc.focus:
        return np.ones(len(char_spans), dtype=bool)
    keep = np.zeros(len(char_spans), dtype=bool)
    for a, b in doc.focus:
        keep |= (char_spans[:, 0] < b) & (char_spans[:, 1] > a)
    return keep


def span_pool(states: torch.Tensor, offsets: np.ndarray, real: np.ndarray, groups: Sequence[Sequence[Span]]) -> torch.Tensor:
    """Mean of the token states under each group of char spans.

    A token belongs to a group when its char span overlaps one of the group's
    spans (subword tokens map through the tokenizer's offsets); `real` masks
    out specials and padding. Rows of groups no token overlaps are zero.
    """
    member = np.zeros((len(groups), len(offsets)), dtype=bool)
    owner = np.array([g for g, spans in enumerate(groups) for _ in spans], dtype=np.int64)
    if len(owner):
        spans = np.array([span for group in groups for span in group], dtype=np.int64).reshape(-1, 2)
        hit = (offsets[None, :, 0] < spans[:, 1, None]) & (offsets[None, :, 1] > spans[:, 0, None]) & real[None]
        np.logical_or.at(member, owner, hit)
    weights = torch.from_numpy(member.astype(np.float32)).to(states.device)
    return (weights @ states) / weights.sum(1, keepdim=True).clamp(min=1)


def l2_normalize(x: torch.Tensor) -> np.ndarray:
    return torch.nn.functional.normalize(x.float(), dim=-1).numpy().astype(np.float32, copy=False)
