"""The shared training loop: seeded, early stopping keeps the best weights, device choice."""

import pytest
import torch
import torch.nn.functional as F

from attnlab.models.training import TrainConfig, evaluate, resolve_device, seeded, train


def _data(n=200, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 5, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0]) + 0.1 * torch.randn(n, generator=g)
    return x, y


def _loss(model, x, y):
    return F.mse_loss(model(x)[:, 0], y)


def _fit(seed=0, **kw):
    x, y = _data()
    with seeded(seed):
        model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(),
                                    torch.nn.Dropout(0.1), torch.nn.Linear(16, 1))
        hist = train(model, _loss, (x[:150], y[:150]), (x[150:], y[150:]),
                     TrainConfig(max_epochs=kw.pop("max_epochs", 30), seed=seed, **kw))
    return model, hist, (x[150:], y[150:])


def test_same_seed_same_weights_and_caller_rng_untouched():
    torch.manual_seed(123)
    before = torch.random.get_rng_state()
    a, _, _ = _fit(seed=1)
    assert torch.equal(torch.random.get_rng_state(), before)
    b, _, _ = _fit(seed=1)
    c, _, _ = _fit(seed=2)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not all(torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters()))


def test_early_stopping_restores_the_best_epoch():
    model, hist, val = _fit(max_epochs=200, patience=5, lr=0.05)
    assert hist.epochs < 200                                   # stopped early
    assert hist.epochs - 1 - hist.best_epoch == 5              # after `patience` bad epochs
    best = min(hist.val_loss)
    assert hist.val_loss[hist.best_epoch] == best
    assert evaluate(model, _loss, val) == pytest.approx(best, rel=1e-6)
    assert not model.training


def test_loss_decreases_and_gradients_are_clipped():
    _, hist, _ = _fit(max_epochs=40, lr=0.01)
    assert hist.train_loss[-1] < 0.1 * hist.train_loss[0]
    # Every optimizer step sees a global gradient norm <= clip_norm.
    norms = []

    def hook(opt, args, kwargs):
        grads = [p.grad for g in opt.param_groups for p in g["params"] if p.grad is not None]
        norms.append(float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))))

    from torch.optim.optimizer import register_optimizer_step_pre_hook

    handle = register_optimizer_step_pre_hook(hook)
    try:
        _fit(max_epochs=3, lr=0.01, clip_norm=0.05)
    finally:
        handle.remove()
    assert norms and max(norms) <= 0.05 * (1 + 1e-5)


@pytest.mark.parametrize("field, value", [("max_epochs", 0), ("batch_size", 1.5), ("lr", -1),
                                          ("clip_norm", float("nan"))])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_device_choice():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu-ish")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")
