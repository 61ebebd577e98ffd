"""`propdex train docsplit`: DocSplit, an unsupervised contrastive stage for any encoder.

A document's sentences are assigned at random (p = 0.5) to half A or half B,
each half keeping the original order. The two halves of one document are
positives, the halves of the other documents in the batch negatives;
InfoNCE with tau = 0.05. The similarity of two halves is mean MaxSim between
their vector sets, which for a one-vector encoder (`single`) is the cosine.

Any encoder joins by providing `VectorSets`: texts in, a padded batch of
L2-normalised vector sets out, with gradients. Two are here: nuggets and
mean-pooled single vectors.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from tqdm.auto import tqdm

from .. import DEFAULT_BACKBONE
from ..adapters import adapt, adapter_stages, lora_config, lora_state, upper_layers
from ..backbone import Backbone
from ..provenance import command_line, hardware, library_versions, save_weights
from ..text import split_sentences
from .data import WIKI_EXTRACTED, WIKI_HELDOUT_FROM, wiki_sample
from .optim import adamw_with_warmup, update

log = logging.getLogger(__name__)


def split_halves(n: int, rng: random.Random) -> tuple[list[int], list[int]]:
    """Sentence indices of the two halves: disjoint, together all of 0..n-1,
    both non-empty, each in order."""
    if n < 2:
        raise ValueError(f"a document needs at least 2 sentences to split, got {n}")
    side = [rng.random() < 0.5 for _ in range(n)]
    if all(side) or not any(side):
        side[rng.randrange(n)] = not side[0]
    return [i for i in range(n) if side[i]], [i for i in range(n) if not side[i]]


def set_similarity(a: torch.Tensor, a_valid: torch.Tensor, b: torch.Tensor, b_valid: torch.Tensor) -> torch.Tensor:
    """(len(a), len(b)) mean MaxSim: for sets x in a and y in b, the mean over
    x's vectors of their best inner product with y's vectors."""
    sim = torch.einsum("xid,yjd->xyij", a, b)
    sim = sim.masked_fill(~b_valid[None, :, None, :], float("-inf")).max(-1).values
    sim = sim.masked_fill(~a_valid[:, None, :], 0.0)
    return sim.sum(-1) / a_valid.sum(-1).clamp(min=1)[:, None]


def docsplit_loss(a: torch.Tensor, a_valid: torch.Tensor, b: torch.Tensor, b_valid: torch.Tensor, tau: float = 0.05) -> torch.Tensor:
    """InfoNCE over the batch, both directions (MaxSim is not symmetric)."""
    labels = torch.arange(len(a), device=a.device)
    ab = set_similarity(a, a_valid, b, b_valid) / tau
    ba = set_similarity(b, b_valid, a, a_valid) / tau
    return (nn.functional.cross_entropy(ab, labels) + nn.functional.cross_entropy(ba, labels)) / 2


class VectorSets(Protocol):
    """A trainable encoder seen by DocSplit."""

    backbone: Backbone

    def __call__(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, k, dim) L2-normalised vectors and (batch, k) validity."""

    def parameters(self) -> Any: ...


