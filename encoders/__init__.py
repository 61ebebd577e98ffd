"""Encoders: text in, float32 vectors plus one unit record per vector out.

Names are resolved lazily so that `encoders.units` and `encoders.text` (used
by readers and eval) do not pay for importing torch and transformers.
"""
from __future__ import annotations

from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .units import Document, Encoded, Kind, Passage, Unit

if TYPE_CHECKING:
    from .backbone import Backbone
    from .base import Encoder
    from .spec import EncoderSpec

DEFAULT_BACKBONE = "sentence-transformers/all-MiniLM-L6-v2"
# What runs the frozen backbone's forward pass (encoders/runtime.py).
RUNTIMES = ("torch", "onnx", "onnx-int8")
# Trained heads shipped with the package: weights/<name>/{model.safetensors,config.json}.
WEIGHTS = Path(__file__).resolve().parent / "weights"


def weights_path(name: str | Path) -> Path:
    """A packaged weights directory by name (`nugget-ae`) or else a path."""
    packaged = WEIGHTS / str(name)
    return packaged if str(name) and packaged.is_dir() else Path(name)

# name -> "module:Class"; a new encoder is one line here.
_REGISTRY = {
    "single": "single:SingleEncoder",
    "tokens": "tokens:TokensEncoder",
    "proposition": "proposition:PropositionEncoder",
    "nugget": "nugget:NuggetEncoder",
    "crossthought": "crossthought:CrossThoughtEncoder",
}
ENCODERS = tuple(_REGISTRY)
# Options added after indexes were first built, at the values that reproduce
# what those indexes stored (their manifests lack them). Kept here, not on
# the classes, so reading a manifest imports no model code (torch).
_LEGACY_OPTIONS: dict[str, dict[str, Any]] = {
    "crossthought": {"words": False},  # indexes from before `words` stored the slots alone
}


def encoder_class(name: str) -> type["Encoder"]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown encoder {name!r}; choose from {', '.join(ENCODERS)}")
    module, cls = _REGISTRY[name].split(":")
    return getattr(import_module(f".{module}", __name__), cls)


def load_encoder(
    name: "str | EncoderSpec" = "tokens",
    *,
    backbone: "str | Backbone" = DEFAULT_BACKBONE,
    device: str = "auto",
    batch_size: int = 32,
    runtime: str = "torch",
    **options: Any,
) -> "Encoder":
    """The encoder `name` names (`tokens`, `proposition:dims=64`, an
    EncoderSpec) on `backbone` (a hub name, a local path or a loaded
    Backbone); `options` add to the spec's. Options are typed and checked by
    EncoderSpec: text values convert to the types the encoder declares.
    `runtime` (torch, onnx, onnx-int8) runs a backbone loaded here."""
    from .backbone import Backbone
    from .spec import EncoderSpec

    spec = name if isinstance(name, EncoderSpec) else EncoderSpec.parse(name)
    if options:
        spec = EncoderSpec(spec.name, {**spec.options, **options})
    options = dict(spec.options)
    cls = encoder_class(spec.name)
    max_length = options.pop("max_length", None)
    title = options.pop("title", True)
    batch_size = options.pop("batch_size", batch_size)
    if not isinstance(backbone, Backbone):
        backbone = Backbone.load(backbone, device=device, max_length=max_length, runtime=runtime)
    encoder = cls(backbone, batch_size=batch_size, **options)
    encoder.title = title
    return encoder


def flag(value: Any) -> bool:
    """A switch given as a bool or as text ("1", "0", "true", "no", ...)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected a yes/no value (1/0, true/false), got {value!r}")


def recorded_config(config: dict[str, Any]) -> dict[str, Any]:
    """A manifest's encoder entry with the options it predates filled in at
    the values its index was built with: no title before titles existed, and
    each encoder's legacy options (`_LEGACY_OPTIONS`)."""
    if config["name"] not in _REGISTRY:
        raise ValueError(f"unknown encoder {config['name']!r}; choose from {', '.join(ENCODERS)}")
    return {"title": False, **_LEGACY_OPTIONS.get(config["name"], {}), **config}


def encoder_from_config(
    config: dict[str, Any], device: str = "auto", backbone: "Backbone | None" = None, runtime: str = "torch"
) -> "Encoder":
    """Rebuild the encoder an index was made with, from its manifest entry
    (on `backbone` when one is already loaded)."""
    options = {k: v for k, v in recorded_config(config).items() if k not in ("name", "backbone", "dim")}
    if backbone is None:
        from .backbone import Backbone

        # The index was built with this backbone, so it is on this machine or
        # nowhere: never wait on the network for it.
        backbone = Backbone.load(config["backbone"], device=device, max_length=options.get("max_length"), local_only=True, runtime=runtime)
    return load_encoder(config["name"], backbone=backbone, device=device, **options)


def __getattr__(name: str) -> Any:
    if name == "Backbone":
        return import_module(".backbone", __name__).Backbone
    if name == "Encoder":
        return import_module(".base", __name__).Encoder
    if name == "EncoderSpec":
        return import_module(".spec", __name__).EncoderSpec
    raise AttributeError(name)


__all__ = [
    "DEFAULT_BACKBONE", "ENCODERS", "WEIGHTS", "weights_path", "Backbone", "Document", "Encoded", "Encoder", "EncoderSpec", "Kind",
    "Passage", "Unit", "encoder_class", "encoder_from_config", "load_encoder", "recorded_config",
]
