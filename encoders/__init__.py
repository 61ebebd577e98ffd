"""Encoders: text in, float32 vectors plus one unit record per vector out."""
from __future__ import annotations

from typing import Any

from .backbone import DEFAULT_BACKBONE, Backbone
from .base import Encoder
from .single import SingleEncoder
from .tokens import TokensEncoder
from .units import Document, Encoded, Kind, Passage, Unit

ENCODERS: dict[str, type[Encoder]] = {cls.name: cls for cls in (SingleEncoder, TokensEncoder)}


def load_encoder(
    name: str = "tokens",
    *,
    backbone: str | Backbone = DEFAULT_BACKBONE,
    device: str = "auto",
    batch_size: int = 32,
    **options: Any,
) -> Encoder:
    """The encoder called `name` on `backbone` (a hub name, a local path or a loaded Backbone)."""
    if name not in ENCODERS:
        raise ValueError(f"unknown encoder {name!r}; choose from {', '.join(sorted(ENCODERS))}")
    if not isinstance(backbone, Backbone):
        backbone = Backbone.load(backbone, device=device, max_length=options.pop("max_length", None))
    else:
        options.pop("max_length", None)
    return ENCODERS[name](backbone, batch_size=batch_size, **options)


def encoder_from_config(config: dict[str, Any], device: str = "auto") -> Encoder:
    """Rebuild the encoder an index was made with, from its manifest entry."""
    options = {k: v for k, v in config.items() if k not in ("name", "backbone", "dim")}
    return load_encoder(config["name"], backbone=config["backbone"], device=device, **options)


__all__ = [
    "DEFAULT_BACKBONE", "ENCODERS", "Backbone", "Document", "Encoded", "Encoder", "Kind",
    "Passage", "Unit", "encoder_from_config", "load_encoder",
]
