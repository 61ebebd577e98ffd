"""The optimiser and update step the Wikipedia-trained stages share (AE, DocSplit, Cross-Thought)."""
from __future__ import annotations

from collections.abc import Iterable

import torch


def adamw_with_warmup(params: Iterable[torch.nn.Parameter], lr: float, steps: int) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler, int]:
    """AdamW (weight decay 0.01), linear warm-up over the first 5% of `steps`,
    then linear decay to a floor of 10% of `lr`. Returns (optimizer,
    scheduler, warm-up steps)."""
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warmup, max(0.1, 1 - s / steps)))
    return opt, sched, warmup


def update(loss: torch.Tensor, params: list[torch.nn.Parameter], opt: torch.optim.Optimizer,
           sched: torch.optim.lr_scheduler.LRScheduler) -> float:
    """One step: backward, clip the gradient norm to 1, step the optimiser and
    the schedule. Returns the loss as a float."""
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()
    sched.step()
    return loss.item()


def smoothed(running: float | None, value: float) -> float:
    """The progress bar's loss: an exponential moving average (0.98)."""
    return value if running is None else 0.98 * running + 0.02 * value
