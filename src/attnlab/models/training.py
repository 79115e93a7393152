"""The training loop every estimator shares.

One function, :func:`train`, runs mini-batch AdamW with gradient clipping and early stopping on
a validation set, restores the best weights, and reports progress with a rich bar (shown only
when stderr is a terminal and ``verbose`` is on). It is seeded: the same data, config and seed
give the same weights, bit for bit, on the same machine and device, and the caller's global RNG
state is left as it was (:func:`seeded`).
"""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields

import numpy as np
import torch

from attnlab._progress import progress_bar


@dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings shared by the estimators (each exposes them as its own params)."""

    max_epochs: int = 200
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 1e-4
    patience: int = 20           # epochs without a better validation loss before stopping
    clip_norm: float = 1.0       # max global gradient norm; 0 turns clipping off
    seed: int = 0
    device: str = "auto"
    verbose: bool = False

    def __post_init__(self):
        for name in ("max_epochs", "batch_size", "patience"):
            value = getattr(self, name)
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name in ("lr", "weight_decay", "clip_norm"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")

    @classmethod
    def of(cls, estimator) -> "TrainConfig":
        """The config from an estimator's attributes of the same names."""
        return cls(**{f.name: getattr(estimator, f.name) for f in fields(cls)
                      if hasattr(estimator, f.name)})


@dataclass
class TrainHistory:
    """Per-epoch mean losses; ``best_epoch`` (0-based) is the one whose weights were kept."""

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epoch: int = -1

    @classmethod
    def from_dict(cls, d: dict) -> "TrainHistory":
        """A history saved with :meth:`to_dict`."""
        return cls(list(d.get("train_loss", [])), list(d.get("val_loss", [])),
                   int(d.get("best_epoch", -1)))

    @property
    def epochs(self) -> int:
        """Number of epochs run."""
        return len(self.train_loss)

    def to_dict(self) -> dict:
        """The history as plain lists (JSON-ready)."""
        return {"train_loss": self.train_loss, "val_loss": self.val_loss,
                "best_epoch": self.best_epoch, "epochs": self.epochs}


def resolve_device(device: str | torch.device) -> torch.device:
    """``"auto"`` is CUDA when available, else CPU; an explicit device must exist."""
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {device!r}") from err
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but no CUDA device is available here; "
                         "use device='cpu' or 'auto'")
    return dev


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Seed torch's global RNG (weight init, dropout) for the block, then restore the caller's
    RNG state."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def train(model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
          train_data: Sequence[torch.Tensor], val_data: Sequence[torch.Tensor] | None,
          config: TrainConfig, description: str = "training", monitor=None) -> TrainHistory:
    """Fit ``model`` in place; returns the loss history.

    Args:
        loss_fn: ``loss_fn(model, *batch) -> scalar`` for a batch of the tensors in
            ``train_data`` (already on the model's device).
        train_data: tensors sharing their first dimension (inputs and targets).
        val_data: the same layout, or None to train for ``max_epochs`` and keep the last weights.
        monitor: an :class:`attnlab.diagnose.AttentionMonitor` of ``model``; each optimizer
            step's forward runs inside ``monitor.step(step)`` and ``monitor.after_backward()``
            follows its backward.
    """
    n = len(train_data[0])
    if n == 0:
        raise ValueError("train_data is empty: at least one training example is needed")
    gen = torch.Generator().manual_seed(config.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    history = TrainHistory()
    best, best_state, bad = math.inf, None, 0
    step = 0
    with progress_bar(config.verbose, description) as bar:
        task = bar.add_task(description, total=config.max_epochs, losses="")
        for epoch in range(config.max_epochs):
            model.train()
            order = torch.randperm(n, generator=gen)
            total = 0.0
            for start in range(0, n, config.batch_size):
                idx = order[start:start + config.batch_size].to(train_data[0].device)
                if monitor is None:
                    loss = loss_fn(model, *(t[idx] for t in train_data))
                else:
                    with monitor.step(step):
                        loss = loss_fn(model, *(t[idx] for t in train_data))
                opt.zero_grad(set_to_none=True)
                loss.backward()
                if monitor is not None:
                    monitor.after_backward()
                step += 1
                if config.clip_norm > 0:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
                opt.step()
                total += float(loss.detach()) * len(idx)
            history.train_loss.append(total / n)
            if val_data is None or len(val_data[0]) == 0:
                history.best_epoch = epoch
                bar.update(task, advance=1, losses=f"train {total / n:.4f}")
                continue
            val = evaluate(model, loss_fn, val_data, config.batch_size)
            history.val_loss.append(val)
            if val < best - 1e-12:
                best, bad, history.best_epoch = val, 0, epoch
                best_state = copy.deepcopy(model.state_dict())
            else:
                bad += 1
            bar.update(task, advance=1, losses=f"train {total / n:.4f}  val {val:.4f}")
            if bad >= config.patience:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    model.eval()
    return history


@torch.no_grad()
def evaluate(model: torch.nn.Module, loss_fn: Callable[..., torch.Tensor],
             data: Sequence[torch.Tensor], batch_size: int = 256) -> float:
    """Mean of ``loss_fn`` over ``data`` in eval mode (weighted by batch size)."""
    model.eval()
    n = len(data[0])
    total = 0.0
    for start in range(0, n, batch_size):
        batch = [t[start:start + batch_size] for t in data]
        total += float(loss_fn(model, *batch)) * len(batch[0])
    return total / n
