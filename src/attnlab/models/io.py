"""Saving and loading fitted estimators: a folder with ``model.safetensors`` (every tensor:
weights and fitted statistics) and ``config.json`` (the estimator's class, its constructor
parameters and its fitted non-tensor state). Nothing is pickled, so loading a file from
someone else runs no code of theirs.

The folder is written under a temporary name beside the target and renamed into place, so an
interrupted save never leaves a half-written model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from attnlab._files import atomic_path

FORMAT = "attnlab-model"
VERSION = 1
WEIGHTS, CONFIG = "model.safetensors", "config.json"


def write_model(path: str | Path, kind: str, params: dict, state: dict,
                tensors: dict[str, torch.Tensor]) -> Path:
    """Write the folder ``path`` atomically (replacing an existing one)."""
    from safetensors.torch import save_file

    path = Path(path)
    with atomic_path(path, folder=True) as tmp:
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
        save_file(tensors, str(tmp / WEIGHTS), metadata={"format": FORMAT, "kind": kind})
        config = {"format": FORMAT, "version": VERSION, "kind": kind, "params": params,
                  "state": state}
        (tmp / CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return path


def read_model(path: str | Path, kind: str | None = None) -> tuple[dict, dict[str, torch.Tensor]]:
    """Read ``config`` and tensors from a folder written by :func:`write_model`.

    Raises ValueError naming the file and what is wrong when it is not an attnlab model, was
    written for another estimator than ``kind``, or is corrupted.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    config = read_config(path, kind)
    w_path = Path(path) / WEIGHTS
    try:
        tensors = load_file(str(w_path))
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(f"{str(w_path)!r} is not a readable safetensors file ({err}); the "
                         "model folder is corrupted, save the model again") from None
    return config, tensors


def read_config(path: str | Path, kind: str | None = None) -> dict:
    """The checked ``config.json`` of a model folder (see :func:`read_model`)."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"model folder {str(path)!r} does not exist; give the folder "
                                "that save() or `attnlab fit ... --out` wrote")
    cfg_path, w_path = path / CONFIG, path / WEIGHTS
    for p in (cfg_path, w_path):
        if not p.is_file():
            raise ValueError(f"{str(path)!r} is not an attnlab model folder: {p.name} is "
                             "missing")
    try:
        config = json.loads(cfg_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{str(cfg_path)!r} is not valid JSON ({err}); the model folder is "
                         "corrupted, save the model again") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ValueError(f"{str(cfg_path)!r} is not an attnlab model config (expected "
                         f"\"format\": \"{FORMAT}\"); load a folder written by save()")
    if config.get("version") != VERSION:
        raise ValueError(f"{str(cfg_path)!r} has format version {config.get('version')!r}; "
                         f"this attnlab reads version {VERSION}")
    if kind is not None and config.get("kind") != kind:
        raise ValueError(f"{str(path)!r} holds a {config.get('kind')!r}, not a {kind!r}; load "
                         f"it with attnlab.models.load() or {config.get('kind')}.load()")
    for key in ("params", "state"):
        if not isinstance(config.get(key), dict):
            raise ValueError(f"{str(cfg_path)!r} has no {key!r} object; the model folder is "
                             "corrupted, save the model again")
    return config


def load_state(module: torch.nn.Module, tensors: dict[str, torch.Tensor], prefix: str,
               where: str) -> None:
    """Load the ``prefix``-ed entries of ``tensors`` into ``module`` strictly, with an error
    that names the missing or unexpected keys."""
    state = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    expected = module.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    bad_shape = sorted(k for k in set(state) & set(expected) if state[k].shape != expected[k].shape)
    if missing or unexpected or bad_shape:
        raise ValueError(f"{where} does not match the model its config describes (missing "
                         f"{missing[:3]}, unexpected {unexpected[:3]}, wrong shape "
                         f"{bad_shape[:3]}); the folder is corrupted or mixed from two models")
    module.load_state_dict(state)


def open_model(cls, path: str | Path, device: str | None = None):
    """Read a folder written for ``cls`` and build an unfitted instance from its params
    (``device`` overrides the saved one). Returns ``(instance, state, tensors)``; the
    instance's ``device_`` is set."""
    from attnlab.models.training import resolve_device

    config, tensors = read_model(path, cls.__name__)
    params = dict(config["params"])
    if device is not None:
        params["device"] = device
    try:
        obj = cls(**params)
        if hasattr(obj, "_check_params"):
            obj._check_params()
    except (TypeError, ValueError) as err:
        raise ValueError(f"{str(path)!r}: config.json has invalid params ({err})") from None
    obj.device_ = resolve_device(obj.device)
    return obj, config["state"], tensors


def restore_net(build, tensors: dict[str, torch.Tensor], path, device) -> torch.nn.Module:
    """``build()`` a network (its random init is discarded), load the ``net.`` tensors into
    it strictly, move it to ``device`` in eval mode."""
    from attnlab.models.training import seeded

    with seeded(0):
        net = build()
    load_state(net, tensors, "net.", str(path))
    return net.to(device).eval()


def net_tensors(net: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A network's state under the ``net.`` prefix that :func:`restore_net` reads."""
    return {f"net.{k}": v for k, v in net.state_dict().items()}


class SavedEstimator:
    """``save()`` and ``load()`` for every fitted estimator, written once. A subclass says
    what its fit left beyond the network and the training history: :meth:`_saved` returns
    that as ``(state, tensors)`` (plain JSON values, and arrays), and :meth:`_restore` sets it
    back from them and returns the function that builds the (untrained) network, whose weights
    are then loaded strictly."""

    def _saved(self) -> tuple[dict, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def _restore(self, state: dict, tensors: dict[str, torch.Tensor]):
        raise NotImplementedError

    def save(self, path: str | Path) -> Path:
        """Write ``path/model.safetensors`` (the network and every fitted array) and
        ``path/config.json`` (the parameters and the fitted state), atomically; no pickle."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(self, "net_")
        state, tensors = self._saved()
        state["history"] = self.history_.to_dict()
        return write_model(path, type(self).__name__, self.get_params(), state,
                           {**net_tensors(self.net_), **tensors})

    @classmethod
    def load(cls, path: str | Path, device: str | None = None):
        """An estimator written by :meth:`save` (``device`` overrides the saved one); a folder
        that lacks a value or holds a wrong one is refused, naming it."""
        from attnlab.models.training import TrainHistory

        self, state, tensors = open_model(cls, path, device)
        try:
            build = self._restore(state, tensors)
        except (KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"{str(path)!r} lacks or misreads {err}; the model folder is "
                             "corrupted, save the model again") from None
        self.net_ = restore_net(build, tensors, path, self.device_)
        self.history_ = TrainHistory.from_dict(state.get("history", {}))
        return self
