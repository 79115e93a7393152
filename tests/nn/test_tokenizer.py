"""The light tokenizer of the inspection gives what BertTokenizerFast gives on the same
checkpoint: texts, pairs, truncation (longest first, both sides of a pair), padding, scripts the
vocabulary lacks, and text that is nothing but spaces or control characters."""

import pytest
import torch

from attnlab.nn.bert import default_model_path, load_tokenizer
from attnlab.nn.tokenizer import BertTokenizerLite, light_tokenizer

TEXTS = ["The cat sat on the mat.", "", "   ", "naïve café, Ünïcödé — résumé", "注意力机制很有用",
         "emoji 🙂 and\ttabs\nnewlines\x00\x07", "can't won't it's", "a" * 300,
         "Attention lets every token look at every other token. " * 40]
PAIRS = ["A short second sentence.", "B " * 200, "", "它们相似吗？"]


@pytest.fixture(scope="module")
def both():
    path = default_model_path()
    lite = light_tokenizer(path)
    assert isinstance(lite, BertTokenizerLite)
    return lite, load_tokenizer(path)


def _same(a, b):
    assert a.keys() >= {"input_ids", "token_type_ids", "attention_mask"}
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize("text", TEXTS)
def test_single_texts_match(both, text):
    lite, full = both
    _same(lite([text], return_tensors="pt"), full([text], return_tensors="pt"))
    ids = lite([text], return_tensors="pt")["input_ids"][0].tolist()
    assert lite.convert_ids_to_tokens(ids) == full.convert_ids_to_tokens(ids)
    assert lite.decode(ids, skip_special_tokens=True) == full.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("max_length", [8, 33, 128, 512])
@pytest.mark.parametrize("pair", PAIRS)
def test_truncated_pairs_match(both, pair, max_length):
    lite, full = both
    text = TEXTS[-1]
    _same(lite([text], [pair], return_tensors="pt", truncation=True, max_length=max_length),
          full([text], [pair], return_tensors="pt", truncation=True, max_length=max_length))


def test_padding_and_the_tokenizer_json_defaults(both):
    lite, full = both
    _same(lite(TEXTS[:4], return_tensors="pt", padding=True),
          full(TEXTS[:4], return_tensors="pt", padding=True))
    # tokenizer.json carries truncation to 128: never applied unless asked for
    assert lite([TEXTS[-1]], return_tensors="pt")["input_ids"].shape[1] > 400
    with pytest.raises(ValueError, match="padding=True"):
        lite(TEXTS[:2], return_tensors="pt")
    with pytest.raises(ValueError, match="one pair per text"):
        lite(TEXTS[:2], PAIRS[:1])


def test_other_checkpoints_get_the_full_tokenizer(tmp_path):
    import shutil

    for f in default_model_path().iterdir():
        if f.is_file() and f.name != "tokenizer_config.json":
            shutil.copy(f, tmp_path / f.name)
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "BertTokenizerFast"}')
    assert isinstance(light_tokenizer(tmp_path), BertTokenizerLite)
    (tmp_path / "tokenizer.json").unlink()
    assert not isinstance(light_tokenizer(tmp_path), BertTokenizerLite)
