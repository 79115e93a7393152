"""Backends, one file each; importing this package registers them in order of exactness."""

from attnlab.core.backends import blocksparse, reference, sdpa, tiled  # noqa: F401  (registration side effect)
