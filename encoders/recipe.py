"""What a checkpoint says about how its vectors are made, checked before use.

propdex reads a backbone's last-layer token states and pools them itself
(a mean, unit length). A checkpoint saved by sentence-transformers, PyLate or
colbert-ai carries a recipe of its own: a pooling mode, a projection, query
and document prompts or markers. Followed silently as a plain encoder, such a
checkpoint gives vectors its library would not, and poor results with no
error. So a recipe is read and checked when the backbone loads: one that is
propdex's own (a Transformer, mean pooling, optionally normalised, no
prompts) loads as before; any other is a one-line error that names what it
met. A directory without a recipe (a plain Hugging Face model) is read as
today.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TRANSFORMER = "sentence_transformers.models.Transformer"
POOLING = "sentence_transformers.models.Pooling"
NORMALIZE = "sentence_transformers.models.Normalize"
POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")


@dataclass(frozen=True)
class Recipe:
    """A checkpoint's own recipe, where it has one propdex follows."""

    library: str  # "sentence-transformers", or "" for a plain model
    pooling: str = "mean_tokens"
    normalize: bool = False


def read_recipe(source: Path) -> Recipe:
    """The recipe of the checkpoint in directory `source`; a ValueError naming
    what propdex cannot follow."""
    config = _json(source / "config.json") or {}
    if (source / "artifact.metadata").is_file() or "HF_ColBERT" in (config.get("architectures") or []):
        raise ValueError(f"{source} is a colbert-ai checkpoint (a linear projection and [unused0]/[unused1] markers): "
                         "propdex cannot follow its recipe yet, and would make vectors colbert-ai does not")
    modules = _json(source / "modules.json")
    if modules is None:
        return Recipe("")
    st_config = _json(source / "config_sentence_transformers.json") or {}
    if any(st_config.get(k) for k in ("query_prefix", "document_prefix")) or any("pylate" in str(m.get("type", "")) for m in modules):
        raise ValueError(f"{source} is a PyLate ColBERT checkpoint (query and document prefixes, a projection): "
                         "propdex cannot follow its recipe yet, and would make vectors PyLate does not")
    if prompts := {k: v for k, v in (st_config.get("prompts") or {}).items() if v}:
        raise ValueError(f"{source} is a sentence-transformers model with prompts {sorted(prompts)}: "
                         "propdex cannot follow them yet, and would encode without them")
    pooling, normalize = "mean_tokens", False
    for module in modules:
        kind = str(module.get("type", ""))
        if kind == TRANSFORMER:
            continue
        if kind == POOLING:
            pooling = _pooling(source / module.get("path", ""))
        elif kind == NORMALIZE:
            normalize = True
        else:
            raise ValueError(f"{source} is a sentence-transformers model with a {kind.rsplit('.', 1)[-1] or 'nameless'} module "
                             f"({module.get('path') or 'at the root'}): propdex cannot follow it yet")
    if pooling != "mean_tokens":
        raise ValueError(f"{source} pools by {pooling} (its sentence-transformers recipe): propdex mean-pools, "
                         "and cannot follow this recipe yet")
    return Recipe("sentence-transformers", pooling, normalize)


def _pooling(folder: Path) -> str:
    config = _json(folder / "config.json") or {}
    modes = [m for m in POOLING_MODES if config.get(f"pooling_mode_{m}")]
    if config.get("pooling_mode") in POOLING_MODES:
        modes = [config["pooling_mode"]]
    return "+".join(modes) or "mean_tokens"


def _json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not readable JSON ({e.__class__.__name__}): the checkpoint is damaged") from None
