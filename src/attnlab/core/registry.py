"""Name-keyed registry of attention backends, all with one signature.

A backend is a plain function ``fn(q, k, v, spec) -> AttentionOutput`` where q, k, v have the
request's shapes (leading dims may broadcast) and ``spec`` is the validated
:class:`~attnlab.core.spec.AttentionSpec`. It registers with what it can do
(:class:`Capabilities`) and a cost estimate that ``backend="auto"`` uses to pick the fastest
exact backend able to serve a request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from attnlab.core.cuda_cost import cuda_cost
from attnlab.core.spec import AttentionOutput, AttentionSpec

BackendFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, AttentionSpec], AttentionOutput]

ALL_MASKS = frozenset({"bool", "float", "causal", "window", "fn"})
ALL_DTYPES = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16})


@dataclass(frozen=True)
class Capabilities:
    """What a backend declares it can serve."""

    exact: bool = True
    weights: bool = False
    lse: bool = False
    dropout: bool = False
    softcap: bool = False
    gqa: bool = False
    score_mod: bool = False
    backward: bool = True
    masks: frozenset[str] = ALL_MASKS
    dtypes: frozenset[torch.dtype] = ALL_DTYPES


@dataclass(frozen=True)
class Backend:
    """A registered backend: its function, what it can serve (:class:`Capabilities`), its cost
    estimate for ``auto``, and the checks beyond the flags (``check``, ``available``)."""
    name: str
    fn: BackendFn
    capabilities: Capabilities
    description: str = ""
    # Estimated relative cost of serving spec (lower is faster); auto picks the minimum.
    cost: Callable[[AttentionSpec], float] = field(default=lambda spec: float(spec.n_q * spec.n_k))
    # Extra check beyond the capability flags: returns why it cannot serve, or None.
    check: Callable[[AttentionSpec], str | None] | None = None
    # Why it cannot run on this machine at all (a missing package, no GPU), or None.
    available: Callable[[], str | None] | None = None
    # Whether serving spec needs memory linear in the sequence length (no N_q x N_k tensor of
    # its own; a dense mask the caller passed is the caller's). None: not known, assumed not.
    linear_memory: Callable[[AttentionSpec], bool] | None = None

    def unavailable(self) -> str | None:
        """None if this backend can run here, else why not (``attnlab backends`` shows it)."""
        return self.available() if self.available is not None else None

    def why_not(self, spec: AttentionSpec) -> str | None:
        """None if this backend can serve spec, else the reason in a few words."""
        caps = self.capabilities
        if spec.dtype not in caps.dtypes:
            return f"dtype {spec.dtype} is not supported"
        if spec.need_weights and not caps.weights:
            return "it does not return weights (return_weights=True)"
        if spec.need_lse and not caps.lse:
            return "it does not return lse (return_lse=True)"
        if spec.dropout_p > 0 and not caps.dropout:
            return "it does not support dropout"
        if spec.softcap is not None and not caps.softcap:
            return "it does not take softcap"
        if spec.score_mod is not None and not caps.score_mod:
            return "it does not take score_mod"
        if spec.kv_groups > 1 and not caps.gqa:
            return "it does not take grouped-query K/V (enable_gqa)"
        if spec.requires_grad and not caps.backward:
            return "it has no backward pass"
        asked = {spec.mask_kind} - {"none"}
        asked |= {"causal"} if spec.causal else set()
        asked |= {"window"} if spec.window is not None else set()
        asked |= {"fn"} if spec.mask_fn is not None else set()
        missing = asked - caps.masks
        if missing:
            return f"it does not take {', '.join(sorted(missing))} masks"
        return self.check(spec) if self.check is not None else None


_REGISTRY: dict[str, Backend] = {}


def register_backend(name: str, fn: BackendFn, capabilities: Capabilities, *,
                     description: str = "", cost: Callable[[AttentionSpec], float] | None = None,
                     check: Callable[[AttentionSpec], str | None] | None = None,
                     available: Callable[[], str | None] | None = None,
                     linear_memory: Callable[[AttentionSpec], bool] | None = None,
                     overwrite: bool = False) -> Backend:
    """Add a backend under ``name``. Approximate backends (``exact=False``) run only when named.

    ``check`` is a function ``spec -> reason | None`` saying which requests beyond the
    capability flags the backend refuses. ``available`` says why the backend cannot run on this
    machine at all (None: it can). ``linear_memory`` says for which requests it allocates
    nothing of size N_q x N_k (``select_backend(..., linear_memory=True)`` picks among those). To
    run the conformance kit before registering, use :func:`attnlab.testing.register_checked`.

    Example:
        >>> def mine(q, k, v, spec):            # doctest: +SKIP
        ...     ...
        >>> register_backend("mine", mine, Capabilities(lse=True))   # doctest: +SKIP
    """
    if isinstance(check, bool):
        raise TypeError("check must be a function spec -> reason | None (the requests the "
                        "backend refuses); to run the conformance kit before registering use "
                        "attnlab.testing.register_checked(name, fn, capabilities, ...)")
    if not isinstance(name, str) or not name or name == "auto":
        raise ValueError(f"backend name must be a non-empty string other than 'auto', got {name!r}")
    if name in _REGISTRY and not overwrite:
        raise ValueError(f"backend {name!r} is already registered; pass overwrite=True to "
                         f"replace it")
    backend = Backend(name, fn, capabilities, description,
                      **({"cost": cost} if cost is not None else {}),
                      check=check, available=available,
                      linear_memory=linear_memory)
    _REGISTRY[name] = backend
    return backend


def unregister_backend(name: str) -> Backend:
    """Remove the backend registered under ``name`` and return it (so a test or a plug-in can
    put back what it replaced with ``register_backend(..., overwrite=True)``)."""
    backend = get_backend(name)
    del _REGISTRY[name]
    return backend


def restore_backend(backend: Backend) -> None:
    """Put ``backend`` (as :func:`unregister_backend` or :func:`get_backend` returned it) back
    under its name, replacing what is there: how a plug-in or a test undoes a replacement."""
    _REGISTRY[backend.name] = backend


def list_backends() -> dict[str, Backend]:
    """All registered backends by name, in registration order."""
    return dict(_REGISTRY)


def get_backend(name: str) -> Backend:
    """The backend registered under ``name``; a ValueError lists the valid names otherwise."""
    if not isinstance(name, str) or name not in _REGISTRY:
        valid = ", ".join(["auto", *_REGISTRY])
        raise ValueError(f"backend must be one of {valid}; got {name!r}")
    return _REGISTRY[name]


def _cost(backend: Backend, spec: AttentionSpec) -> float:
    """The backend's cost for ``auto``: on a CUDA GPU the measured table of
    :mod:`attnlab.core.cuda_cost` where it has a row, else the backend's own model."""
    if spec.device.type == "cuda":
        measured = cuda_cost(backend.name, spec)
        if measured is not None:
            return measured
    return backend.cost(spec)


def select_backend(name: str, spec: AttentionSpec, *, linear_memory: bool = False) -> Backend:
    """The backend that will serve spec: the named one (or an error saying why it cannot), or for
    ``auto`` the cheapest exact backend that can. ``linear_memory``: ``auto`` picks only among
    backends whose memory for spec is linear in the sequence length (sharded attention, where
    every rank holds the whole sequence of a few heads)."""
    if name == "auto":
        able = [b for b in _REGISTRY.values() if b.capabilities.exact and b.why_not(spec) is None
                and (not linear_memory
                     or (b.linear_memory is not None and b.linear_memory(spec)))]
        if not able:
            reasons = "; ".join(f"{b.name}: {b.why_not(spec)}" for b in _REGISTRY.values())
            raise ValueError(f"no exact backend can serve this request ({reasons})")
        return min(able, key=lambda b: _cost(b, spec))
    backend = get_backend(name)
    reason = backend.why_not(spec)
    if reason is not None:
        able = [b.name for b in _REGISTRY.values() if b.why_not(spec) is None]
        raise ValueError(f"backend {name!r} cannot serve this request: {reason}; use backend='auto'"
                         f" or one of {', '.join(able) or 'none'}")
    return backend
