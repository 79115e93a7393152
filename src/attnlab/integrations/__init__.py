"""Registration with other libraries: attnlab's attention inside their models.

* :mod:`attnlab.integrations.transformers`: every Hugging Face model on attnlab's backends
  through transformers' own attention interface (``attn_implementation="attnlab_tiled"``...);
  inspect's and diagnose's recorders build on it.

Nothing is registered on import: call the module's ``register()``.
"""
