"""Hugging Face models of nine families on attnlab's backends, through the public names of
attnlab.integrations.transformers, against transformers' own attention (its sdpa in float64;
eager where sdpa refuses the model: Gemma 2's softcap, gpt-oss's sinks).

Tiny models built from config classes (nothing downloaded). For each family and every name
whose backend serves it: logits on the real tokens and every parameter's gradient in training
mode, with no padding, right padding and left padding, at lengths 1, 7, 129 and 600 (which
cross the tiles of tiled and blocksparse), and greedy generate() with the cache."""

import subprocess
import sys

import pytest
import torch
import transformers as tf

from attnlab.integrations import transformers as ah

V = 61
LENGTHS = ((1, "none"), (7, "right"), (7, "left"), (129, "left"), (129, "right"),
           (600, "none"))


def _small(**extra):
    return dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                intermediate_size=64, vocab_size=V, max_position_embeddings=640, **extra)


def build(family):
    torch.manual_seed(0)
    if family == "bert":
        return tf.BertForMaskedLM(tf.BertConfig(hidden_dropout_prob=0.0,
                                                attention_probs_dropout_prob=0.0, **_small()))
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V,
                                                n_positions=640, resid_pdrop=0.0,
                                                embd_pdrop=0.0, attn_pdrop=0.0))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **_small()))
    if family == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=5,
                                                      **_small()))
    if family == "qwen2":
        return tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=2, **_small()))
    if family == "gemma2":
        return tf.Gemma2ForCausalLM(tf.Gemma2Config(num_key_value_heads=2, head_dim=8,
                                                    sliding_window=5, query_pre_attn_scalar=8,
                                                    attn_logit_softcapping=2.0, **_small()))
    if family == "gpt_oss":
        cfg = tf.GptOssConfig(num_key_value_heads=2, head_dim=8, num_local_experts=2,
                              num_experts_per_tok=1, sliding_window=5,
                              layer_types=["sliding_attention", "full_attention"], **_small())
        model = tf.GptOssForCausalLM(cfg)
        with torch.no_grad():
            for m in model.modules():
                if hasattr(m, "sinks"):
                    m.sinks.normal_(0.0, 2.0)                  # sinks that matter
        return model
    if family == "bart":
        return tf.BartForConditionalGeneration(tf.BartConfig(
            encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
            decoder_attention_heads=4, d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64,
            vocab_size=V, max_position_embeddings=640, dropout=0.0, attention_dropout=0.0))
    if family == "t5":
        return tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            dropout_rate=0.0, relative_attention_num_buckets=8, decoder_start_token_id=0,
            pad_token_id=0))
    raise AssertionError(family)


DECODERS = ("gpt2", "llama", "mistral", "qwen2", "gemma2", "gpt_oss")
SEQ2SEQ = ("bart", "t5")
FAMILIES = ("bert",) + DECODERS + SEQ2SEQ
# transformers' reference for each family (sdpa in float64; eager in float32 where sdpa is
# refused: eager's float32 softmax turns float64 left padding into NaN).
REFERENCE = {f: ("sdpa", torch.float64) for f in FAMILIES}
REFERENCE.update(gemma2=("eager", torch.float32), gpt_oss=("eager", torch.float32))
# Which names serve which family (docs/hf.md has the same table): sdpa takes no softcap and
# returns no lse (sinks are merged from it); blocksparse takes no float mask (T5's bias).
SERVES = {
    "attnlab": set(FAMILIES),
    "attnlab_reference": set(FAMILIES),
    "attnlab_tiled": set(FAMILIES),
    "attnlab_fused": set(FAMILIES) - {"gemma2", "gpt_oss"},
    "attnlab_blocksparse": set(FAMILIES) - {"t5"},
}
CASES = [(f, n) for n, fams in SERVES.items() for f in sorted(fams)]


@pytest.fixture(scope="module", autouse=True)
def _names():
    ah.register()
    yield


