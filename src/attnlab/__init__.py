"""attnlab: attention from the formula to fast, inspectable code."""

from attnlab.core import (
    AttentionOutput,
    Capabilities,
    attend,
    attention,
    list_backends,
    masks,
    merge_partials,
    register_backend,
    unregister_backend,
    which_backend,
)

from attnlab import testing as _testing  # noqa: F401,E402  (register_backend(check=True))

__version__ = "0.1.0"

__all__ = [
    "AttentionOutput",
    "Capabilities",
    "attend",
    "attention",
    "list_backends",
    "masks",
    "merge_partials",
    "register_backend",
    "unregister_backend",
    "which_backend",
]
