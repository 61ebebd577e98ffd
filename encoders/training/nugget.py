"""`propdex train nugget`: the nugget scorer, feedback and W^V, by autoencoding.

The encoder (frozen below layer l, LoRA above) turns a Wikipedia passage
into nuggets; a small decoder trained from scratch reconstructs the passage
from them, with the nugget scores added to its cross-attention logits so the
scorer gets a gradient. One model serves every ratio: each step draws its r
from `ratios` in turn, so the scorer ranks tokens rather than learning one k.
"""
from __future__ import annotations

import logging
import random
import time
from itertools import cycle
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from .. import DEFAULT_BACKBONE
from ..backbone import Backbone
from ..adapters import layer_stack
from ..nugget import NuggetDecoder, NuggetModel, nugget_weights
from ..provenance import command_line, hardware, library_versions, save_weights
from .data import WIKI_EXTRACTED, WIKI_HELDOUT_FROM, packed_sentences, wiki_sample
from .optim import adamw_with_warmup, smoothed, update

log = logging.getLogger(__name__)


def wiki_passages(folder: str | Path, split: str, n: int, max_words: int, seed: int = 0) -> list[str]:
    """Up to `n` passages of at most `max_words` words (each section packed into
    sentence chunks; chunks under 8 words dropped) from across the split."""
    return wiki_sample(folder, split, n, lambda text, _title: [c for c in packed_sentences(text, max_words) if len(c.split()) >= 8], seed)


def reconstruction_loss(nugget: NuggetModel, decoder: NuggetDecoder, enc: dict[str, torch.Tensor], ratio: float,
                        pad: int, bias: bool = True, negatives: int | None = None) -> torch.Tensor:
    """Next-token NLL of the passage given its nuggets (the AE objective).

    `negatives`: a sampled softmax over the batch's own tokens plus that
    many random vocabulary entries (the full 30k-way softmax is most of a
    CPU step); None is the exact NLL. `bias=False` drops the scores from
    the cross-attention: the ablation that leaves the scorer no gradient."""
    out = nugget(**enc, ratio=ratio)
    ids = enc["input_ids"]
    hidden = decoder.hidden(ids[:, :-1], out.vectors, out.valid, out.scores if bias else None)
    targets = ids[:, 1:]
    vocabulary = decoder.vocabulary
    if negatives:
        sampled = torch.randint(len(vocabulary), (negatives,), device=ids.device)
        candidates, targets = torch.unique(torch.cat([targets.reshape(-1), sampled]), return_inverse=True)
        targets = targets[: ids.shape[0] * (ids.shape[1] - 1)].view(ids.shape[0], -1)
        targets = targets.masked_fill(ids[:, 1:] == pad, -100)
        vocabulary = vocabulary[candidates]
    else:
        targets = targets.masked_fill(targets == pad, -100)
    return torch.nn.functional.cross_entropy((hidden @ vocabulary.T).transpose(1, 2), targets, ignore_index=-100)


def train_nugget(
    out: Path, *, wiki: str | Path = WIKI_EXTRACTED, backbone: str | None = None, layer: int = 3,
    ratios: tuple[float, ...] = (0.05, 0.1, 0.25), ratio: float = 0.25, lora: int = 8, decoder_layers: int = 2,
    steps: int = 1500, batch: int = 16, lr: float = 5e-4, negatives: int = 2048, max_length: int = 128, max_words: int = 90,
    seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    started = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    bb = Backbone.load(backbone or DEFAULT_BACKBONE, device=device, dtype=torch.float32)  # trained through: autocast
    texts = wiki_passages(wiki, "train", steps * batch, max_words, seed)
    heldout = wiki_passages(wiki, "heldout", 256, max_words, seed)
    log.info("nugget AE: %d training passages, %d held out", len(texts), len(heldout))
    nugget = NuggetModel(bb.model, layer, ratio, lora=lora).to(bb.device)
    decoder = NuggetDecoder(layer_stack(nugget.encoder)[0].word_embeddings, layers=decoder_layers,
                            max_positions=max_length).to(bb.device)
    params = [p for p in (*nugget.parameters(), *decoder.parameters()) if p.requires_grad]
    opt, sched, warmup = adamw_with_warmup(params, lr, steps)
    pad = bb.tokenizer.pad_token_id

    def tokenize(batch_texts: list[str]) -> dict[str, torch.Tensor]:
        enc = bb.tokenizer(batch_texts, padding=True, truncation=True, max_length=max_length, return_tensors="pt")
        return {k: v.to(bb.device) for k, v in enc.items()}

    nugget.train()
    decoder.train()
    ratio_cycle = cycle(ratios)
    running = None
    bar = tqdm(range(steps), desc="train nugget (AE)")
    for step in bar:
        chunk = [texts[(step * batch + i) % len(texts)] for i in range(batch)]
        with bb.autocast():
            loss = reconstruction_loss(nugget, decoder, tokenize(chunk), next(ratio_cycle), pad, negatives=negatives)
        running = smoothed(running, update(loss, params, opt, sched))
        bar.set_postfix(loss=f"{running:.3f}")
    nugget.eval()
    decoder.eval()
    heldout_nll = {}
    with torch.no_grad(), bb.autocast():
        for r in ratios:
            losses = [reconstruction_loss(nugget, decoder, tokenize(heldout[i : i + 32]), r, pad).item() for i in range(0, len(heldout), 32)]
            heldout_nll[str(r)] = round(sum(losses) / len(losses), 4)

    state, config = nugget_weights(nugget, decoder, bb.name, max_length)
    config |= {
        "train_ratios": list(ratios),
        "command": command_line(),
        "data": {"wikipedia": str(wiki), "split": f"train (wiki_00 .. wiki_{WIKI_HELDOUT_FROM - 1:02d})",
                 "passages": len(texts), "max_words": max_words},
        "training": {"objective": "autoencoding (next-token NLL, scores added to cross-attention logits)",
                     "steps": steps, "batch": batch, "lr": lr, "sampled_softmax_negatives": negatives, "warmup": warmup, "seed": seed},
        "heldout_nll": heldout_nll,
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_weights(state, out, config)
    print(f"nugget AE: held-out NLL {heldout_nll} after {steps} steps, {config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
