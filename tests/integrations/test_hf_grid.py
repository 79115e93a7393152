"""transformers' own test of an attention implementation, ported: the grid of
``_test_eager_matches_sdpa_inference`` (tests/test_modeling_common.py) with attnlab's names in
place of sdpa, then what that grid leaves out: padding rows, packed sequences, refusals.

The grid: {fp32, bf16, fp16} x padding {left, right} x attention mask {on, off} x
output_attentions {on, off}; batch 7, the last row with two padded tokens; ``sliding_window``
forced to 2 where the config has one; the last hidden state on the real tokens against eager,
with transformers' CPU tolerances (fp32 1e-6 / 1e-4, fp16 5e-3 / 5e-3, bf16 1e-2 / 1e-2), after
transformers' own set_config_for_less_flaky_test / set_model_for_less_flaky_test.
A name that cannot serve a cell must refuse it by name (docs/hf.md lists which)."""

import subprocess
import sys

import pytest
import torch
import transformers as tf
from transformers.testing_utils import set_config_for_less_flaky_test, set_model_for_less_flaky_test

from attnlab.integrations import transformers as ah

V = 99
N = 7
TOL = {torch.float32: (1e-6, 1e-4), torch.float16: (5e-3, 5e-3),
       torch.bfloat16: (1e-2, 1e-2)}
NAMES = ("attnlab", "attnlab_reference", "attnlab_tiled", "attnlab_fused",
         "attnlab_blocksparse")
WEIGHTS = {"attnlab", "attnlab_reference"}           # the names that return attention weights


def _small(intermediate_size=37, **extra):
    return dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                intermediate_size=intermediate_size, vocab_size=V, max_position_embeddings=128,
                **extra)


def build(family):
    """The family's model as transformers' grid builds it: tiny, no dropout, every norm's
    epsilon set to 1.0 by transformers' own "less flaky" helpers."""
    model = _build(family)
    set_config_for_less_flaky_test(model.config)
    set_model_for_less_flaky_test(model)
    return model


def _build(family):
    torch.manual_seed(42)
    zero = dict(attention_dropout=0.0)
    if family == "bert":
        return tf.BertModel(tf.BertConfig(hidden_dropout_prob=0.0,
                                          attention_probs_dropout_prob=0.0, **_small()))
    if family == "gpt2":
        return tf.GPT2Model(tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V,
                                          n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                          attn_pdrop=0.0))
    if family == "llama":
        return tf.LlamaModel(tf.LlamaConfig(num_key_value_heads=2, **zero, **_small()))
    if family == "mistral":
        return tf.MistralModel(tf.MistralConfig(num_key_value_heads=2, sliding_window=2,
                                                **zero, **_small()))
    if family == "qwen2":
        return tf.Qwen2Model(tf.Qwen2Config(num_key_value_heads=2, sliding_window=2, **zero,
                                            **_small()))
    if family == "gemma2":
        return tf.Gemma2Model(tf.Gemma2Config(num_key_value_heads=2, head_dim=8,
                                              sliding_window=2, query_pre_attn_scalar=8,
                                              attn_logit_softcapping=2.0, **zero, **_small()))
    if family == "gpt_oss":
        model = tf.GptOssModel(tf.GptOssConfig(
            num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
            sliding_window=2, layer_types=["sliding_attention", "full_attention"], **zero,
            **_small(intermediate_size=64)))        # experts: grouped_mm wants 16-byte strides
        with torch.no_grad():
            for m in model.modules():
                if hasattr(m, "sinks"):
                    m.sinks.normal_(0.0, 2.0)
        return model
    raise AssertionError(family)


FAMILIES = ("bert", "gpt2", "llama", "mistral", "qwen2", "gemma2", "gpt_oss")
# Cells a name refuses, with the words its refusal must contain (docs/hf.md, "transformers'
# grid"): sdpa takes no softcap and returns no lse (sinks are merged from it).
REFUSED = {("gemma2", "attnlab_fused"): "attn_logit_softcapping",
           ("gpt_oss", "attnlab_fused"): "sinks"}


@pytest.fixture(scope="module", autouse=True)
def _names():
    ah.register()
    yield


def _inputs(mask_on, padding):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, V, (7, N), generator=g)
    if not mask_on:
        return {"input_ids": ids}, torch.ones(7, N, dtype=torch.bool)
    mask = torch.ones(7, N, dtype=torch.long)
    if padding == "left":
        mask[-1, :2] = 0
    else:
        mask[-1, -2:] = 0
    return {"input_ids": ids, "attention_mask": mask}, mask.bool()


def _last_hidden(model, impl, inputs, output_attentions):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, output_attentions=output_attentions)
    return out.hidden_states[-1]


