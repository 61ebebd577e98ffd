"""The optimiser the Wikipedia-trained stages share (AE, DocSplit)."""
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
