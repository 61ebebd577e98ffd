"""Tokenized batches for the backbone, and the states it gives back.

A batch is assembled from each passage's own tokens, kept from when its
document was cut, and the tokenizer's layout of special tokens: a passage is
tokenized once, and the batch is the tokenizer's own bit for bit. The
transformers tokenizer stays the reference the assembly is tested against,
and the fallback where it cannot apply. A document's title goes in front of
each of its passages as the first text of a pair.
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .backbone import Backbone
from .cutting import document_tokens
from .units import Passage


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
             tokens: Sequence[tuple[np.ndarray, np.ndarray] | None] | None = None,
             prompt: np.ndarray | None = None) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """A padded batch (input_ids, attention_mask[, token_type_ids]), the (b, L, 2)
    char offsets into each text, the (b, L) mask of tokens that are not text
    and the (b, L) mask of title tokens.

    A text with a title is tokenized as the pair (title, text); its title
    tokens get offsets (0, 0) and count as special. Token types stay 0: a
    sentence encoder is trained on single segments, and DPR-style `title
    [SEP] text` is one segment to it. Texts without a title are tokenized
    alone, exactly as before titles existed.

    A `prompt` (token ids: a checkpoint's "query: " or ColBERT's [Q] marker,
    encoders/recipe.py) goes right after the leading specials of every row,
    before the title, as its library puts it in front of the text, and
    inside `max_length`: its tokens are special and never a title's.

    The batch is assembled from each text's tokens, the same batch bit for
    bit as the tokenizer's own (the transformers wrapper, the fallback, is
    slow on long batches): `tokens` gives a text's ids and offsets where
    they are known already (`sliced_tokens`), the others are tokenized
    alone here.
    """
    if (template := special_template(tokenizer)) is not None:
        tokens = [t if t is not None else _alone(tokenizer, text) for t, text in zip(tokens or [None] * len(texts), texts)]
        assembled = _assemble(tokenizer, template, tokens, titles, max_length, prompt)
        if assembled is not None:
            return assembled
    return wrapper_batch(tokenizer, texts, titles, max_length, prompt)


def prompt_length(tokenizer: Any, prompt: np.ndarray | None) -> int:
    """Leading positions of a row that a prompt and the specials before it
    take (sentence-transformers' prompt_length: what `include_prompt=False`
    leaves out of a pooled vector); 0 without a prompt."""
    return _leading(tokenizer) + len(prompt) if prompt is not None and len(prompt) else 0


def _leading(tokenizer: Any) -> int:
    """The specials in front of a text ([CLS]), where a prompt goes after."""
    template = special_template(tokenizer)
    return len(template[0][0]) if template else 1


def wrapper_batch(tokenizer: Any, texts: Sequence[str], titles: Sequence[str], max_length: int,
                  prompt: np.ndarray | None = None) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """`tokenize`'s batch as the transformers tokenizer makes it: for a row
    to truncate, a tokenizer without a fast core, and as the reference the
    assembled batch is tested against. Texts with a title and texts without
    are tokenized apart (pairs and single texts), then merged."""
    groups = [[i for i, t in enumerate(titles) if not t], [i for i, t in enumerate(titles) if t]]
    n = 0 if prompt is None else len(prompt)
    parts = [(rows, *_wrapper_part(tokenizer, texts, titles, rows, titled, max_length - n)) for titled, rows in enumerate(groups) if rows]
    if len(parts) == 1:
        rows, enc, offsets, special, title = parts[0]
        batch = dict(enc), offsets, special, title
    else:
        batch = _merge_parts(tokenizer, parts, len(texts))
    return _insert(batch, prompt, _leading(tokenizer)) if n else batch


def _insert(batch: tuple, prompt: np.ndarray, at: int) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """A batch with the prompt's ids in every row at position `at`: attended,
    special, not a title, at offsets (0, 0), token type 0."""
    enc, offsets, special, title = batch
    rows, n = len(offsets), len(prompt)

    def put(a, value):
        fill = np.broadcast_to(np.asarray(value, dtype=np.asarray(a).dtype), (rows, n, *np.asarray(a).shape[2:]))
        return np.concatenate([a[:, :at], fill, a[:, at:]], axis=1)

    out = {k: torch.from_numpy(put(v.numpy(), prompt if k == "input_ids" else 1 if k == "attention_mask" else 0)) for k, v in enc.items()}
    return out, put(offsets, 0), put(special, True), put(title, False)


def expanded(batch: tuple, length: int, mask_id: int, attend: bool) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """A query batch padded with [MASK] to `length` (ColBERT's query
    expansion): every padding position becomes a [MASK], attended only when
    the checkpoint says so, special, at offsets (0, 0)."""
    enc, offsets, special, title = batch
    rows, width = enc["input_ids"].shape
    attention = torch.zeros((rows, length), dtype=enc["attention_mask"].dtype)
    attention[:, :width] = enc["attention_mask"]
    pad = attention == 0
    out = {k: torch.zeros((rows, length), dtype=v.dtype) for k, v in enc.items()}
    for k, v in enc.items():
        out[k][:, :width] = v
    out["input_ids"][pad] = mask_id
    out["attention_mask"] = torch.where(pad, int(attend), attention)
    grow = ((0, 0), (0, length - width))
    return (out, np.pad(offsets, (*grow, (0, 0))), np.pad(special, grow, constant_values=True) | pad.numpy(),
            np.pad(title, grow))


def _wrapper_part(tokenizer: Any, texts: Sequence[str], titles: Sequence[str], rows: list[int], titled: int,
                  max_length: int) -> tuple[Any, np.ndarray, np.ndarray, np.ndarray]:
    """The transformers tokenizer's batch of the texts `rows` numbers, all
    with a title (`titled`, as (title, text) pairs) or all without: its
    encoding, offsets, not-text mask and title mask, title tokens counted
    as specials at offsets (0, 0) and token types all 0."""
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
    return enc, offsets, special, title


def _merge_parts(tokenizer: Any, parts: list[tuple], n: int) -> tuple[dict[str, torch.Tensor], np.ndarray, np.ndarray, np.ndarray]:
    """Both kinds of row in one batch: each part padded to the longer one's
    length, its rows put back in their places among the `n`."""
    length = max(p[1]["input_ids"].shape[1] for p in parts)
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


def _assemble(tokenizer: Any, template: tuple, tokens: Sequence[tuple[np.ndarray, np.ndarray]], titles: Sequence[str], max_length: int,
              prompt: np.ndarray | None = None):
    """`tokenize`'s batch built from tokens already cut and the tokenizer's
    `special_template`, or None when a row would be truncated."""
    (before, after), (pair_before, between, pair_after) = template
    model_max = tokenizer.model_max_length if tokenizer.model_max_length < 100_000 else 1 << 30
    lead = np.zeros(0, dtype=np.int64) if prompt is None else prompt
    rows = []  # (ids, kind per token: 0 special or prompt, 1 title, 2 text, text offsets)
    for (ids, offsets), title in zip(tokens, titles):
        if title:
            t = title_ids(tokenizer, title)
            parts = (pair_before, lead, t, between, ids, pair_after)
            limit = min(max_length + TITLE_TOKENS + 1, model_max)
        else:
            parts = (before, lead, ids, after)
            limit = min(max_length, model_max)
        kinds = (0, 0, 1, 0, 2, 0) if title else (0, 0, 2, 0)
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
    """Special tokens the tokenizer adds around one text (around a pair: `pair`),
    which a window of text leaves room for."""
    return backbone.tokenizer.num_special_tokens_to_add(pair=pair)
