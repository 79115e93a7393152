"""Backends, one file each; importing this package registers them. The import order is the
registration order that list_backends() shows: the reference first."""

from attnlab.core.backends import reference  # noqa: F401, I001  (registration side effects)
from attnlab.core.backends import sdpa  # noqa: F401
from attnlab.core.backends import tiled  # noqa: F401
from attnlab.core.backends import blocksparse  # noqa: F401
from attnlab.core.backends import packed  # noqa: F401
from attnlab.core.backends import gpu  # noqa: F401  (Triton kernels; imports triton lazily)
from attnlab.core.backends import approx  # noqa: F401  (approximate: never chosen by auto)