@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_grid_eager_matches_every_name(family):
    base = build(family).eval()
    results = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        model = base.to(dtype)
        atol, rtol = TOL[dtype]
        for padding in ("left", "right"):
            for mask_on in (True, False):
                inputs, real = _inputs(mask_on, padding)
                for oa in (False, True):
                    want = _last_hidden(model, "eager", inputs, oa)
                    for name in NAMES:
                        cell = f"{family} {name} {dtype} {padding} mask={mask_on} oa={oa}"
                        refusal = REFUSED.get((family, name))
                        try:
                            got = _last_hidden(model, name, inputs, oa)
                        except ValueError as err:
                            # a refusal by name: the model's feature, or weights asked of a
                            # name that does not compute them
                            words = [w for w in (refusal, "output_attentions" if oa and
                                                 name not in WEIGHTS else None) if w]
                            assert any(w in str(err) for w in words), (cell, err)
                            results.append("refused")
                            continue
                        assert refusal is None, f"{cell}: served, should refuse ({refusal})"
                        torch.testing.assert_close(got[real], want[real], atol=atol, rtol=rtol,
                                                   msg=cell)
                        results.append("pass")
    cells = 3 * 2 * 2 * 2 * len(NAMES)
    assert len(results) == cells


# ----------------------------------------------------------------------------- padding rows

LM = {"bert": lambda: tf.BertForMaskedLM, "gpt2": lambda: tf.GPT2LMHeadModel,
      "llama": lambda: tf.LlamaForCausalLM, "mistral": lambda: tf.MistralForCausalLM,
      "qwen2": lambda: tf.Qwen2ForCausalLM, "gemma2": lambda: tf.Gemma2ForCausalLM,
      "gpt_oss": lambda: tf.GptOssForCausalLM}
FLOAT_NAMES = ("attnlab", "attnlab_reference", "attnlab_tiled", "attnlab_fused")


def _lm(family):
    base = build(family)
    model = LM[family]()(base.config)
    model.base_model.load_state_dict(base.state_dict(), strict=False)   # BERT: no pooler
    return model


@pytest.mark.parametrize("family", FAMILIES)
def test_padding_rows_are_eagers_on_every_float_mask_name(family):
    # transformers' grid leaves the padded positions out ("masked tokens output slightly
    # deviates"); attnlab does not: every logit, padded positions included, in float32, at a
    # length that crosses the tiles, left and right padding, against eager.
    model = _lm(family).float().eval()
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (3, 40), generator=g)
    for padding in ("left", "right"):
        mask = torch.ones_like(ids)
        mask[0, :13] = 0 if padding == "left" else 1
        mask[0, 27:] = 0 if padding == "right" else 1
        mask[1, :1] = 0 if padding == "left" else 1
        with torch.no_grad():
            model.set_attn_implementation("eager")
            want = model(input_ids=ids, attention_mask=mask).logits
            for name in FLOAT_NAMES:
                if (family, name) in REFUSED:
                    continue
                model.set_attn_implementation(name)
                got = model(input_ids=ids, attention_mask=mask).logits
                torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-5,
                                           msg=f"{family} {name} {padding}: all positions")


# ----------------------------------------------------------------------------- packing

@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "gemma2", "gpt_oss"])
@pytest.mark.parametrize("name", ["attnlab", "attnlab_tiled", "attnlab_blocksparse"])
def test_packed_sequences_equal_separate_runs(family, name):
    # Padding-free batches: three sequences packed into one row, delimited by position_ids
    # (transformers then builds a block-diagonal mask) or by cu_seq_lens_q / cu_seq_lens_k
    # (the flash-attention kwargs of DataCollatorWithFlattening), against each sequence run
    # alone. Lengths 5, 11 and 70 cross the tiles.
    model = _lm(family).float().eval()
    model.set_attn_implementation(name)
    g = torch.Generator().manual_seed(2)
    lengths = (5, 11, 70)
    seqs = [torch.randint(1, V, (1, n), generator=g) for n in lengths]
    with torch.no_grad():
        alone = torch.cat([model(input_ids=s).logits for s in seqs], dim=1)
        row = torch.cat(seqs, dim=1)
        pos = torch.cat([torch.arange(n) for n in lengths])[None]
        # use_cache=False: transformers reads packing from position_ids only without a cache
        by_positions = model(input_ids=row, position_ids=pos, use_cache=False).logits
        cu = torch.tensor([0, 5, 16, 86], dtype=torch.int32)
        by_cu = model(input_ids=row, position_ids=pos, cu_seq_lens_q=cu, cu_seq_lens_k=cu,
                      max_length_q=70, max_length_k=70, use_cache=False).logits
        model.set_attn_implementation("eager")
        eager = model(input_ids=row, position_ids=pos, use_cache=False).logits
    # against eager on the same packed row, and against the sequences run alone, within 1% of
    # the logits' scale (gpt-oss's experts round differently by batch composition: eager
    # itself differs from its separate runs by 6e-5 on logits of size 8e-3); a sequence that
    # saw another's tokens would be off by the logits' own size
    scale = float(alone.abs().max())
    for got in (by_positions, by_cu):
        torch.testing.assert_close(got, eager, rtol=2e-4, atol=1e-2 * scale)
        torch.testing.assert_close(got, alone, rtol=2e-4, atol=1e-2 * scale)


