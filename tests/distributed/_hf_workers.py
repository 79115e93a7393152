"""What the spawned ranks of the Hugging Face sharding tests run: tiny models of every family,
built the same way (seeded) here and in the test's single process, one batch per case."""

from __future__ import annotations

import torch

V = 61                    # vocabulary
DTYPES = {"float64": torch.float64, "float32": torch.float32}
NO_SDPA = ("gemma2", "gpt_oss")     # transformers runs them on eager only: attnlab's reference


def _small(**extra):
    return dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                intermediate_size=37, vocab_size=V, max_position_embeddings=256, **extra)


def build(family: str, dtype: str = "float64"):
    """The family's tiny LM, no dropout, seeded: the same weights on every process."""
    import transformers as tf

    torch.manual_seed(0)
    zero = dict(attention_dropout=0.0)
    if family == "llama":
        m = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **zero, **_small()))
    elif family == "mistral":
        m = tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=5,
                                                   **zero, **_small()))
    elif family == "qwen2":
        m = tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=1, **zero, **_small()))
    elif family == "gemma2":
        m = tf.Gemma2ForCausalLM(tf.Gemma2Config(
            num_key_value_heads=2, head_dim=8, sliding_window=5, query_pre_attn_scalar=8,
            attn_logit_softcapping=2.0, final_logit_softcapping=None, **zero, **_small()))
    elif family == "gpt_oss":
        m = tf.GptOssForCausalLM(tf.GptOssConfig(
            num_key_value_heads=2, head_dim=8, num_local_experts=2, num_experts_per_tok=1,
            sliding_window=5, layer_types=["sliding_attention", "full_attention"], **zero,
            **{**_small(), "intermediate_size": 64}))     # experts: 16-byte strides
        with torch.no_grad():
            for mod in m.modules():
                if hasattr(mod, "sinks"):
                    mod.sinks.normal_(0.0, 2.0)           # sinks that matter
    elif family == "gpt2":
        m = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V,
                                             n_positions=256, resid_pdrop=0.0,
                                             embd_pdrop=0.0, attn_pdrop=0.0))
    elif family == "bert":
        m = tf.BertForMaskedLM(tf.BertConfig(hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0, **_small()))
    else:
        raise AssertionError(family)
    return m.to(DTYPES[dtype]).train()


def batch(case: dict):
    """``input_ids (2, n)``, ``attention_mask`` (padding on the case's side, or None) and the
    labels (-100 on padding; a masked LM labels every third real token)."""
    g = torch.Generator().manual_seed(case.get("seed", 0))
    n = case["n"]
    ids = torch.randint(1, V, (2, n), generator=g)
    mask = torch.ones(2, n, dtype=torch.long)
    pad = case.get("padding")
    if pad == "right":
        mask[1, n - n // 3:] = 0
    elif pad == "left":
        mask[1, : n // 3] = 0
    labels = ids.masked_fill(mask == 0, -100)
    if case["family"] == "bert":
        keep = torch.zeros_like(labels, dtype=torch.bool)
        keep[:, ::3] = True
        labels = labels.masked_fill(~keep, -100)
    return ids, (mask if pad else None), labels


def loss_of(logits, labels, mask, shift: bool):
    """Cross entropy averaged over the labelled tokens, in the logits' precision (at least
    float32): transformers' causal-LM rule (position t predicts label t + 1) when ``shift``,
    a padding position predicting nothing."""
    import torch.nn.functional as F

    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
        if mask is not None:
            labels = labels.masked_fill(mask[:, :-1] == 0, -100)
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                           ignore_index=-100)


def reference(case: dict, implementation: str | None = None):
    """One process, the whole sequence, on transformers' own sdpa attention (attnlab's float64
    reference for Gemma 2 and gpt-oss, which transformers does not run on sdpa), or on
    ``implementation``: logits, the loss, every gradient."""
    from attnlab.integrations import transformers as attnlab_hf

    model = build(case["family"], case["dtype"])
    if implementation is None:
        implementation = "attnlab_reference" if case["family"] in NO_SDPA else "sdpa"
    if implementation.startswith("attnlab"):
        attnlab_hf.register([implementation])
    model.set_attn_implementation(implementation)
    ids, mask, labels = batch(case)
    logits = model(input_ids=ids, attention_mask=mask).logits
    loss = loss_of(logits, labels, mask, shift=case["family"] != "bert")
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()
             if p.grad is not None}
    return logits.detach(), loss.detach(), grads


