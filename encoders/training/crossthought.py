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
from torch import nn
from tqdm.auto import tqdm

from .. import DEFAULT_BACKBONE
from ..backbone import Backbone
from ..base import clip_title, title_ids
from ..crossthought import SEQUENCE_TOKENS, CrossThoughtModel, crossthought_weights, mask_words, tokenized_sequences
from ..provenance import command_line, hardware, library_versions, save_weights
from .data import WIKI_EXTRACTED, WIKI_HELDOUT_FROM, wiki_sample
from .optim import adamw_with_warmup, smoothed, update

log = logging.getLogger(__name__)

Sequence = tuple[list[int], list[int]]  # (title token ids, the sequence's token ids), no specials
Run = list[Sequence]  # consecutive sequences of one section


def section_runs(tokenizer: Any, text: str, length: int = SEQUENCE_TOKENS, run: int = 16, title: str = "") -> list[Run]:
    """A section's text cut into sequences, each with its article's title,
    grouped into runs of at most `run` consecutive ones; runs of a single
    sequence are dropped (they have no neighbour to read)."""
    ids, _, ranges = tokenized_sequences(tokenizer, text, length)
    title = title_ids(tokenizer, clip_title(tokenizer, title)[0]).tolist() if title.strip() else []
    sequences = [(title, ids[a:b]) for a, b in ranges]
    return [chunk for i in range(0, len(sequences), run) if len(chunk := sequences[i : i + run]) >= 2]


def wiki_runs(tokenizer: Any, folder: str | Path, split: str, n: int, length: int = SEQUENCE_TOKENS, run: int = 16, seed: int = 0) -> list[Run]:
    return wiki_sample(folder, split, n, lambda text, title: section_runs(tokenizer, text, length, run, title), seed)


def samples(runs: list[Run], size: int) -> Iterator[list[Run]]:
    """Samples of about `size` sequences: whole runs in order, cycling."""
    sample: list[Run] = []
    used = i = 0
    while True:
        r = runs[i % len(runs)][:size]
        i += 1
        if sample and used + len(r) > size:
            yield sample
            sample, used = [], 0
        sample.append(r)
        used += len(r)


def specials(tokenizer: Any) -> tuple[list[int], list[int], list[int]]:
    """The tokenizer's own specials before, between and after texts:
    ([CLS], [SEP], [SEP]) for BERT, (<s>, </s></s>, </s>) for RoBERTa."""
    single, pair = tokenizer("a")["input_ids"], tokenizer("a", "b")["input_ids"]
    word = tokenizer("a", add_special_tokens=False)["input_ids"]
    head = single[: single.index(word[0])]
    tail = single[len(head) + len(word) :]
    return head, pair[len(head) + len(word) : len(pair) - len(word) - len(tail)], tail


def tensors(tokenizer: Any, sample: list[Run]) -> tuple[torch.Tensor, ...]:
    """(input ids, attention mask, maskable, content, run index) of a
    sample's sequences, each as the encoder sees it: `[CLS] title [SEP]
    sequence [SEP]` (without a title, `[CLS] sequence [SEP]`). Maskable are
    the sequence's own tokens; content adds the title's."""
    sequences = [(t, s, r) for r, run in enumerate(sample) for t, s in run]
    head, middle, tail = specials(tokenizer)
    rows = [(head + t + middle if t else head, s, len(t)) for t, s, _ in sequences]
    ids, attention = padded(tokenizer, [before + seq + tail for before, seq, _ in rows])
    maskable = torch.zeros(ids.shape, dtype=torch.bool)
    content = torch.zeros_like(maskable)
    for i, (before, seq, title) in enumerate(rows):
        maskable[i, len(before) : len(before) + len(seq)] = True
        content[i, len(head) : len(head) + title] = True
    return ids, attention, maskable, content | maskable, torch.tensor([r for *_, r in sequences])


