"""The trained nugget model (Qin & Van Durme, 2023): a scorer that keeps the
k = ceil(n * r) best tokens of a passage, feedback that tells the upper
layers which were kept, and W^V over the kept tokens' last-layer states;
and how its weights are saved and loaded.

TopK passes no gradient, so training adds the scores to every
cross-attention logit of the reconstruction decoder (`nugget_decoder`),
which is how the scorer learns what to keep.
"""
from __future__ import annotations

import copy
import math
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from .adapters import adapt, adapter_stages, layer_stack, merged_stages
from .nugget_decoder import NuggetDecoder
from .provenance import read_weights


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
