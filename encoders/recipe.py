"""What a checkpoint says about how its vectors are made, read and followed.

propdex reads a backbone's last-layer token states and pools them itself
(a mean, unit length). A checkpoint saved by sentence-transformers carries a
recipe of its own: a pooling mode (CLS for bge, a mean for MiniLM), dense
projections after it, and prompts in front of queries and documents (e5's
"query: " / "passage: "). Read as a plain encoder, such a checkpoint gives
vectors its library would not, and poor results with no error. So the
recipe is read when the backbone loads and followed where propdex makes the
same vectors as the library does:

- prompts go in front of every query and every document passage (before the
  title, as the library puts them before the text), are never a unit, and
  count in the pooled vector unless the Pooling module leaves them out;
- `single` pools by the recipe's modes (concatenated in its order), runs the
  Dense layers and normalises;
- token-level grains (tokens, nugget) read the transformer's states as
  before: a sentence-transformers recipe says nothing about tokens.

A PyLate ColBERT checkpoint is a late-interaction recipe (`LateInteraction`):
a marker token after [CLS] ([Q] or [D]), queries padded with [MASK] to a
fixed length and read whole, documents cut at their own length with
punctuation (the skiplist) dropped, every kept position a vector (the
specials included), projected by the Dense layers. `tokens` then makes the
vectors PyLate makes; the specials' vectors count for the document and
never for a sentence.

A colbert-ai checkpoint (`artifact.metadata`, `HF_ColBERT`) is the same
reading with its own names: markers [unused0]/[unused1], query_maxlen,
doc_maxlen, attend_to_mask_tokens, punctuation masked from documents, and
its `linear` projection (no bias) stored beside the transformer's weights.

What propdex cannot follow (a module of another kind, scoring by the dot
product of unnormalised vectors, colbert-ai's l2 similarity or flipr
interaction) is a one-line error naming what it met, never a silent
fallback. A directory without a recipe (a plain Hugging Face model) is
read as before.
"""
from __future__ import annotations

import hashlib
import json
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

