"""LoRA adapters on the backbone's attention, shared by every trained encoder.

An encoder that adapts the backbone gets a private copy (other encoders and
the segmenter share the original); at load time the adapters are merged into
that copy, so inference runs at the backbone's own speed.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
from torch import nn

# BERT-style attention projections: what LoRA adapts.
LORA_TARGETS = ["query", "key", "value"]


def upper_layers(n_layers: int, first: int | None = None) -> list[int]:
    """Layers `first`.. (default: the upper half); the lower ones stay as they
    are, which also saves their backward pass."""
    return list(range(n_layers // 2 if first is None else first, n_layers))


def adapt(model: nn.Module, r: int, layers: list[int]) -> nn.Module:
    """A copy of `model` with LoRA adapters of rank r on `layers` (the original stays untouched)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ValueError("training LoRA adapters needs peft: pip install 'propdex[lora]'") from None

    config = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=0.1, target_modules=LORA_TARGETS, layers_to_transform=layers)
    return get_peft_model(copy.deepcopy(model), config)


def lora_config(r: int, layers: list[int]) -> dict[str, Any] | None:
    """What a weights config.json records about the adapters (None: no adapters)."""
    return {"r": r, "alpha": 2 * r, "target_modules": LORA_TARGETS, "layers": layers} if r else None


def merged(model: nn.Module, lora: dict[str, Any], state: dict[str, torch.Tensor], source: str | Path) -> nn.Module:
    """A private copy of `model` with the adapters in `state` merged in."""
    adapted = adapt(model, lora["r"], lora["layers"])
    result = adapted.load_state_dict(state, strict=False)
    if result.unexpected_keys:
        raise ValueError(f"{source}: adapter weights do not fit the backbone ({result.unexpected_keys[:3]}...)")
    return adapted.merge_and_unload()


def lora_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors of an adapted model, keyed for `merged`."""
    return {k: v.detach().cpu() for k, v in model.state_dict().items() if "lora_" in k}


def adapter_stages(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The adapter rounds a weights config records, in order: `adapters`, or
    a lone `lora` entry, which is one round whose tensors are under "lora."."""
    if config.get("adapters"):
        return list(config["adapters"])
    return [config["lora"] | {"prefix": "lora."}] if config.get("lora") else []


def merged_stages(model: nn.Module, stages: list[dict[str, Any]], state: dict[str, torch.Tensor], source: str | Path) -> nn.Module:
    """A private copy of `model` with several rounds of adapters merged in
    order (a model adapted, merged, then adapted again: AE, then DocSplit).
    Each stage names the key prefix of its tensors in `state`."""
    for stage in stages:
        prefix = stage["prefix"]
        model = merged(model, stage, {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}, source)
    return model


def layer_stack(model: nn.Module) -> tuple[nn.Module, nn.ModuleList]:
    """The embeddings and the layer list of a BERT-style encoder (also inside a peft wrapper)."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and name.endswith("encoder.layer"):
            return model.get_submodule(name[: -len("encoder.layer")] + "embeddings"), module
    raise ValueError("this encoder needs a BERT-style backbone (embeddings + encoder.layer)")
