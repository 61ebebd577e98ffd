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
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from . import weights_path
from .adapters import adapt, adapter_stages, layer_stack, merged_stages
from .backbone import Backbone
from .base import SentenceLocator, TokenStates, _n_specials, focus_mask, l2_normalize
from .provenance import read_weights, verified_sha256
from .tokens import TokensEncoder
from .units import Encoded, Kind, Passage, Unit

QUERY_MODES = ("nuggets", "tokens")
# Frozen nuggets: "runs" pools each run of kept tokens; "comma" is the
# paper's chunking selector (the last comma or period of each of k equal
# chunks, else its last token), a baseline for any learned choice.
SELECTORS = ("runs", "comma")
DEFAULT_RATIO = 0.25
# How far (in tokens) an even cut may move to land on a word start.
SNAP_REACH = 1


def n_nuggets(lengths: list[int] | np.ndarray | torch.Tensor, ratio: float) -> list[int]:
    """k = ceil(n * r), at least 1, per passage of n real tokens. Exact:
    0.1 * 30 is 3.0000000000000004 in floating point, and 3 here."""
    r = Fraction(repr(float(ratio)))
    return [max(1, math.ceil(int(n) * r)) for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)]


def select(scores: torch.Tensor, attention: torch.Tensor, ratio: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The k best-scoring real tokens of each row, in position order.

    Returns (positions (b, k_max), valid (b, k_max)); padded slots point at
    position 0 and are not valid. Ties go to the earlier token."""
    k = torch.tensor(n_nuggets(attention.sum(1), ratio), device=scores.device)
    k_max = int(k.max())
    masked = scores.detach().masked_fill(~attention.bool(), float("-inf"))
    # A stable sort breaks ties by position, so the choice is deterministic.
    top = torch.sort(masked, dim=1, descending=True, stable=True).indices[:, :k_max]
    valid = torch.arange(k_max, device=scores.device)[None, :] < k[:, None]
    n = scores.shape[1]
    positions = torch.sort(torch.where(valid, top, n), dim=1).values
    valid = positions < n
    return positions.masked_fill(~valid, 0), valid


class Nuggets(NamedTuple):
    vectors: torch.Tensor  # (b, k_max, d): W^V applied to the chosen last-layer states
    positions: torch.Tensor  # (b, k_max) token positions, ascending
    valid: torch.Tensor  # (b, k_max) bool
    scores: torch.Tensor  # (b, k_max) scorer logits of the chosen tokens (carry gradient)
    projected: torch.Tensor  # (b, n, d): W^V applied to every token (queries as tokens)
    chosen: torch.Tensor  # (b, n) bool


class NuggetModel(nn.Module):
    """Backbone (private copy, LoRA above layer l) + scorer + feedback + W^V."""

    def __init__(self, model: nn.Module, layer: int, ratio: float, lora: int = 8, private: bool = False) -> None:
        super().__init__()
        n_layers = len(layer_stack(model)[1])
        if not 0 <= layer < n_layers:
            raise ValueError(f"nugget layer must be in [0, {n_layers}), got {layer}")
        if not 0 < ratio <= 1:
            raise ValueError(f"nugget ratio must be in (0, 1], got {ratio}")
        self.layer, self.ratio, self.lora = layer, ratio, lora
        self.lora_layers = list(range(layer, n_layers))
        # A private copy (`private`: `model` already is one): the feedback
        # hook must not reach other encoders sharing the backbone.
        self.encoder = adapt(model, lora, self.lora_layers) if lora else model if private else copy.deepcopy(model)
        embeddings, blocks = layer_stack(self.encoder)
        for name, p in self.encoder.named_parameters():
            p.requires_grad_("lora_" in name if lora else True)
        for frozen in (embeddings, *blocks[:layer]):
            frozen.requires_grad_(False)
        dim = int(model.config.hidden_size)
        self.scorer = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, 1))
        self.types = nn.Embedding(2, dim)  # 0 = other, 1 = nugget
        nn.init.zeros_(self.types.weight)
        self.w_v = nn.Linear(dim, dim, bias=False)
        # Identity: nuggets start as the backbone's own token states, whose
        # geometry the pretrained model already made good for similarity.
        with torch.no_grad():
            self.w_v.weight.copy_(torch.eye(dim))
        hook_at = embeddings if layer == 0 else blocks[layer - 1]
        hook_at.register_forward_hook(self._feedback)
        self._attention: torch.Tensor | None = None
        self._ratio = ratio
        self._picked: tuple[torch.Tensor, ...] | None = None  # scores, positions, valid, chosen

    def _feedback(self, module: nn.Module, inputs: Any, output: Any) -> Any:
        hidden = output[0] if isinstance(output, tuple) else output
        assert self._attention is not None, "NuggetModel layers run only through NuggetModel.forward"
        scores = self.scorer(hidden).squeeze(-1)
        positions, valid = select(scores, self._attention, self._ratio)
        # Padded slots scatter into a spare column, never over a real choice at position 0.
        n = hidden.shape[1]
        spare = torch.zeros(hidden.shape[0], n + 1, dtype=torch.bool, device=hidden.device)
        chosen = spare.scatter(1, positions.masked_fill(~valid, n), True)[:, :n]
        self._picked = (scores, positions, valid, chosen)
        hidden = hidden + self.types(chosen.long())
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, ratio: float | None = None, **extra: Any) -> Nuggets:
        self._attention, self._ratio = attention_mask, ratio or self.ratio
        try:
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if "token_type_ids" in extra:
                inputs["token_type_ids"] = extra["token_type_ids"]
            last = self.encoder(**inputs).last_hidden_state
            scores, positions, valid, chosen = self._picked  # type: ignore[misc]
        finally:
            self._attention, self._picked = None, None
        projected = self.w_v(last)
        index = positions[..., None].expand(-1, -1, projected.shape[-1])
        return Nuggets(
            projected.gather(1, index) * valid[..., None], positions, valid,
            scores.gather(1, positions) * valid, projected, chosen,
        )

    def head_state(self) -> dict[str, torch.Tensor]:
        """Scorer, type embeddings and W^V (adapters: `adapters.lora_state`)."""
        return {k: v.detach().cpu() for k, v in self.state_dict().items() if not k.startswith("encoder.")}


class DecoderBlock(nn.Module):
    """Pre-norm decoder layer whose cross-attention logits take an additive bias."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2, self.norm3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.self_qkv = nn.Linear(dim, 3 * dim)
        self.self_out = nn.Linear(dim, dim)
        self.cross_q = nn.Linear(dim, dim)
        self.cross_kv = nn.Linear(dim, 2 * dim)
        self.cross_out = nn.Linear(dim, dim)
        self.ffn = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.heads, d // self.heads).transpose(1, 2)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        b, h, t, dh = x.shape
        return x.transpose(1, 2).reshape(b, t, h * dh)

    def memory(self, nuggets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of the nuggets (computed once per text)."""
        k, v = self.cross_kv(nuggets).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def forward(self, x: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor], memory_bias: torch.Tensor,
                past: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """`x` attends causally to itself (and to `past` keys/values when
        decoding step by step); returns the output and the keys/values so far."""
        q, k, v = (self._split(t) for t in self.self_qkv(self.norm1(x)).chunk(3, dim=-1))
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        causal = past is None and x.shape[1] > 1
        x = x + self.self_out(self._merge(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)))
        q = self._split(self.cross_q(self.norm2(x)))
        # a = (q.k + s) / sqrt(d_head): SDPA scales q.k itself, so s is scaled here.
        bias = (memory_bias / math.sqrt(q.shape[-1]))[:, None, None, :]
        x = x + self.cross_out(self._merge(nn.functional.scaled_dot_product_attention(q, *memory, attn_mask=bias)))
        return x + self.ffn(self.norm3(x)), (k, v)


class NuggetDecoder(nn.Module):
    """A small Transformer decoder, trained from scratch, that reads nuggets.

    It uses the backbone's vocabulary and, frozen and tied, its word
    embeddings (in and out), so what it adds is only its layers."""

    def __init__(self, word_embeddings: nn.Embedding, layers: int = 2, heads: int = 6, max_positions: int = 512) -> None:
        super().__init__()
        dim = word_embeddings.embedding_dim
        # Not a submodule: the embeddings belong to the backbone and are not saved here.
        self._words = (word_embeddings,)
        self.positions = nn.Embedding(max_positions, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(dim)
        self.config = {"layers": layers, "heads": heads, "max_positions": max_positions}

    @property
    def vocabulary(self) -> torch.Tensor:
        return self._words[0].weight.detach()

    def hidden(self, ids: torch.Tensor, nuggets: torch.Tensor, valid: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor:
        """Output states (b, t, d) for decoder inputs `ids` given the nuggets;
        their inner products with `vocabulary` rows are the next-token logits.

        `scores` (b, k) are added to every cross-attention logit (None: no
        residual, as at inference, where the paper finds it changes little)."""
        x = self.vocabulary[ids] + self.positions(torch.arange(ids.shape[1], device=ids.device))[None]
        bias = self._bias(valid, scores, x.dtype)
        for block in self.blocks:
            x, _ = block(x, block.memory(nuggets), bias)
        return self.norm(x)

    @staticmethod
    def _bias(valid: torch.Tensor, scores: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor:
        bias = torch.zeros_like(valid, dtype=dtype) if scores is None else scores.to(dtype)
        return bias.masked_fill(~valid, float("-inf"))

    def forward(self, ids: torch.Tensor, nuggets: torch.Tensor, valid: torch.Tensor, scores: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits (b, t, vocab)."""
        return self.hidden(ids, nuggets, valid, scores) @ self.vocabulary.T

    @torch.inference_mode()
    def generate(self, nuggets: torch.Tensor, valid: torch.Tensor, start: int, end: int, max_new: int) -> list[list[int]]:
        """Greedy decoding, one token at a time with cached keys/values; each row stops at `end`."""
        ids = torch.full((nuggets.shape[0], 1), start, dtype=torch.long, device=nuggets.device)
        done = torch.zeros(nuggets.shape[0], dtype=torch.bool, device=nuggets.device)
        memories = [block.memory(nuggets) for block in self.blocks]
        bias = self._bias(valid, None, nuggets.dtype)
        past: list[tuple[torch.Tensor, torch.Tensor] | None] = [None] * len(self.blocks)
        max_new = min(max_new, self.positions.num_embeddings - 1)
        for t in range(max_new):
            x = self.vocabulary[ids[:, -1:]] + self.positions.weight[t][None, None]
            for i, block in enumerate(self.blocks):
                x, past[i] = block(x, memories[i], bias, past[i])
            nxt = (self.norm(x)[:, -1] @ self.vocabulary.T).argmax(-1)
            nxt = nxt.masked_fill(done, end)
            ids = torch.cat([ids, nxt[:, None]], dim=1)
            done |= nxt == end
            if bool(done.all()):
                break
        return [[t for t in row[1:] if t != end] for row in ids.tolist()]


def nugget_weights(nugget: NuggetModel, decoder: NuggetDecoder | None, backbone: str, max_length: int,
                   stage: str = "autoencoding") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The tensors and config that `load_nugget` reads back: heads, the
    adapters as one stage under "lora.", and the decoder in half precision
    (it is only needed to measure reconstruction)."""
    from .adapters import lora_config, lora_state

    state = nugget.head_state()
    state.update({f"lora.{k}": v for k, v in lora_state(nugget.encoder).items()})
    config: dict[str, Any] = {
        "backbone": backbone, "layer": nugget.layer, "ratio": nugget.ratio, "max_length": max_length,
        "adapters": [lora_config(nugget.lora, nugget.lora_layers) | {"prefix": "lora.", "stage": stage}] if nugget.lora else [],
    }
    if decoder is not None:
        state.update({f"decoder.{k}": v.detach().cpu().half() for k, v in decoder.state_dict().items()})
        config["decoder"] = decoder.config | {"dtype": "float16"}
    return state, config


def load_nugget(
    path: str | Path, model: nn.Module, with_decoder: bool = False, lora: int = 0,
) -> tuple[NuggetModel, NuggetDecoder | None, dict[str, Any]]:
    """The trained nugget model (its adapters merged into a private copy of
    `model`) and, when asked and shipped, its decoder. `lora` > 0 puts fresh
    trainable adapters on top, to train further (DocSplit)."""
    state, config = read_weights(path, "nugget weights", "train them with `propdex train nugget`")
    stages = adapter_stages(config)
    base = merged_stages(model, stages, state, path) if stages else model
    nugget = NuggetModel(base, config["layer"], config["ratio"], lora=lora, private=bool(stages))
    heads = {k: v for k, v in state.items() if k.split(".")[0] in ("scorer", "types", "w_v")}
    missing = nugget.load_state_dict(heads, strict=False).missing_keys
    if any(not k.startswith("encoder.") for k in missing):
        raise ValueError(f"{path}: nugget weights incomplete ({[k for k in missing if not k.startswith('encoder.')][:3]})")
    decoder = None
    if with_decoder:
        if not any(k.startswith("decoder.") for k in state):
            raise FileNotFoundError(f"{path} ships no decoder")
        dec = config["decoder"]
        decoder = NuggetDecoder(layer_stack(nugget.encoder)[0].word_embeddings, dec["layers"], dec["heads"], dec["max_positions"])
        decoder.load_state_dict({k[8:]: v.float() for k, v in state.items() if k.startswith("decoder.")})
        decoder.eval()
    return nugget.eval(), decoder, config


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
            self.nugget, _, nugget_config = load_nugget(self.path, backbone.model)
            if nugget_config["backbone"] != backbone.name and not Path(weights).is_dir():
                raise ValueError(f"the packaged nugget weights were trained on {nugget_config['backbone']}, not {backbone.name}")
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
