"""Capture from Hugging Face decoders and encoder-decoders, on tiny randomly initialised models
built from ``transformers`` config classes (nothing downloaded).

Two properties for every model kind: recording never changes what the model computes (its
output with and without ``record()`` agrees to float32 rounding, padding rows included), and
the recorded maps equal the model's own ``output_attentions`` (eager) on the real tokens of a
padded batch -- left-padded for the decoders, the encoder padded for the encoder-decoders.
"""

import pytest
import torch
import transformers  # a dependency of attnlab (the embedded model's tokenizer)

from attnlab.inspect.capture import record
from attnlab.integrations.transformers import UnsupportedAttentionOption, make_attention

_hf_attention = make_attention("reference")

V = 40


def _decoder(kind):
    tf = transformers
    small = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                 intermediate_size=64, vocab_size=V, max_position_embeddings=64)
    if kind == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V,
                                                n_positions=64, bos_token_id=0, eos_token_id=0))
    if kind == "llama":        # grouped-query attention: 4 query heads, 2 key/value heads
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **small))
    if kind == "mistral":      # sliding window of 3 keys, shorter than the sequence
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=3,
                                                      **small))
    if kind == "gemma2":       # logit soft-capping and alternating sliding-window layers
        return tf.Gemma2ForCausalLM(tf.Gemma2Config(num_key_value_heads=2, head_dim=8,
                                                    sliding_window=3,
                                                    attn_logit_softcapping=2.0, **small))
    if kind == "gpt_oss":      # per-head attention sinks
        cfg = tf.GptOssConfig(num_key_value_heads=2, head_dim=8, num_local_experts=2,
                              num_experts_per_tok=1, sliding_window=4,
                              layer_types=["sliding_attention", "full_attention"], **small)
        model = tf.GptOssForCausalLM(cfg)
        with torch.no_grad():
            for m in model.modules():
                if hasattr(m, "sinks"):
                    m.sinks.normal_(0.0, 2.0)       # sinks that matter
        return model
    raise AssertionError(kind)


def _seq2seq(kind):
    tf = transformers
    if kind == "bart":
        cfg = tf.BartConfig(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                            decoder_attention_heads=4, d_model=32, encoder_ffn_dim=64,
                            decoder_ffn_dim=64, vocab_size=V, max_position_embeddings=64)
        return tf.BartForConditionalGeneration(cfg)
    if kind == "marian":
        cfg = tf.MarianConfig(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                              decoder_attention_heads=4, d_model=32, encoder_ffn_dim=64,
                              decoder_ffn_dim=64, vocab_size=V, max_position_embeddings=64,
                              pad_token_id=1, decoder_start_token_id=1)
        return tf.MarianMTModel(cfg)
    if kind == "t5":           # relative position bias, no 1/sqrt(d) scale
        cfg = tf.T5Config(num_layers=2, num_decoder_layers=2, num_heads=4, d_model=32, d_kv=8,
                          d_ff=64, vocab_size=V, relative_attention_num_buckets=8)
        return tf.T5ForConditionalGeneration(cfg)
    raise AssertionError(kind)


def _eager_maps(model, **batch):
    prev = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        return model(**batch, output_attentions=True)
    finally:
        model.set_attn_implementation(prev)


def _assert_same(mine, theirs_per_layer, b, rows=None, cols=None):
    """``mine (L, H, n_q, n_k)`` against transformers' per-layer maps of sequence ``b``,
    restricted to its real rows and columns."""
    theirs = torch.stack([a[b] for a in theirs_per_layer]).double()
    if rows is not None:
        theirs = theirs[:, :, rows]
    if cols is not None:
        theirs = theirs[..., cols]
    assert (mine - theirs).abs().max().item() < 1e-6


DECODERS = ["gpt2", "llama", "mistral", "gemma2", "gpt_oss"]


