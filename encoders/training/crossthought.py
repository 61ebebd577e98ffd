"""`propdex train crossthought`: slots, cross layer and adapters by masked-word
prediction across short sequences of Wikipedia text.

A training sample is one batch: runs of consecutive 64-token sequences, each
run from one section, never shuffled inside. The cross layer mixes slot n of
every sequence in the batch, so a sequence's neighbours in its own run are
what helps it and the other runs are the distractors it must learn to skip
(the paper's samples are 500 consecutive sequences, spanning articles).
`control=True` trains the same model and budget without the cross layer:
masked LM on short sequences only.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from ..backbone import Backbone
from ..crossthought import SEQUENCE_TOKENS, CrossThoughtModel, crossthought_weights, mask_words, tokenized_sequences
from ..provenance import command_line, hardware, library_versions, save_weights
from .data import WIKI_EXTRACTED, WIKI_HELDOUT_FROM, wiki_sample
from .optim import adamw_with_warmup, smoothed, update

log = logging.getLogger(__name__)

Run = list[list[int]]  # consecutive sequences of token ids (no specials)


def section_runs(tokenizer: Any, text: str, length: int = SEQUENCE_TOKENS, run: int = 16) -> list[Run]:
    """A section's text cut into sequences, grouped into runs of at most
    `run` consecutive ones; runs of a single sequence are dropped (they have
    no neighbour to read)."""
    ids, _, ranges = tokenized_sequences(tokenizer, text, length)
    sequences = [ids[a:b] for a, b in ranges]
    return [chunk for i in range(0, len(sequences), run) if len(chunk := sequences[i : i + run]) >= 2]


def wiki_runs(tokenizer: Any, folder: str | Path, split: str, n: int, length: int = SEQUENCE_TOKENS, run: int = 16, seed: int = 0) -> list[Run]:
    return wiki_sample(folder, split, n, lambda text: section_runs(tokenizer, text, length, run), seed)


def samples(runs: list[Run], size: int) -> Iterator[list[list[int]]]:
    """Batches of about `size` sequences: whole runs in order, cycling."""
    batch: list[list[int]] = []
    i = 0
    while True:
        r = runs[i % len(runs)]
        i += 1
        if batch and len(batch) + len(r) > size:
            yield batch
            batch = []
        batch.extend(r[:size])


def tensors(tokenizer: Any, sequences: list[list[int]], rate: float, generator: torch.Generator | None = None) -> tuple[torch.Tensor, ...]:
    """(masked input ids, attention mask, labels) of sequences with [CLS]/[SEP] added."""
    # The tokenizer's own specials around an empty text: [CLS] [SEP] for BERT, <s> </s> for RoBERTa.
    template = tokenizer("")["input_ids"]
    head = template[:1] if len(template) == 2 else []
    tail = template[len(head):]
    width = max(map(len, sequences)) + len(template)
    ids = torch.full((len(sequences), width), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    special = torch.ones(ids.shape, dtype=torch.bool)
    for i, s in enumerate(sequences):
        ids[i, : len(s) + len(template)] = torch.tensor(head + s + tail)
        attention[i, : len(s) + len(template)] = 1
        special[i, len(head) : len(head) + len(s)] = False
    inputs, labels = mask_words(ids, ~special, tokenizer.mask_token_id, tokenizer.vocab_size, rate, generator)
    return inputs, attention, labels


def heldout_loss(model: CrossThoughtModel, tokenizer: Any, batches: list[list[list[int]]], rate: float, device: torch.device) -> float:
    """Masked-word loss on held-out batches, with the same masks every call."""
    generator = torch.Generator().manual_seed(1234)
    model.eval()
    losses = []
    with torch.no_grad():
        for b in batches:
            losses.append(model.masked_lm_loss(*(t.to(device) for t in tensors(tokenizer, b, rate, generator))).item())
    model.train()
    return round(sum(losses) / len(losses), 4)


def train_crossthought(
    out: Path, *, wiki: str | Path = WIKI_EXTRACTED, backbone: str | Backbone | None = None, slots: int = 5, control: bool = False,
    length: int = SEQUENCE_TOKENS, lora: int = 8, steps: int = 200, batch: int = 64, run: int = 16, lr: float = 5e-4,
    rate: float = 0.15, heldout_batches: int = 8, seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    started = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    bb = backbone if isinstance(backbone, Backbone) else Backbone.load(backbone, device=device) if backbone else Backbone.load(device=device)
    tok = bb.tokenizer
    # Enough runs for every step even if each held only two sequences.
    runs = wiki_runs(tok, wiki, "train", max(1, steps * batch // 2), length, run, seed)
    held = wiki_runs(tok, wiki, "heldout", heldout_batches * batch, length, run, seed)
    stream = samples(held, batch)
    held_batches = [next(stream) for _ in range(heldout_batches)]
    log.info("cross-thought: %d training runs (%d sequences), %d held-out batches", len(runs), sum(map(len, runs)), len(held_batches))

    model = CrossThoughtModel(bb.model, slots, cross=not control, lora=lora, init_token=tok.cls_token_id or tok.bos_token_id).to(bb.device)
    params = [p for p in model.parameters() if p.requires_grad]
    # steps = 0 saves the untrained model: the reference that shows what training added.
    opt, sched, warmup = adamw_with_warmup(params, lr, max(1, steps))
    before = heldout_loss(model, tok, held_batches, rate, bb.device)
    model.train()
    generator = torch.Generator().manual_seed(seed)
    running = None
    label = "masked LM control" if control else "cross-thought"
    bar = tqdm(zip(range(steps), samples(runs, batch)), total=steps, desc=f"train {label} N={slots}")
    for _, sample in bar:
        loss = model.masked_lm_loss(*(t.to(bb.device) for t in tensors(tok, sample, rate, generator)))
        running = smoothed(running, update(loss, params, opt, sched))
        bar.set_postfix(loss=f"{running:.3f}")
    after = heldout_loss(model, tok, held_batches, rate, bb.device)

    state, config = crossthought_weights(model, bb.name, length)
    config |= {
        "command": command_line(),
        "data": {"wikipedia": str(wiki), "split": f"train (wiki_00 .. wiki_{WIKI_HELDOUT_FROM - 1:02d})",
                 "runs": len(runs), "sequences_per_run": run, "sequence_tokens": length},
        "training": {"objective": "masked LM (short sequences only)" if control else "masked LM through the cross-sequence layer",
                     "steps": steps, "sequences_per_sample": batch, "lr": lr, "mask_rate": rate, "warmup": warmup, "seed": seed},
        "heldout_masked_lm_loss": {"before": before, "after": after, "batches": len(held_batches)},
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_weights(state, out, config)
    print(f"{label} N={slots}: held-out masked-LM loss {before:.3f} -> {after:.3f} after {steps} steps, "
          f"{config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
