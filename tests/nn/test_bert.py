"""BertModel on attnlab layers against transformers' own BERT, on the embedded all-MiniLM-L6-v2."""

import pytest
import torch

from attnlab.nn import BertModel, load_default, mean_pool
from attnlab.nn.bert import BertConfig, default_model_path, resolve_model_path

TEXTS = ["Attention is all you need.",
         "The cat sat on the mat, and then it slept for a very long time in the sun.",
         "Hi!",
         "Transformers compute a weighted average of values; the weights come from a softmax."]


@pytest.fixture(scope="module")
def models():
    from transformers import BertModel as HFBert

    ours, tok = load_default()
    hf = HFBert.from_pretrained(str(default_model_path()), attn_implementation="eager",
                                local_files_only=True).eval()
    return ours, hf, tok


def test_padded_batch_matches_transformers(models):
    ours, hf, tok = models
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    assert (batch["attention_mask"] == 0).any()                     # a padded batch
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["attention_mask"], return_weights=True,
                 return_hidden_states=True)
        b = hf(**batch, output_attentions=True, output_hidden_states=True)
    assert (a.last_hidden_state - b.last_hidden_state).abs().max() < 1e-4
    assert len(a.attentions) == len(b.attentions) == 6
    for ma, mb in zip(a.attentions, b.attentions):
        assert ma.shape == mb.shape == (4, 12, batch["input_ids"].shape[1],) * 1 + (
            batch["input_ids"].shape[1],)
        assert (ma - mb).abs().max() < 1e-4
    for ha, hb in zip(a.hidden_states, b.hidden_states):
        assert (ha - hb).abs().max() < 1e-4
    assert (a.pooler_output - b.pooler_output).abs().max() < 1e-4


def test_sentence_pair_token_types_and_unpadded_lengths(models):
    ours, hf, tok = models
    batch = tok(["How does attention work?"], ["It averages values."], return_tensors="pt")
    assert batch["token_type_ids"].max() == 1
    with torch.no_grad():
        a = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        b = hf(**batch)
    assert (a.last_hidden_state - b.last_hidden_state).abs().max() < 1e-4
    # A sentence alone and inside a padded batch give the same states on its real tokens.
    single = tok(TEXTS[2:3], return_tensors="pt")
    padded = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        s = ours(single["input_ids"], single["attention_mask"]).last_hidden_state[0]
        p = ours(padded["input_ids"], padded["attention_mask"]).last_hidden_state[2]
    n = single["input_ids"].shape[1]
    assert (s - p[:n]).abs().max() < 1e-4


def test_sentence_embedding_is_mean_pooling(models):
    ours, hf, tok = models
    batch = tok(TEXTS[:2], padding=True, return_tensors="pt")
    with torch.no_grad():
        emb = mean_pool(ours(batch["input_ids"], batch["attention_mask"]).last_hidden_state,
                        batch["attention_mask"])
    emb = torch.nn.functional.normalize(emb, dim=-1)
    assert emb.shape == (2, 384) and 0.0 < float(emb[0] @ emb[1]) < 0.9


def test_bad_model_paths_and_configs(tmp_path):
    with pytest.raises(FileNotFoundError, match="is not a folder"):
        resolve_model_path(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="config.json"):
        BertModel.from_pretrained(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ValueError, match="only BERT-style"):
        BertConfig.from_json(tmp_path / "config.json")


def test_fast_tokenizer_path_tokenizes_as_autotokenizer():
    from transformers import AutoTokenizer

    from attnlab.nn.bert import default_model_path, load_tokenizer

    path = default_model_path()
    ours, auto = load_tokenizer(path), AutoTokenizer.from_pretrained(str(path),
                                                                      local_files_only=True)
    assert ours.is_fast and ours.vocab == auto.vocab
    texts = ["Tokenization of unbelievably long words, CJK 注意力 and <b>tags</b>.", "x"]
    a, b = ours(texts, ["A pair.", "y"], padding=True), auto(texts, ["A pair.", "y"], padding=True)
    assert a["input_ids"] == b["input_ids"] and a["token_type_ids"] == b["token_type_ids"]
