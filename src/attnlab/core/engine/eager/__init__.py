"""The eager tile loop: the engine in PyTorch operations, the reference the compiled loop is
tested against and the path of every call it does not take (see :mod:`attnlab.core.engine`)."""