def sharded_cases(rank: int, world: int, cases: list[dict], strategy: str = "ring"):
    """Every case on this rank: gathered logits, the loss, this rank's synchronised grads."""
    from attnlab.core.backends import tiled
    from attnlab.distributed.hf import ShardedModel

    torch.set_num_threads(1)
    results = []
    for case in cases:
        model = build(case["family"], case["dtype"])
        ids, mask, labels = batch(case)
        with ShardedModel(model, strategy=case.get("strategy", strategy)) as sp, \
                tiled.tile_sizes(4, 8):           # every shard crosses tiles
            local = sp.shard(input_ids=ids, attention_mask=mask, labels=labels)
            out = sp(**local)
            loss = sp.loss(out.logits, local)
            loss.backward()
            sp.sync_gradients()
        logits = _gathered(out.logits.detach(), sp.ranges(case["n"]), world)
        grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()
                 if p.grad is not None}
        results.append((logits, loss.detach(), grads))
    return results


def _gathered(x: torch.Tensor, ranges, world: int) -> torch.Tensor:
    """The whole sequence (dim 1) from every rank's rows and their global ranges."""
    import torch.distributed as dist

    from attnlab.distributed import layout as L

    parts = [None] * world
    dist.all_gather_object(parts, (ranges, x))
    n = sum(int(L.positions(rr).numel()) for rr, _ in parts)
    whole = x.new_empty(x.shape[0], n, *x.shape[2:])
    for rr, part in parts:
        whole[:, L.positions(rr)] = part
    return whole


def refusals(rank: int, world: int):
    """Each thing a sharded call cannot do, tried on every rank: the messages it raised."""
    import transformers as tf

    from attnlab.distributed.hf import ShardedModel

    torch.set_num_threads(1)
    got = {}
    ids = torch.randint(1, V, (1, 12), generator=torch.Generator().manual_seed(0))

    def attempt(key, model, call):
        with ShardedModel(model) as sp:
            try:
                call(sp, sp.shard(input_ids=ids, labels=ids))
                got[key] = "no error"
            except (ValueError, NotImplementedError) as err:
                got[key] = str(err)

    torch.manual_seed(0)
    dropout = tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, attention_dropout=0.1,
                                                 **_small())).train()
    attempt("dropout", dropout, lambda sp, b: sp(**b))
    gpt2 = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=V,
                                            attn_pdrop=0.1, n_positions=64)).train()
    attempt("dropout_gpt2", gpt2, lambda sp, b: sp(**b))
    plain = build("llama")
    attempt("weights", plain, lambda sp, b: sp(**b, output_attentions=True))
    attempt("generate", plain, lambda sp, b: sp.generate(ids))
    return got


def dies_mid_step(rank: int, world: int):
    """A sharded Llama step on every rank; rank 1 exits after its forward, before the
    backward: the others must end with RankFailure naming it."""
    import os
    import time

    from attnlab.distributed.hf import ShardedModel

    torch.set_num_threads(1)
    ids, _, labels = batch({"family": "llama", "n": 23})
    with ShardedModel(build("llama"), timeout=20) as sp:
        local = sp.shard(input_ids=ids, labels=labels)
        loss = sp.loss(sp(**local).logits, local)
        if rank == 1:
            os._exit(9)
        time.sleep(1.0)
        loss.backward()
    return float(loss)