def test_cu_seq_lens_alone_delimit_the_sequences():
    # cu_seq_lens without position_ids: transformers builds a plain causal mask, attnlab's
    # mask function builds nothing, and the call applies the sequences from cu_seq_lens.
    model = _lm("llama").float().eval()
    model.set_attn_implementation("attnlab_tiled")
    g = torch.Generator().manual_seed(3)
    a, b = torch.randint(1, V, (1, 6), generator=g), torch.randint(1, V, (1, 9), generator=g)
    cu = torch.tensor([0, 6, 15], dtype=torch.int32)
    pos = torch.cat([torch.arange(6), torch.arange(9)])[None]
    with torch.no_grad():
        want = torch.cat([model(input_ids=a).logits, model(input_ids=b).logits], dim=1)
        got = model(input_ids=torch.cat([a, b], 1), position_ids=pos, cu_seq_lens_q=cu,
                    cu_seq_lens_k=cu).logits
    torch.testing.assert_close(got, want, rtol=2e-4, atol=2e-5)
    with pytest.raises(ValueError, match="cu_seq_lens"):
        with torch.no_grad():
            model(input_ids=torch.cat([a, b], 1), cu_seq_lens_q=cu,
                  cu_seq_lens_k=torch.tensor([0, 7, 15], dtype=torch.int32))


# ----------------------------------------------------------------------------- refusals

def _train_step(model, name):
    model.set_attn_implementation(name)
    model.train()
    ids = torch.randint(1, 50, (2, 6))
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()


DEFAULTS = {
    "gpt2": (lambda: tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_head=2, n_embd=16,
                                                      vocab_size=50)),
             "attnlab_fused", "GPT-2's attn_pdrop = 0.1 needs attention dropout"),
    "bert": (lambda: tf.BertForMaskedLM(tf.BertConfig(num_hidden_layers=1,
                                                      num_attention_heads=2, hidden_size=16,
                                                      intermediate_size=32, vocab_size=50)),
             "attnlab_fused", "BERT's attention_probs_dropout_prob = 0.1"),
    "gemma2": (lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=16,
        head_dim=8, intermediate_size=32, vocab_size=50)),
        "attnlab_fused", "Gemma 2's attn_logit_softcapping = 50.0"),
    "gpt_oss": (lambda: tf.GptOssForCausalLM(tf.GptOssConfig(
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, hidden_size=16,
        head_dim=8, intermediate_size=32, vocab_size=50, num_local_experts=2,
        num_experts_per_tok=1)), "attnlab_fused", "gpt-oss's attention sinks"),
    "t5": (lambda: tf.T5ForConditionalGeneration(tf.T5Config(
        vocab_size=50, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2,
        decoder_start_token_id=0)), "attnlab_blocksparse", "T5's relative position bias"),
}


@pytest.mark.parametrize("family", sorted(DEFAULTS))
def test_refusals_name_the_model_feature_and_what_to_use(family):
    make, name, words = DEFAULTS[family]
    model = make()
    with pytest.raises(ah.UnsupportedAttentionOption, match=words) as err:
        ah.check(model, name, training=True)                 # before any forward
    assert "attnlab_tiled" in str(err.value) and "'attnlab'" in str(err.value)
    if family != "t5":
        with pytest.raises(ah.UnsupportedAttentionOption, match=words):
            _train_step(model, name)                         # and at the first training step
    ah.check(model, "attnlab", training=True)                # auto serves every default config
    if family != "t5":
        _train_step(model, "attnlab")
    if family in ("gpt2", "bert"):                            # evaluation needs no dropout
        ah.check(model, name, training=False)


def test_triton_names_exist_only_where_they_run_and_register_is_named():
    # over 5 s: a fresh interpreter importing transformers without a GPU; the only test of the
    # Triton names' absence
    # Without a GPU (and without Triton's interpreter) the Triton names are not registered, so
    # setting one fails at once; asking for one by name says why. Forgetting register() is
    # transformers' own error, which the docs answer (docs/hf.md, first lines).
    code = """
import transformers as tf
from attnlab.integrations import transformers as ah
names = ah.register()
assert "attnlab_triton" not in names and "attnlab_tiled" in names, names
try:
    ah.register(["attnlab_triton"])
except ValueError as e:
    assert "no CUDA GPU" in str(e) and "attnlab_tiled" in str(e), e
else:
    raise AssertionError("registered")
cfg = tf.LlamaConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=16,
                     intermediate_size=32, vocab_size=50)
m = tf.LlamaForCausalLM(cfg)
try:
    m.set_attn_implementation("attnlab_triton")
except ValueError as e:
    assert "attnlab_triton" in str(e)
else:
    raise AssertionError("set")
print("ok")
"""
    env = {k: v for k, v in __import__("os").environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env={**env, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
