"""The training loop of the embedded models: AdamW (weight decay 0.01) with a one-cycle
learning rate (5% warm-up), one fresh batch per step, the loss logged every 250 steps."""

from __future__ import annotations

from collections.abc import Callable

import torch


def fit_steps(model: torch.nn.Module, step_loss: Callable[[int], torch.Tensor], *, steps: int,
              lr: float, log: Callable[[int, float], None] | None = None) -> torch.nn.Module:
    """Minimise ``step_loss(step)`` (the loss of that step's batch) for ``steps`` steps;
    returns the model in eval mode."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps,
                                                pct_start=0.05)
    for step in range(steps):
        loss = step_loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        if log is not None and (step % 250 == 0 or step == steps - 1):
            log(step, loss.item())
    return model.eval()
