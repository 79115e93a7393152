"""Tokens as people read them: each token's piece of the text with its own spacing, so that a
report's contexts read as the text, on the three kinds of tokenizer the zoo brings: SmolLM2's
byte-level BPE, MiniLM's WordPiece and kjv's bytes; and the census's own contexts from them."""

import pytest
import torch
import transformers as tf

from attnlab.inspect import census
from attnlab.inspect.collect import tokens_of
from attnlab.inspect.report.census import census_data
from attnlab.inspect.tokens import reading_pieces

LEAR = "Kent's banishment, unbelievable.\n[Exeunt.] Fare thee well, King: sith thus thou wilt"


def _smollm2_tokenizer():
    from attnlab.zoo import smollm2

    if not smollm2.is_cached():                  # make install converts it once
        smollm2.convert()
    return tf.AutoTokenizer.from_pretrained(str(smollm2.cache_dir()))


def _minilm_tokenizer():
    from attnlab.nn.bert import resolve_model_path
    from attnlab.nn.tokenizer import light_tokenizer

    return light_tokenizer(resolve_model_path("default"))


def _kjv_tokenizer():
    from attnlab.zoo import kjv

    return kjv.tokenizer()


def _ids(tok, text):
    ids = tok(text)["input_ids"]
    return torch.as_tensor(ids[0] if isinstance(ids[0], list) else ids)


def tiny_census(which: str, text: str):
    """``(tokenizer, census)``: a census of a tiny random Llama run on the ids that tokenizer
    ``which`` ("smollm2", "minilm", "kjv") gives ``text``."""
    tok = {"smollm2": _smollm2_tokenizer, "minilm": _minilm_tokenizer,
           "kjv": _kjv_tokenizer}[which]()
    ids = _ids(tok, text)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=16,
        intermediate_size=32, vocab_size=int(ids.max()) + 1, max_position_embeddings=512))
    return tok, census(model, tok, input_ids=ids[None])


def test_smollm2_pieces_are_the_text_itself():
    tok = _smollm2_tokenizer()
    tokens = tokens_of(tok, _ids(tok, LEAR))
    assert " b" in tokens and "anish" in tokens              # the BPE split it reads through
    assert "".join(reading_pieces(tok, tokens)) == LEAR


def test_minilm_wordpiece_reads_as_words_with_punctuation_closed_up():
    tok = _minilm_tokenizer()
    tokens = tokens_of(tok, _ids(tok, LEAR))
    assert "##ishment" in tokens
    text = "".join(reading_pieces(tok, tokens))
    assert text == ("[CLS] kent's banishment, unbelievable. [exeunt.] fare thee well, "
                    "king: sith thus thou wilt [SEP]"), text
    # without the tokenizer, its pieces give it away
    assert "".join(reading_pieces(None, tokens)) == text


def test_kjv_bytes_are_the_text_itself():
    tok = _kjv_tokenizer()
    tokens = tokens_of(tok, _ids(tok, LEAR))
    pieces = reading_pieces(tok, tokens)
    assert "".join(pieces).replace("</s>", "") == LEAR


def test_sentencepiece_spaces_are_spaces():
    assert reading_pieces(None, ["\u2581Kent", "'s", "\u2581ban", "ishment"]) == [
        " Kent", "'s", " ban", "ishment"]


@pytest.mark.parametrize("which", ["smollm2", "minilm", "kjv"])
def test_the_census_report_carries_the_text_as_it_reads(which):
    """A census of a tiny model run on each tokenizer's ids: the report's pieces read as the
    text (the page marks one token inside them)."""
    _, c = tiny_census(which, LEAR)
    text = "".join(census_data(c)["text"])
    want = {"smollm2": LEAR, "kjv": LEAR + "</s>",
            "minilm": "[CLS] kent's banishment, unbelievable. [exeunt.] fare thee well, "
                      "king: sith thus thou wilt [SEP]"}[which]
    assert text == want


def test_a_census_without_a_tokenizer_reads_its_ids_as_numbers():
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=16,
        intermediate_size=32, vocab_size=50, max_position_embeddings=64))
    c = census(model, input_ids=torch.tensor([[5, 17, 3]]))
    assert "".join(census_data(c)["text"]) == "5 17 3"
