"""The proposition head and its teacher.

The student (`PropositionHead`) maps a proposition's in-context features -
its tokens' mean states beside its sentence's, from the one backbone pass
- into the teacher's space. The teacher (`mean_vectors`) is the backbone's
mean vector of a text read alone, after its title, seen through the
head's query map: the side queries are encoded on, so that queries need no
segmenting and share the propositions' space.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .adapters import adapter_stages, merged_stages
from .backbone import Backbone
from .batching import hidden_states, tokenize
from .pooling import span_pool
from .provenance import read_weights
from .units import Span


def leading(v: torch.Tensor, dims: int) -> torch.Tensor:
    """The leading `dims` dimensions, re-normalised (all of them for 0):
    what `proposition:dims=` indexes, and what training's Matryoshka term
    and epoch selection score."""
    return nn.functional.normalize(v[:, :dims] if dims else v, dim=-1)


class PropositionHead(nn.Module):
    """Student: in-context features -> MLP -> L2-normalised `out_dim` vector,
    plus (`query_dim`) the linear map that puts the backbone's mean vector
    of a text - a query, or the teacher's proposition - in the same space.

    With a query map the student's output is a residual on the projected
    in-context means (the proposition's last-layer mean, plus
    `sentence_weight` times its sentence's, as the teacher mixes them):
    untrained, the head is mask pooling seen through the teacher's map."""

    def __init__(self, dim: int, hidden: int, out_dim: int, query_dim: int | None = None, sentence_weight: float = 0.0) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, out_dim))
        self.query = nn.Linear(query_dim, out_dim) if query_dim else None
        self.query_dim = query_dim
        self.sentence_weight = sentence_weight

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out = self.mlp(features)
        if self.query is not None:
            # The base the MLP corrects: the proposition's last-layer mean (the
            # first `query_dim` features) plus its sentence's (the last ones),
            # mixed as in the teacher, through the query map.
            d = self.query_dim
            base = nn.functional.normalize(features[:, :d], dim=-1)
            if self.sentence_weight:
                base = base + self.sentence_weight * nn.functional.normalize(features[:, -d:], dim=-1)
            out = out + self.query(nn.functional.normalize(base, dim=-1))
        return nn.functional.normalize(out, dim=-1)

    def embed(self, vectors: torch.Tensor) -> torch.Tensor:
        """Backbone mean vectors (queries, or texts alone) -> the shared space."""
        if self.query is None:
            raise ValueError("this proposition head has no query map (a LoRA head: queries go through its MLP)")
        return nn.functional.normalize(self.query(nn.functional.normalize(vectors, dim=-1)), dim=-1)


def load_weights(path: str | Path, model: nn.Module) -> tuple[PropositionHead, nn.Module, dict[str, Any]]:
    """The head, the backbone model to use (adapted and merged when the
    weights carry LoRA adapters, else `model` itself), and the config."""
    state, config = read_weights(path, "proposition head", "train one with `propdex train proposition`")
    head = PropositionHead(config["dim"], config["hidden"], config["out_dim"], config.get("query_dim"), config.get("sentence_weight", 0.0))
    head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    if stages := adapter_stages(config):
        model = merged_stages(model, stages, state, path)
    return head.eval(), model.eval(), config


def proposition_features(states: torch.Tensor, offsets: np.ndarray, special: np.ndarray, groups: Sequence[Sequence[Span]], dim: int) -> torch.Tensor:
    """The student's input for each proposition of one sentence, side by side:
    the last layer's mean under the proposition (the residual's base), every
    head layer's mean under it, and every head layer's mean over the
    sentence's text (what the proposition is said in). `states` holds the
    head's layers side by side, `dim` wide each, the last layer last."""
    real = ~special
    pooled = span_pool(states, offsets, real, groups)
    sentence = states[torch.from_numpy(real)].mean(0) if real.any() else states.mean(0)
    return torch.cat([pooled[:, -dim:], pooled, sentence.expand(len(groups), -1)], dim=1)


def feature_dim(dim: int, layers: int) -> int:
    """The width of `proposition_features` for `layers` head layers of
    `dim` each: the last layer's mean under the proposition, then each
    layer's mean under it and over its sentence."""
    return dim * (1 + 2 * layers)


@torch.inference_mode()
def mean_vectors(backbone: Backbone, texts: Sequence[str], titles: Sequence[str], batch_size: int = 64, progress: bool = False,
                 desc: str = "encode alone") -> torch.Tensor:
    """(n, dim) the backbone's mean-pooled last layer over `title [SEP] text`
    (just `text` where the title is ""): `single`'s vector of a short text,
    the teacher of the student head."""
    from tqdm.auto import tqdm

    out = torch.zeros(len(texts), backbone.dim)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]) + len(titles[i]))
    for s in tqdm(range(0, len(order), batch_size), desc=desc, unit="batch", disable=not progress, leave=False):
        idx = order[s : s + batch_size]
        enc, *_ = tokenize(backbone.tokenizer, [texts[i] for i in idx], [titles[i] for i in idx], backbone.max_length)
        hidden = hidden_states(backbone, enc).float().cpu()
        mask = enc["attention_mask"].unsqueeze(-1).float()
        out[idx] = (hidden * mask).sum(1) / mask.sum(1)
    return out
