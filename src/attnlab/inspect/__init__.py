"""Capture, measure and show the attention of real models."""

from attnlab.inspect.capture import Recording, record

__all__ = ["Recording", "record"]