class _Sets(nn.Module):
    """A trainable `model` that reads tokenized text (at most `max_length` tokens)."""

    def __init__(self, model: nn.Module, backbone: Backbone, max_length: int) -> None:
        super().__init__()
        self.model, self.backbone, self.max_length = model, backbone, max_length

    def tokenize(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        enc = self.backbone.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        return {k: v.to(self.backbone.device) for k, v in enc.items()}


class NuggetSets(_Sets):
    """A `NuggetModel`'s nuggets."""

    def forward(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.model(**self.tokenize(texts))
        return nn.functional.normalize(out.vectors, dim=-1), out.valid


class MeanSets(_Sets):
    """`single`'s vector (mean pooling over every real token) as a one-vector set."""

    def forward(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenize(texts)
        states = self.model(**enc).last_hidden_state
        mask = enc["attention_mask"][..., None].to(states.dtype)
        mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1)
        return nn.functional.normalize(mean, dim=-1)[:, None], torch.ones(len(texts), 1, dtype=torch.bool, device=states.device)


def wiki_documents(folder: str | Path, n: int, min_sentences: int = 4, max_sentences: int = 10, seed: int = 0) -> list[list[str]]:
    """Up to `n` training documents: the first `max_sentences` sentences of
    sections with at least `min_sentences`."""
    def document(text: str, _title: str) -> list[list[str]]:
        sentences = [text[a:b] for a, b in split_sentences(text)][:max_sentences]
        return [sentences] if len(sentences) >= min_sentences else []

    return wiki_sample(folder, "train", n, document, seed)


def train_docsplit(
    sets: VectorSets, documents: Sequence[Sequence[str]], *, steps: int, batch: int = 16, lr: float = 2e-4,
    tau: float = 0.05, seed: int = 0,
) -> list[float]:
    """DocSplit over `documents` (lists of sentences); returns the loss per step."""
    rng = random.Random(seed)
    params = [p for p in sets.parameters() if p.requires_grad]
    opt, sched, _ = adamw_with_warmup(params, lr, steps)
    losses: list[float] = []
    bar = tqdm(range(steps), desc="train docsplit")
    for step in bar:
        docs = [documents[(step * batch + i) % len(documents)] for i in range(batch)]
        halves = [split_halves(len(d), rng) for d in docs]
        with sets.backbone.autocast():
            a = sets([" ".join(d[i] for i in ha) for d, (ha, _) in zip(docs, halves)])
            b = sets([" ".join(d[i] for i in hb) for d, (_, hb) in zip(docs, halves)])
            loss = docsplit_loss(*a, *b, tau=tau)
        losses.append(update(loss, params, opt, sched))
        bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    return losses


def run_docsplit(
    encoder: str, out: Path, *, init: Path | None = None, wiki: str | Path = WIKI_EXTRACTED, backbone: str | None = None,
    lora: int = 8, steps: int = 300, batch: int = 16, lr: float = 2e-4, tau: float = 0.05, max_length: int = 128,
    seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    """DocSplit for `encoder` ("nugget": from the AE weights at `init`;
    "single": the backbone itself), saved as weights that encoder loads."""
    from safetensors.torch import load_file

    from ..nugget import load_nugget

    started = time.time()
    torch.manual_seed(seed)
    bb = Backbone.load(backbone or DEFAULT_BACKBONE, device=device, dtype=torch.float32)  # trained through: autocast
    documents = wiki_documents(wiki, steps * batch, seed=seed)
    log.info("docsplit (%s): %d documents", encoder, len(documents))
    if encoder == "nugget":
        if init is None:
            raise ValueError("DocSplit for nugget starts from trained nugget weights: give --init")
        nugget, _, base = load_nugget(init, bb.model, lora=lora)
        sets: nn.Module = NuggetSets(nugget.to(bb.device), bb, max_length)
        # The scorer gets no gradient from MaxSim (TopK): it stays as trained.
        nugget.scorer.requires_grad_(False)
        state = load_file(str(Path(init) / "model.safetensors"))
        previous = adapter_stages(base)
        layers = nugget.lora_layers
    elif encoder == "single":
        base, previous, state = {"backbone": bb.name}, [], {}
        layers = upper_layers(bb.model.config.num_hidden_layers)
        sets = MeanSets(adapt(bb.model, lora, layers).to(bb.device), bb, max_length)
    else:
        raise ValueError(f"DocSplit is wired for nugget and single, not {encoder!r}")
    sets.train()
    losses = train_docsplit(sets, documents, steps=steps, batch=batch, lr=lr, tau=tau, seed=seed)
    sets.eval()

    prefix = f"lora{len(previous) + 1}."
    adapted = sets.model.encoder if encoder == "nugget" else sets.model
    new_state = {k: v for k, v in state.items() if not k.startswith("decoder.")}
    if encoder == "nugget":
        new_state.update(sets.model.head_state())
    new_state.update({f"{prefix}{k}": v for k, v in lora_state(adapted).items()})
    config = {k: v for k, v in base.items() if k not in ("decoder", "lora", "command", "data", "training", "train_seconds", "hardware", "versions", "heldout_nll")}
    config |= {
        "encoder": encoder, "backbone": bb.name,
        "adapters": [*previous, lora_config(lora, layers) | {"prefix": prefix, "stage": "docsplit"}],
        "init": str(init) if init else None,
        "command": command_line(),
        "data": {"wikipedia": str(wiki), "split": f"train (wiki_00 .. wiki_{WIKI_HELDOUT_FROM - 1:02d})", "documents": len(documents),
                 "document": "first 10 sentences of a section with at least 4"},
        "training": {"objective": "DocSplit InfoNCE, mean MaxSim between halves, both directions", "tau": tau, "steps": steps,
                     "batch": batch, "lr": lr, "max_length": max_length, "seed": seed,
                     "loss_first_20": round(sum(losses[:20]) / len(losses[:20]), 4), "loss_last_20": round(sum(losses[-20:]) / len(losses[-20:]), 4)},
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_weights(new_state, out, config)
    print(f"docsplit ({encoder}): loss {config['training']['loss_first_20']} -> {config['training']['loss_last_20']} "
          f"over {steps} steps, {config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