# sentence-transformers' pooling modes, in the order it concatenates them.
POOLING_MODES = ("cls", "max", "mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
# The older spelling (one flag a mode), as checkpoints before sentence-transformers 5 save it.
LEGACY_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                  "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                  "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
# Where sentence-transformers looks for a document's prompt, in turn (encode_document).
DOCUMENT_PROMPTS = ("document", "passage", "corpus")
# colbert-ai's ColBERTConfig defaults for what changes its vectors, for a checkpoint saved without artifact.metadata.
COLBERT_AI_DEFAULTS = {"query_token_id": "[unused0]", "doc_token_id": "[unused1]", "query_maxlen": 32, "doc_maxlen": 220,
                       "attend_to_mask_tokens": False, "mask_punctuation": True, "similarity": "cosine", "interaction": "colbert"}


@dataclass(frozen=True)
class DenseLayer:
    """A sentence-transformers Dense module: activation(x W^T + b)."""

    weight: torch.Tensor = field(repr=False)  # (out, in)
    bias: torch.Tensor | None = field(repr=False)
    activation: str  # a torch.nn module's class name: Tanh, Identity, ReLU...

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        return getattr(torch.nn, self.activation)()(y)


@dataclass(frozen=True)
class LateInteraction:
    """How a ColBERT checkpoint reads queries and documents."""

    query_marker: str  # the token after [CLS] in a query ("[Q] ")
    document_marker: str
    query_length: int  # a query's positions, [MASK]s included
    document_length: int  # a passage's positions, at most
    expansion: bool  # queries padded with [MASK] to query_length, each a vector
    attend_to_expansion: bool  # the [MASK]s attend and are attended to
    skiplist: tuple[str, ...]  # tokens a document drops (punctuation)

    def describe(self) -> dict[str, Any]:
        return {"query_marker": self.query_marker, "document_marker": self.document_marker, "query_length": self.query_length,
                "document_length": self.document_length, "expansion": self.expansion,
                "attend_to_expansion": self.attend_to_expansion, "skiplist": list(self.skiplist)}


@dataclass(frozen=True)
class Recipe:
    """A checkpoint's own recipe; the default is propdex's own (a mean over
    every token, unit length, no prompts), which any plain model gets."""

    library: str = ""  # "sentence-transformers", or "" for a plain model
    pooling: tuple[str, ...] = ("mean",)
    include_prompt: bool = True
    dense: tuple[DenseLayer, ...] = ()
    normalize: bool = False
    query_prompt: str = ""
    document_prompt: str = ""
    late: LateInteraction | None = None  # a ColBERT checkpoint's reading; `dense` then projects every token

    @property
    def changes_vectors(self) -> bool:
        """Does following it make other vectors than propdex's own pooling?
        Only then does an index record it (the default path stays as built)."""
        return (self.pooling, self.dense, self.query_prompt, self.document_prompt, self.late) != (("mean",), (), "", "", None)

    def prompt(self, query: bool) -> str:
        return self.query_prompt if query else self.document_prompt

    def dim(self, hidden: int) -> int:
        """A pooled vector's dimensions (`single`)."""
        return int(self.dense[-1].weight.shape[0]) if self.dense else hidden * len(self.pooling)

    def token_dim(self, hidden: int) -> int:
        """A token vector's dimensions: projected in a late-interaction recipe."""
        return int(self.dense[-1].weight.shape[0]) if self.late and self.dense else hidden

    def project(self, states: torch.Tensor) -> torch.Tensor:
        """Token states through a late-interaction recipe's Dense layers (unchanged otherwise)."""
        if self.late is None:
            return states
        for layer in self.dense:
            states = layer(states.float())
        return states

    def pool(self, states: torch.Tensor, pooled: np.ndarray) -> torch.Tensor:
        """The recipe's sentence vector of one passage, not yet normalised:
        `states` (n, dim) are its token states, specials included, `pooled`
        (n,) the tokens its pooling reads (a prompt left out, a focus)."""
        rows = torch.from_numpy(np.flatnonzero(pooled)).to(states.device)
        x = states.index_select(0, rows).float()
        parts = []
        for mode in self.pooling:
            if mode == "cls":
                parts.append(x[0])
            elif mode == "max":
                parts.append(x.max(0).values)
            elif mode == "mean":
                parts.append(x.mean(0))
            elif mode == "mean_sqrt_len_tokens":
                parts.append(x.sum(0) / len(x) ** 0.5)
            elif mode == "weightedmean":  # weights 1..n by position among the passage's tokens
                w = rows.float() + 1
                parts.append((x * w[:, None]).sum(0) / w.sum())
            else:  # lasttoken
                parts.append(x[-1])
        v = torch.cat(parts)
        for layer in self.dense:
            v = layer(v)
        return v

    def describe(self) -> dict[str, Any]:
        """What an index's manifest records of it."""
        return {"library": self.library, "pooling": list(self.pooling), "include_prompt": self.include_prompt,
                "dense": [[*layer.weight.shape, layer.activation] for layer in self.dense], "normalize": self.normalize,
                "query_prompt": self.query_prompt, "document_prompt": self.document_prompt,
                **({"late": self.late.describe()} if self.late else {}),
                # The Dense layers' weights live beside the transformer's, which the backbone's own sha256 covers.
                **({"dense_sha256": _sha256(self.dense)} if self.dense else {})}


def _sha256(dense: tuple[DenseLayer, ...]) -> str:
    h = hashlib.sha256()
    for layer in dense:
        for t in (layer.weight, layer.bias):
            if t is not None:
                h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()


def read_recipe(source: Path) -> Recipe:
    """The recipe of the checkpoint in directory `source`; a ValueError naming
    what propdex cannot follow."""
    config = _json(source / "config.json") or {}
    if (source / "artifact.metadata").is_file() or "HF_ColBERT" in (config.get("architectures") or []):
        return _colbert_ai(source)
    modules = _json(source / "modules.json")
    if modules is None:
        return Recipe()
    st_config = _json(source / "config_sentence_transformers.json") or {}
    if any(st_config.get(k) for k in ("query_prefix", "document_prefix")) or any("pylate" in str(m.get("type", "")) for m in modules):
        return _pylate(source, modules, st_config)
    pooling: tuple[str, ...] = ("mean",)
    include_prompt, normalize, dense = True, False, []
    for i, module in enumerate(modules):
        kind = str(module.get("type", ""))
        name = kind.rsplit(".", 1)[-1] if kind.startswith("sentence_transformers.") else ""
        folder = source / module.get("path", "")
        if name == "Transformer" and i == 0:
            continue
        if name == "Pooling" and i == 1:
            pooling, include_prompt = _pooling(folder)
        elif name == "Dense" and i >= 2 and not normalize:
            dense.append(_dense(folder))
        elif name == "Normalize" and i >= 2:
            normalize = True
        else:
            raise ValueError(f"{source} is a sentence-transformers model with a {kind.rsplit('.', 1)[-1] or 'nameless'} module "
                             f"({module.get('path') or 'at the root'}) at place {i}: propdex cannot follow it")
    if not normalize and st_config.get("similarity_fn_name") in ("dot", "dot_product"):
        raise ValueError(f"{source} scores by the dot product of unnormalised vectors (its sentence-transformers recipe): "
                         "propdex's indexes hold unit vectors, and cannot follow it")
    # As encode_query / encode_document choose: the first name present, even when its prompt is empty, else the default.
    prompts = {k: v or "" for k, v in (st_config.get("prompts") or {}).items()}
    default = prompts.get(st_config.get("default_prompt_name") or "", "")
    document = next((prompts[k] for k in DOCUMENT_PROMPTS if k in prompts), default)
    return Recipe("sentence-transformers", pooling, include_prompt, tuple(dense), normalize, prompts.get("query", default), document)


def _pylate(source: Path, modules: list[dict[str, Any]], st_config: dict[str, Any]) -> Recipe:
    """A PyLate ColBERT checkpoint: a Transformer, then Dense projections of every token."""
    dense = []
    for i, module in enumerate(modules):
        kind, folder = str(module.get("type", "")), source / module.get("path", "")
        name = kind.rsplit(".", 1)[-1]
        if i == 0 and name == "Transformer":
            continue
        if i > 0 and name == "Dense":
            if (_json(folder / "config.json") or {}).get("use_residual"):
                raise ValueError(f"{folder}: a PyLate Dense module with a residual: propdex cannot follow it")
            dense.append(_dense(folder))
            continue
        raise ValueError(f"{source} is a PyLate ColBERT checkpoint with a {name or 'nameless'} module ({module.get('path') or 'at the root'}) "
                         f"at place {i}: propdex cannot follow it")
    if str(st_config.get("similarity_fn_name", "MaxSim")).lower() != "maxsim":
        raise ValueError(f"{source} is a PyLate checkpoint scored by {st_config['similarity_fn_name']}: propdex scores by MaxSim")
    late = LateInteraction(
        st_config.get("query_prefix", "[Q] "), st_config.get("document_prefix", "[D] "), int(st_config.get("query_length", 32)),
        int(st_config.get("document_length", 180)), bool(st_config.get("do_query_expansion", True)),
        bool(st_config.get("attend_to_expansion_tokens", False)), tuple(st_config.get("skiplist_words") or ()))
    return Recipe("pylate", pooling=(), dense=tuple(dense), normalize=True, late=late)


def _colbert_ai(source: Path) -> Recipe:
    """A colbert-ai checkpoint: the transformer's states through its `linear`
    projection (no bias), read as its Checkpoint reads them. Its settings are
    in `artifact.metadata` (a ColBERTConfig); a checkpoint saved without one
    gets colbert-ai's defaults, as the library gives it."""
    meta = {**COLBERT_AI_DEFAULTS, **(_json(source / "artifact.metadata") or {})}
    if meta["similarity"] != "cosine" or meta["interaction"] != "colbert":
        raise ValueError(f"{source} is a colbert-ai checkpoint scored by {meta['similarity']} similarity and {meta['interaction']} "
                         "interaction: propdex cannot follow it (it scores by MaxSim over unit vectors: cosine, colbert)")
    weight = _tensor(source, "linear.weight")
    if weight is None:
        raise ValueError(f"{source} is a colbert-ai checkpoint without linear.weight: the checkpoint is damaged")
    late = LateInteraction(
        meta["query_token_id"], meta["doc_token_id"], int(meta["query_maxlen"]), int(meta["doc_maxlen"]),
        expansion=True,  # colbert-ai always pads a query with [MASK]s to query_maxlen
        attend_to_expansion=bool(meta["attend_to_mask_tokens"]),
        skiplist=tuple(string.punctuation) if meta["mask_punctuation"] else ())
    return Recipe("colbert-ai", pooling=(), dense=(DenseLayer(weight.float(), None, "Identity"),), normalize=True, late=late)


def _pooling(folder: Path) -> tuple[tuple[str, ...], bool]:
    config = _json(folder / "config.json") or {}
    mode = config.get("pooling_mode")
    modes = ([mode] if isinstance(mode, str) else list(mode)) if mode else [m for k, m in LEGACY_POOLING.items() if config.get(k)]
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown:
        raise ValueError(f"{folder} pools by {unknown[0]!r}: propdex knows {', '.join(POOLING_MODES)}")
    return tuple(modes or ["mean"]), bool(config.get("include_prompt", True))


def _dense(folder: Path) -> DenseLayer:
    config = _json(folder / "config.json") or {}
    path = config.get("activation_function") or "torch.nn.modules.activation.Tanh"
    module, _, name = path.rpartition(".")
    if not module.startswith("torch.nn") or not isinstance(getattr(torch.nn, name, None), type):
        raise ValueError(f"{folder}: activation {path!r} is not one of torch.nn's, and propdex runs no checkpoint's own code")
    weight, bias = _tensor(folder, "linear.weight"), _tensor(folder, "linear.bias")
    if weight is None:
        raise ValueError(f"{folder}: a Dense module without linear.weight: the checkpoint is damaged")
    return DenseLayer(weight.float(), None if bias is None else bias.float(), name)


def _tensor(folder: Path, key: str) -> torch.Tensor | None:
    """One tensor of the weights in `folder` (None where they lack it), read
    alone: a colbert-ai checkpoint keeps its projection beside the whole
    transformer."""
    if (folder / "model.safetensors").is_file():
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), framework="pt") as f:
            return f.get_tensor(key) if key in f.keys() else None
    if (folder / "pytorch_model.bin").is_file():
        try:  # memory-mapped where the file is torch's zip format, read whole where it is older
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        return state.get(key)
    raise ValueError(f"{folder}: no weights (model.safetensors or pytorch_model.bin)")


def _json(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not readable JSON ({e.__class__.__name__}): the checkpoint is damaged") from None
