"""A BERT checkpoint's ``tokenizer.json`` read by Hugging Face ``tokenizers`` directly.

``transformers.BertTokenizerFast`` is a wrapper around exactly this ``tokenizers.Tokenizer``;
importing transformers to build it costs about 3 s, a fifth of `attnlab inspect` on a
512-token text. :class:`BertTokenizerLite` answers the calls the inspection makes (encode
texts or sentence pairs into ``input_ids``, ``token_type_ids`` and ``attention_mask``,
truncate longest-first, pad to the longest, map ids back to tokens) with the same results
(tested against ``BertTokenizerFast``). Everything else, and every checkpoint that is not a
BERT WordPiece tokenizer, goes through :func:`attnlab.nn.bert.load_tokenizer`.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch


class BertTokenizerLite:
    """What the inspection needs of ``BertTokenizerFast``, on the checkpoint's own
    ``tokenizer.json``. Build it with :func:`light_tokenizer`."""

    def __init__(self, path: Path, config: dict):
        from tokenizers import Tokenizer

        self._tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        self._tok.no_truncation()             # the file may carry a default (128 for MiniLM)
        self._tok.no_padding()
        self.name_or_path = str(path)
        self.unk_token = config.get("unk_token", "[UNK]")
        self.pad_token = config.get("pad_token", "[PAD]")
        self.model_max_length = int(config.get("model_max_length", 512))

    def __call__(self, text, text_pair=None, *, return_tensors: str | None = None,
                 padding: bool = False, truncation: bool = False,
                 max_length: int | None = None) -> dict:
        texts = [text] if isinstance(text, str) else list(text)
        pairs = None if text_pair is None else (
            [text_pair] if isinstance(text_pair, str) else list(text_pair))
        if pairs is not None and len(pairs) != len(texts):
            raise ValueError(f"text_pair has {len(pairs)} texts but text has {len(texts)}; "
                             "give one pair per text")
        tok = self._tok
        if truncation:
            tok.enable_truncation(max_length or self.model_max_length, strategy="longest_first")
        if padding:
            tok.enable_padding(pad_id=tok.token_to_id(self.pad_token), pad_token=self.pad_token)
        try:
            inputs = texts if pairs is None else list(zip(texts, pairs))
            encodings = tok.encode_batch(inputs)
        finally:
            tok.no_truncation()
            tok.no_padding()
        out = {"input_ids": [e.ids for e in encodings],
               "token_type_ids": [e.type_ids for e in encodings],
               "attention_mask": [e.attention_mask for e in encodings]}
        if return_tensors is None:
            return out
        if return_tensors != "pt":
            raise ValueError(f"return_tensors must be 'pt' or None, got {return_tensors!r}")
        if len({len(ids) for ids in out["input_ids"]}) > 1:
            raise ValueError("the texts have different lengths; pass padding=True to stack them")
        return {k: torch.tensor(v, dtype=torch.int64).reshape(len(encodings), -1)
                for k, v in out.items()}

    def convert_ids_to_tokens(self, ids) -> list[str]:
        """Token strings of ``ids``."""
        return [self._tok.id_to_token(int(i)) for i in ids]

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (word pieces joined)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


def light_tokenizer(path: str | Path):
    """:class:`BertTokenizerLite` for a BERT checkpoint with a ``tokenizer.json``, else the
    full tokenizer of :func:`attnlab.nn.bert.load_tokenizer` (which also says what is missing
    when the folder has no tokenizer)."""
    from attnlab.nn.bert import load_tokenizer

    path = Path(path)
    try:
        config = json.loads((path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        config = {}
    if (config.get("tokenizer_class") in ("BertTokenizer", "BertTokenizerFast")
            and (path / "tokenizer.json").is_file()):
        return BertTokenizerLite(path, config)
    return load_tokenizer(path)