def _batch(family, n, padding, leak=False):
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(2, V, (2, n), generator=g)
    mask = torch.ones_like(ids)
    if padding != "none" and n > 1:
        cut = max(1, n // 3)
        if padding == "right":
            mask[0, n - cut:] = 0
        else:
            mask[0, :cut] = 0
    ids = ids.masked_fill(mask == 0, 0)
    batch = {"input_ids": ids, "attention_mask": mask}
    if family in SEQ2SEQ:
        labels = torch.randint(2, V, (2, 5), generator=g)
        batch["labels"] = labels
    elif family != "bert":
        labels = ids.masked_fill(mask == 0, -100)
        if leak is False and padding == "left" and n > 1:
            # transformers shifts labels: the last padding position would predict the first
            # real token, so its output (which sdpa makes 0 and eager a uniform average)
            # would enter the loss. Tested on its own below, against eager.
            labels[0, max(1, n // 3)] = -100
        batch["labels"] = labels
    return batch


def _run(model, impl, batch, dtype):
    model.set_attn_implementation(impl)
    model.train()
    model.zero_grad(set_to_none=True)
    out = model(**batch)
    logits = out.logits
    real = batch["attention_mask"].bool() if logits.shape[1] == batch["input_ids"].shape[1] \
        else torch.ones(logits.shape[:2], dtype=torch.bool)
    g = torch.Generator().manual_seed(7)
    cot = torch.randn(logits.shape, generator=g, dtype=torch.float64).to(dtype)
    loss = (logits * cot * real[..., None]).sum()
    if out.loss is not None:
        loss = loss + out.loss
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    return logits.detach()[real], grads


def _assert_grads_close(got, want, rtol, atol, where):
    """Every parameter's gradient, relative to the largest gradient of the model (a gradient
    that is 0 in exact arithmetic, such as a key bias's, is compared as rounding noise)."""
    scale = max(float(g.abs().max()) for g in want.values()) + 1e-30
    for key in want:
        torch.testing.assert_close(got[key] / scale, want[key] / scale, rtol=rtol, atol=atol,
                                   msg=f"{where}: gradient of {key}")


@pytest.mark.parametrize("family, name", CASES)
def test_logits_and_gradients_match_transformers(family, name):
    impl, dtype = REFERENCE[family]
    model = build(family).to(dtype)
    tol = dict(rtol=1e-9, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-4, atol=2e-5)
    for n, padding in LENGTHS:
        batch = _batch(family, n, padding)
        want_logits, want_grads = _run(model, impl, batch, dtype)
        got_logits, got_grads = _run(model, name, batch, dtype)
        where = f"{family} on {name}, N={n}, {padding} padding"
        torch.testing.assert_close(got_logits, want_logits, **tol, msg=where)
        assert got_grads.keys() == want_grads.keys(), where
        _assert_grads_close(got_grads, want_grads, tol["rtol"] * 10, tol["atol"] * 10, where)


@pytest.mark.parametrize("family", DECODERS + SEQ2SEQ)
@pytest.mark.parametrize("name", ["attnlab", "attnlab_tiled"])
def test_generate_with_the_cache_gives_the_same_tokens(family, name):
    impl, dtype = REFERENCE[family]
    model = build(family).to(dtype).eval()
    batch = _batch(family, 9, "left" if family in DECODERS else "right")
    batch.pop("labels", None)
    runs = {}
    for which in (impl, name):
        model.set_attn_implementation(which)
        runs[which] = model.generate(**batch, max_new_tokens=6, do_sample=False,
                                     pad_token_id=0)
    assert torch.equal(runs[impl], runs[name])


# every float-mask name that serves the family (sdpa takes no softcap: Gemma 2 refuses it)
@pytest.mark.parametrize("family, name", [
    (f, n) for f in ("gpt2", "llama", "gemma2")
    for n in ("attnlab", "attnlab_reference", "attnlab_tiled", "attnlab_fused")
    if (f, n) != ("gemma2", "attnlab_fused")])
def test_left_padding_with_the_label_shift_gets_eagers_gradient(family, name):
    # The rows where every key carries the dtype's minimum (padding queries) enter the loss
    # through the label shift: eager attention (float32) computes a uniform average there,
    # and so must the float-mask names, gradients included, at lengths that cross the tiles.
    model = build(family).float()
    for n in (7, 129, 600):
        batch = _batch(family, n, "left", leak=True)
        want_logits, want_grads = _run(model, "eager", batch, torch.float32)
        got_logits, got_grads = _run(model, name, batch, torch.float32)
        torch.testing.assert_close(got_logits, want_logits, rtol=2e-4, atol=2e-5)
        _assert_grads_close(got_grads, want_grads, 2e-3, 2e-4, f"{family} N={n}")


def test_a_name_is_refused_where_its_backend_cannot_serve():
    model = build("t5").double()
    model.set_attn_implementation("attnlab_blocksparse")
    with pytest.raises(ValueError, match="blocksparse"):
        model(**_batch("t5", 7, "none"))


def test_weights_only_when_asked():
    model = build("llama").double().eval()
    batch = _batch("llama", 7, "none")
    batch.pop("labels")
    model.set_attn_implementation("attnlab")
    assert model(**batch).attentions is None
    maps = model(**batch, output_attentions=True).attentions
    model.set_attn_implementation("sdpa")
    model.set_attn_implementation("eager")
    want = model(**batch, output_attentions=True).attentions
    assert len(maps) == 2 and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(maps, want))
    model.set_attn_implementation("attnlab_tiled")
    with pytest.raises(ValueError, match="output_attentions=True"):
        model(**batch, output_attentions=True)


def test_registering_touches_no_other_name_and_works_in_a_fresh_process():
    # over 5 s: a fresh interpreter importing transformers; the only proof that registering
    # leaves other names as they were
    code = """
import torch, transformers as tf
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface
before = {k: v for k, v in AttentionInterface._global_mapping.items()}
masks_before = dict(AttentionMaskInterface._global_mapping)
from attnlab.integrations import transformers as ah
names = ah.register()
assert set(names) >= {"attnlab", "attnlab_tiled", "attnlab_blocksparse"}, names
assert not any(w in n for n in names for w in ("sdpa", "flash", "flex"))
after = AttentionInterface._global_mapping
assert all(after[k] is v for k, v in before.items())
assert all(AttentionMaskInterface._global_mapping[k] is v for k, v in masks_before.items())
cfg = tf.Gemma2Config(num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                      hidden_size=16, head_dim=8, intermediate_size=32, vocab_size=40)
m = tf.Gemma2ForCausalLM._from_config(cfg, attn_implementation="attnlab_tiled")
assert m.config._attn_implementation == "attnlab_tiled"
out = m(input_ids=torch.tensor([[1, 2, 3]])).logits
assert torch.isfinite(out).all()
ah.unregister()
assert "attnlab" not in AttentionInterface._global_mapping
assert all(AttentionInterface._global_mapping[k] is v for k, v in before.items())
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
