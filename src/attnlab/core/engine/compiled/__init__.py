"""The compiled tile loop: the engine's fast path in C++, built once per machine (see
:mod:`attnlab.core.engine`)."""