@pytest.mark.parametrize("kind", DECODERS)
def test_decoder_on_a_left_padded_batch(kind):
    torch.manual_seed(0)
    model = _decoder(kind).eval()
    ids = torch.randint(2, V, (3, 9))
    am = torch.ones(3, 9, dtype=torch.long)
    am[1, :4] = 0
    am[2, :1] = 0
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=am).logits
        with record(model) as rec:
            recorded = model(input_ids=ids, attention_mask=am).logits
        eager = _eager_maps(model, input_ids=ids, attention_mask=am)
    tol = 1e-5 * plain.abs().max().item()
    assert (recorded - plain).abs().max().item() <= tol        # padding rows included
    assert rec.kinds == ["causal", "causal"]
    for b in range(3):
        mine = rec.maps(b, attention_mask=am)
        n = int(am[b].sum())
        assert mine.shape == (2, 4, n, n)
        real = am[b].bool()
        _assert_same(mine, eager.attentions, b, real, real)
        assert not torch.triu(mine, diagonal=1).any()           # causal: nothing above
        if kind != "gpt_oss":                                   # sinks take part of the mass
            torch.testing.assert_close(mine.sum(-1), torch.ones_like(mine.sum(-1)))
        else:
            assert (mine.sum(-1) < 1 - 1e-3).all()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_generation_with_a_cache_is_unchanged(kind):
    torch.manual_seed(1)
    model = _decoder(kind).eval()
    ids = torch.randint(2, V, (2, 5))
    am = torch.ones(2, 5, dtype=torch.long)
    am[0, :2] = 0
    args = dict(input_ids=ids, attention_mask=am, max_new_tokens=4, do_sample=False,
                pad_token_id=0)
    with torch.no_grad():
        plain = model.generate(**args)
        with record(model) as rec:
            recorded = model.generate(**args)
    assert torch.equal(plain, recorded)
    # prefill (2 layers) then one query per new token and layer, over the growing cache
    assert [w.shape[-2:] for w in rec.raw[:2]] == [(5, 5)] * 2
    assert [w.shape[-2:] for w in rec.raw[2:4]] == [(1, 6)] * 2


@pytest.mark.parametrize("kind", ["bart", "marian", "t5"])
def test_encoder_decoder_self_causal_and_cross(kind):
    torch.manual_seed(0)
    model = _seq2seq(kind).eval()
    src = torch.randint(2, V, (2, 8))
    am = torch.ones(2, 8, dtype=torch.long)
    am[1, 5:] = 0                                   # the encoder's batch is right-padded
    tgt = torch.randint(2, V, (2, 6))
    batch = dict(input_ids=src, attention_mask=am, decoder_input_ids=tgt)
    with torch.no_grad():
        plain = model(**batch).logits
        with record(model) as rec:
            recorded = model(**batch).logits
        eager = _eager_maps(model, **batch)
    assert (recorded - plain).abs().max().item() <= 1e-5 * plain.abs().max().item()
    assert sorted(set(rec.kinds)) == ["causal", "cross", "self"]
    assert rec.kinds.count("cross") == 2
    with pytest.raises(ValueError, match="kind="):
        rec.maps(0)
    for b in range(2):
        real = am[b].bool()
        _assert_same(rec.maps(b, kind="self", attention_mask=am), eager.encoder_attentions, b,
                     real, real)
        dec = rec.maps(b, kind="causal")
        _assert_same(dec, eager.decoder_attentions, b)
        assert not torch.triu(dec, diagonal=1).any()
        cross = rec.maps(b, kind="cross", key_attention_mask=am)
        assert cross.shape == (2, 4, 6, int(real.sum()))
        _assert_same(cross, eager.cross_attentions, b, cols=real)


class _Module(torch.nn.Module):
    is_causal = True
    training = False


def test_options_the_adapter_cannot_honour_are_refused():
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(UnsupportedAttentionOption, match="seq_idx"):
        _hf_attention(_Module(), q, q, q, None, seq_idx=torch.tensor([0, 0, 0]))
    with pytest.raises(UnsupportedAttentionOption, match="cu_seq_lens"):   # lengths past the row
        _hf_attention(_Module(), q, q, q, None, cu_seq_lens_q=torch.tensor([0, 2, 5]))
    with pytest.raises(UnsupportedAttentionOption, match="chunk_size"):
        _hf_attention(_Module(), q, q, q, None, chunk_size=2)
    out, w = _hf_attention(_Module(), q, q, q, None, position_ids=torch.arange(3),
                           output_attentions=True)          # bookkeeping passes
    assert not torch.triu(w, diagonal=1).any()              # the module's is_causal is used