def padded(tokenizer: Any, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, attention mask) of token-id rows padded to the longest."""
    ids = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_token_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        attention[i, : len(row)] = 1
    return ids, attention


def spans(tokenizer: Any, ids: torch.Tensor, maskable: torch.Tensor, shortest: int = 6, longest: int = 20,
          generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, attention mask, content) of a random span of each
    sequence's own tokens, alone and without its title: a short query whose
    answer is somewhere in the sample."""
    head, _, tail = specials(tokenizer)
    rows = []
    for row, can in zip(ids.tolist(), maskable.tolist()):
        own = [t for t, m in zip(row, can) if m]
        n = min(len(own), int(torch.randint(shortest, longest + 1, (1,), generator=generator)))
        start = int(torch.randint(0, len(own) - n + 1, (1,), generator=generator))
        rows.append(head + own[start : start + n] + tail)
    out, attention = padded(tokenizer, rows)
    content = torch.zeros(out.shape, dtype=torch.bool)
    for i, row in enumerate(rows):
        content[i, len(head) : len(row) - len(tail)] = True
    return out, attention, content


def maxsim(queries: torch.Tensor, query_content: torch.Tensor, candidates: torch.Tensor, candidate_content: torch.Tensor) -> torch.Tensor:
    """(Mq, Mc) late-interaction scores of the frozen backbone's own token
    states (what `tokens` searches): for each query token its best cosine in
    the candidate, averaged over the query's tokens."""
    q = nn.functional.normalize(queries, dim=-1) * query_content.unsqueeze(-1)
    c = nn.functional.normalize(candidates, dim=-1)
    sim = torch.einsum("ald,bmd->ablm", q, c).masked_fill(~candidate_content[None, :, None, :], -2.0)
    return sim.amax(-1).sum(-1) / query_content.sum(-1, keepdim=True)


def distillation(logits: torch.Tensor, teacher: torch.Tensor, temperature: float = 0.05, exclude: torch.Tensor | None = None) -> torch.Tensor:
    """KL(teacher || student) over candidates, row by row: the teacher ranks
    them by its scores (at `temperature`), the student by its retrieval
    logits. `exclude` (bool, like `logits`) drops pairs from both, such as a
    sequence against itself."""
    if exclude is not None:
        logits, teacher = logits.masked_fill(exclude, float("-inf")), teacher.masked_fill(exclude, float("-inf"))
    target = (teacher / temperature).softmax(-1)
    student = logits.log_softmax(-1)
    keep = target > 0
    return (target[keep] * (target[keep].log() - student[keep])).sum() / len(logits)


class Objective:
    """Masked words through the cross layer (the paper's) plus `distill`
    times the listwise distillation of the frozen backbone's late-interaction
    ranking of the sample's sequences, for the sequences themselves and for a
    short span of each as queries: the slots learn to rank the way the
    geometry they read does, in the space the index searches."""

    def __init__(self, model: CrossThoughtModel, tokenizer: Any, rate: float, distill: float, device: torch.device) -> None:
        self.model, self.tokenizer, self.rate, self.distill, self.device = model, tokenizer, rate, distill, device

    def __call__(self, sample: list[Run], generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict[str, float]]:
        ids, attention, maskable, content, _ = tensors(self.tokenizer, sample)
        inputs, labels = mask_words(ids, maskable, self.tokenizer.mask_token_id, self.tokenizer.vocab_size, self.rate, generator)
        to = lambda *ts: [t.to(self.device) for t in ts]  # noqa: E731
        mlm = self.model.masked_lm_loss(*to(inputs, attention, labels))
        parts = {"mlm": mlm.item()}
        loss = mlm
        if self.distill:
            q_ids, q_attention, q_content = to(*spans(self.tokenizer, ids, maskable, generator=generator))
            ids, attention, content = to(ids, attention, content)
            slots, words = self.model.states(ids, attention)
            q_slots, q_words = self.model.states(q_ids, q_attention)
            itself = torch.eye(len(ids), dtype=torch.bool, device=ids.device)
            kd = (distillation(self.model.logits(slots, slots), maxsim(words, content, words, content), exclude=itself)
                  + distillation(self.model.logits(q_slots, slots), maxsim(q_words, q_content, words, content))) / 2
            parts["kd"] = kd.item()
            loss = loss + self.distill * kd
        return loss, parts


