"""An index's encoder, loaded when something is first encoded.

A writer of an existing index needs its encoder's size, title rule and
config at once (all in the manifest) and its model only to encode. A sync
of an unchanged folder, a delete or a compact encodes nothing, and loading
the backbone (torch, transformers, the weights) would be most of its time.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from . import recorded_config

if TYPE_CHECKING:
    from .base import Encoder


class DeferredEncoder:
    """The encoder of `config` (an index manifest's entry), built on first use
    of anything beyond `dim`, `title`, `name` and `config()`, by
    `encoder_from_config` on `device`. The loaded backbone must have the
    weights the index was built with (`weights_sha256`, the manifest's
    record): the check a writer makes on opening an index is made there."""

    def __init__(self, config: dict[str, Any], weights_sha256: str | None, device: str = "auto") -> None:
        self._config = recorded_config(config)
        self._weights_sha256 = weights_sha256
        self._device = device
        self._loaded: "Encoder | None" = None
        self._lock = threading.Lock()
        self.name: str = self._config["name"]
        self.dim: int = self._config["dim"]
        self.title: bool = self._config.get("title", True)

    def config(self) -> dict[str, Any]:
        return dict(self._config)

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def encoder(self) -> "Encoder":
        """The encoder itself, loaded now if it was not."""
        with self._lock:
            if self._loaded is None:
                from . import encoder_from_config

                encoder = encoder_from_config(self._config, device=self._device)
                if encoder.config() != self._config:
                    raise ValueError(f"encoder {encoder.config()} rebuilt here differs from the index's {self._config}")
                if self._weights_sha256 and encoder.backbone.weights_hash != self._weights_sha256:
                    raise ValueError(f"backbone {encoder.backbone.name!r} here has other weights than the index was built with")
                self._loaded = encoder
            return self._loaded

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not found above: never load a model for a private name (copy, pickle)
            raise AttributeError(name)
        return getattr(self.encoder(), name)
