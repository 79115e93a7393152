"""Modules that own parameters and call the functional core; they never re-implement attention.

Mask polarity: modules that mirror torch (``MultiheadAttention``, ``EncoderLayer``,
``Encoder``, ``DecoderLayer``, ``Decoder``, ``Transformer``) take torch's masks (bool True =
masked out / padding); the scoring-function modules
(``AdditiveAttention``...) take the core's (bool True = may attend); ``BertModel`` takes Hugging
Face's ``attention_mask`` (1 = real token).
"""

from attnlab.nn.additive import AdditiveAttention, CosineAttention, GeneralAttention
from attnlab.nn.bert import BertConfig, BertModel, BertOutput, load_default, mean_pool
from attnlab.nn.decoder import Decoder, DecoderLayer, Transformer
from attnlab.nn.efficient import LinformerProjection, PerformerAttention
from attnlab.nn.graph import GATConv, GATv2Conv
from attnlab.nn.multihead import KVCache, MultiheadAttention
from attnlab.nn.position import (
    LearnedPositionalEncoding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    sinusoidal_table,
)
from attnlab.nn.transformer import (
    Encoder,
    EncoderLayer,
    EncoderLayerOutput,
    EncoderOutput,
    FeedForward,
)

__all__ = [
    "GATConv",
    "GATv2Conv",
    "AdditiveAttention",
    "BertConfig",
    "BertModel",
    "BertOutput",
    "CosineAttention",
    "Decoder",
    "DecoderLayer",
    "KVCache",
    "Transformer",
    "Encoder",
    "EncoderLayer",
    "EncoderLayerOutput",
    "EncoderOutput",
    "FeedForward",
    "GeneralAttention",
    "LearnedPositionalEncoding",
    "LinformerProjection",
    "MultiheadAttention",
    "PerformerAttention",
    "RotaryEmbedding",
    "SinusoidalPositionalEncoding",
    "alibi_bias",
    "alibi_slopes",
    "load_default",
    "mean_pool",
    "sinusoidal_table",
]