def heldout(objective: Objective, batches: list[list[Run]]) -> dict[str, float]:
    """The objective's parts on held-out samples, with the same masks every call."""
    generator = torch.Generator().manual_seed(1234)
    objective.model.eval()
    totals: dict[str, float] = {}
    with torch.no_grad():
        for b in batches:
            for k, v in objective(b, generator)[1].items():
                totals[k] = totals.get(k, 0.0) + v / len(batches)
    objective.model.train()
    return {k: round(v, 4) for k, v in totals.items()}


def train_crossthought(
    out: Path, *, wiki: str | Path = WIKI_EXTRACTED, backbone: str | Backbone | None = None, slots: int = 5, control: bool = False,
    length: int = SEQUENCE_TOKENS, steps: int = 400, batch: int = 64, run: int = 8, lr: float = 5e-4, distill: float = 1.0, rank: int = 16,
    rate: float = 0.15, heldout_batches: int = 8, seed: int = 0, device: str = "auto",
) -> dict[str, Any]:
    started = time.time()
    random.seed(seed)
    torch.manual_seed(seed)
    bb = backbone if isinstance(backbone, Backbone) else Backbone.load(backbone or DEFAULT_BACKBONE, device=device, dtype=torch.float32)  # trained through: autocast
    tok = bb.tokenizer
    bb.model.eval().requires_grad_(False)
    # Enough runs for every step even if each held only two sequences.
    runs = wiki_runs(tok, wiki, "train", max(1, steps * batch // 2), length, run, seed)
    held = wiki_runs(tok, wiki, "heldout", heldout_batches * batch, length, run, seed)
    stream = samples(held, batch)
    held_batches = [next(stream) for _ in range(heldout_batches)]
    log.info("cross-thought: %d training runs (%d sequences), %d held-out samples", len(runs), sum(map(len, runs)), len(held_batches))

    model = CrossThoughtModel(bb.model, slots, cross=not control, init_token=tok.cls_token_id or tok.bos_token_id, rank=rank, seed=seed).to(bb.device)
    # The control is the paper's: masked LM on short sequences, nothing else.
    objective = Objective(model, tok, rate, 0.0 if control else distill, bb.device)
    params = [p for p in model.parameters() if p.requires_grad]
    # steps = 0 saves the untrained model: the reference that shows what training added.
    opt, sched, warmup = adamw_with_warmup(params, lr, max(1, steps))
    with bb.autocast():
        before = heldout(objective, held_batches)
    model.train()
    generator = torch.Generator().manual_seed(seed)
    running = None
    label = "masked LM control" if control else "cross-thought"
    bar = tqdm(zip(range(steps), samples(runs, batch)), total=steps, desc=f"train {label} N={slots}")
    for _, sample in bar:
        with bb.autocast():
            loss, parts = objective(sample, generator)
        running = smoothed(running, update(loss, params, opt, sched))
        bar.set_postfix(loss=f"{running:.3f}", **{k: f"{v:.2f}" for k, v in parts.items()})
    with bb.autocast():
        after = heldout(objective, held_batches)

    state, config = crossthought_weights(model, bb.name, length)
    objective_name = "masked LM (short sequences only)" if control else "masked LM through the cross-sequence layer"
    config |= {
        "command": command_line(),
        "data": {"wikipedia": str(wiki), "split": f"train (wiki_00 .. wiki_{WIKI_HELDOUT_FROM - 1:02d})",
                 "runs": len(runs), "sequences_per_run": run, "sequence_tokens": length, "titles": True},
        "training": {"objective": objective_name + (f" + {objective.distill} x listwise distillation of the frozen backbone's similarities" if objective.distill else ""),
                     "frozen": "the whole backbone; trained: slots, their path's low-rank adapters, cross layer, masked-word head",
                     "steps": steps, "sequences_per_sample": batch, "sequences_seen": steps * batch,
                     "tokens_seen": steps * batch * length, "lr": lr, "mask_rate": rate, "warmup": warmup, "seed": seed},
        "heldout": {"before": before, "after": after, "samples": len(held_batches)},
        "hardware": hardware(), "train_seconds": round(time.time() - started, 1), "versions": library_versions(),
    }
    save_weights(state, out, config)
    print(f"{label} N={slots}: held-out {before} -> {after} after {steps} steps, "
          f"{config['train_seconds']:.0f} s on {config['hardware']} -> {out}")
    return config
