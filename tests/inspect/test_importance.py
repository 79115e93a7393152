"""Head importance from one backward (Michel et al. 2019) and attribution patching, on tiny
transformers models built from configs: against the derivative of a gate on each head's
output computed by autograd on eager float64 attention, with and without padding; the
ablation's subset and progress; bad input refused before any work."""

import pytest
import torch
import transformers as tf

from attnlab.inspect.ablation import ablate_heads, attention_modules, head_importance
from attnlab.inspect.importance import head_gradients

V = 40


def build(family, dtype=torch.float64):
    torch.manual_seed(0)
    small = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                 intermediate_size=64, vocab_size=V, max_position_embeddings=512)
    model = {"llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2,
                                                                 **small)),
             "mistral": lambda: tf.MistralForCausalLM(tf.MistralConfig(
                 num_key_value_heads=2, sliding_window=24, **small)),
             "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(
                 n_layer=2, n_head=4, n_embd=32, vocab_size=V, n_positions=512)),
             "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(num_key_value_heads=2,
                                                                 **small)),
             "gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(
                 num_key_value_heads=2, head_dim=8, sliding_window=16,
                 attn_logit_softcapping=5.0, **small))}[family]()
    return model.to(dtype).eval()


def gate_gradients(model, ids, start, end, mask=None, corrupt=None):
    """dL/dg for a gate g = 1 on every head's output (eager float64, autograd): the
    definition the one-backward importance must equal. With ``corrupt``, the gate mixes
    o(corrupt) + g (o(clean) - o(corrupt)) (attribution patching's derivative). Dense maps:
    attnlab's float64 reference (eager's own gives NaN on a left-padded row that sees no key)."""
    from attnlab.integrations import transformers as ah

    ah.register(["attnlab_reference"])
    model.set_attn_implementation("attnlab_reference")
    modules = attention_modules(model)
    gates = [torch.ones(h, dtype=torch.float64, requires_grad=True) for _, _, h in modules]
    saved = []
    if corrupt is not None:
        hooks = [proj.register_forward_pre_hook(lambda m, a: saved.append(a[0].detach()))
                 for _, proj, _ in modules]
        with torch.no_grad():
            model(input_ids=corrupt, attention_mask=mask)
        for h in hooks:
            h.remove()
    hooks = []
    for layer, (_, proj, h) in enumerate(modules):
        def pre(m, args, layer=layer, h=h):
            x = args[0]
            shape = x.shape
            x = x.reshape(*shape[:-1], h, -1)
            if corrupt is not None:
                base = saved[layer].reshape(x.shape)
                x = base + gates[layer][:, None] * (x - base)
            else:
                x = x * gates[layer][:, None]
            return (x.reshape(shape), *args[1:])
        hooks.append(proj.register_forward_pre_hook(pre))
    try:
        logits = model(input_ids=ids, attention_mask=mask).logits
    finally:
        for hk in hooks:
            hk.remove()
    logp = logits[0, start - 1:end - 1].log_softmax(-1)
    nll = -logp.gather(-1, ids[0, start:end, None]).squeeze(-1)
    if mask is not None:
        real = mask[0, start:end].bool() & mask[0, start - 1:end - 1].bool()
        nll = nll[real]
    grads = torch.autograd.grad(nll.mean(), gates)
    return torch.stack(grads)


@pytest.mark.parametrize("family", ["llama", "mistral", "gpt2", "qwen2"])
@pytest.mark.parametrize("n, target, padding", [(37, None, None), (70, (50, 60), None),
                                                (45, None, "left"), (45, (20, 40), "right")])
def test_one_backward_equals_the_gate_derivative(family, n, target, padding):
    """Every head's |sum_t <o, dL/do>| from the tiled backend's forward and backward equals
    |dL/dg| of a gate computed by autograd through eager float64 attention, within 1e-5
    relative; lengths cross the tiles, targets are spans or the whole text, padding on either
    side."""
    model = build(family)
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(0, V, (1, n), generator=g)
    mask = None
    if padding is not None:
        mask = torch.ones(1, n, dtype=torch.long)
        mask[0, :7] = 0 if padding == "left" else 1
        if padding == "right":
            mask[0, -7:] = 0
    got = head_gradients(model, ids, target=target, attention_mask=mask)
    start, end = target or (1, n)
    want = gate_gradients(model, ids, start, end, mask).abs()
    scale = float(want.abs().max())
    assert float((got.importance - want).abs().max()) <= 1e-5 * scale, family
    assert got.per_position.shape == (2, 4, n) and got.target == (start, end)
    assert torch.allclose(got.per_position.sum(-1).abs(), got.importance)
    assert torch.allclose(got.by_band(16).sum(-1), got.per_position.sum(-1))


def test_attribution_patching_against_a_corrupted_input():
    """With corrupt_ids, the importance is sum_t <o(clean) - o(corrupt), dL/do>: the
    derivative of a gate that mixes the two runs, by autograd; the clean text against itself
    gives 0 everywhere."""
    model = build("llama")
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, V, (1, 40), generator=g)
    corrupt = ids.clone()
    corrupt[0, 10:14] = torch.randint(0, V, (4,), generator=g)         # the needle removed
    got = head_gradients(model, ids, target=(30, 40), corrupt_ids=corrupt)
    want = gate_gradients(model, ids, 30, 40, corrupt=corrupt)
    assert got.patched
    assert float((got.importance - want).abs().max()) <= 1e-5 * float(want.abs().max())
    same = head_gradients(model, ids, corrupt_ids=ids)
    assert float(same.importance.abs().max()) == 0.0


def test_the_estimate_is_the_first_order_change_of_removing_a_little_of_a_head():
    """Scaling one head's output by 1 +- eps changes the loss by +-eps * sum_t <o, dL/do> to
    first order: the signed per-position sum against a central difference, every head (GPT-2
    in float64: Llama's rotary tables are float32, whose rounding a small step meets). Whole
    removal is not first order, so the estimate can rank heads otherwise than ablation."""
    model = build("gpt2")
    ids = torch.randint(0, V, (1, 48), generator=torch.Generator().manual_seed(3))
    got = head_gradients(model, ids).per_position.sum(-1)                 # signed dL/dg
    modules = attention_modules(model)
    eps = 1e-4

    def loss(layer=None, head=None, scale=1.0):
        hook = None
        if layer is not None:
            _, proj, h = modules[layer]

            def pre(m, args):
                x = args[0].clone()
                d = x.shape[-1] // h
                x[..., head * d:(head + 1) * d] *= scale
                return (x, *args[1:])
            hook = proj.register_forward_pre_hook(pre)
        try:
            with torch.no_grad():
                out = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
        finally:
            if hook is not None:
                hook.remove()
        return float(-out.gather(-1, ids[0, 1:, None]).mean())

    for layer in range(2):
        for head in range(4):
            fd = (loss(layer, head, 1 + eps) - loss(layer, head, 1 - eps)) / (2 * eps)
            assert fd == pytest.approx(float(got[layer, head]), rel=1e-5, abs=1e-10)


def test_ablation_of_a_subset_of_heads():
    model = build("llama")
    ids = torch.randint(0, V, (1, 20), generator=torch.Generator().manual_seed(4))

    def loss():
        return float(model(input_ids=ids).logits.sum())

    out = head_importance(model, loss, heads=[(0, 1), (1, 3)], progress=False)
    assert torch.isnan(out).sum() == 6 and not torch.isnan(out[0, 1]) and \
        not torch.isnan(out[1, 3])
    with ablate_heads(model, [(1, 3)]):
        ablated = loss()
    assert out[1, 3] == pytest.approx(ablated - loss())
    with pytest.raises(ValueError, match=r"head \(2, 0\) does not exist"):
        head_importance(model, loss, heads=[(2, 0)], progress=False)


def test_bad_input_is_refused_before_any_work():
    model = build("llama")
    ids = torch.randint(0, V, (1, 20), generator=torch.Generator().manual_seed(5))
    with pytest.raises(ValueError, match=r"target must be \(start, end\) with 1 <= start < "
                                         r"end <= 20"):
        head_gradients(model, ids, target=(5, 25))
    with pytest.raises(ValueError, match=r"target must be \(start, end\) with"):
        head_gradients(model, ids, target=(0, 5))
    with pytest.raises(ValueError, match="corrupt_ids must have the clean input's length "
                                         r"\(20 tokens\), got 19"):
        head_gradients(model, ids, corrupt_ids=ids[:, :19])
    with pytest.raises(ValueError, match="has no attention module whose output projection"):
        head_gradients(torch.nn.Sequential(torch.nn.Embedding(V, 8)), ids)
    with pytest.raises(ValueError, match="input_ids must be one sequence"):
        head_gradients(model, ids.repeat(2, 1))


def test_a_model_that_cannot_run_backward_is_refused_before_any_work():
    """Inside torch.inference_mode(), or with weights made there, the importance is refused
    with the reason and the fix, by head_gradients and by census(importance=True) before the
    census runs."""
    from attnlab.inspect import census

    model = build("llama", torch.float32)
    ids = torch.randint(0, V, (1, 20), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode(), pytest.raises(ValueError, match="call it outside"):
        head_gradients(model, ids)
    with torch.inference_mode():
        frozen = build("llama", torch.float32)
    calls = []
    frozen.register_forward_pre_hook(lambda *a: calls.append(1))
    with pytest.raises(ValueError, match="inference tensor"):
        census(frozen, input_ids=ids, importance=True)
    assert not calls
    with torch.no_grad():
        assert head_gradients(model, ids).importance.shape == (2, 4)


def test_frozen_weights_still_give_head_gradients_and_no_weight_gradient():
    model = build("gpt2")
    for p in model.parameters():
        p.requires_grad_(False)
    ids = torch.randint(0, V, (1, 30), generator=torch.Generator().manual_seed(6))
    got = head_gradients(model, ids)
    assert float(got.importance.abs().sum()) > 0
    assert all(p.grad is None for p in model.parameters())


def test_the_census_carries_importance_into_its_table_and_report(tmp_path):
    """census(..., importance=True): the heads' importance equals head_gradients' on the same
    ids, is a column of Census.table(), and the report's "What matters" section shows one dot
    per head, the ten that matter most and the labelled ones that matter least, escaped."""
    from attnlab.inspect import census
    from attnlab.inspect.report.census import render_census

    model = build("llama", torch.float32)
    ids = torch.randint(0, V, (1, 200), generator=torch.Generator().manual_seed(7))
    c = census(model, input_ids=ids, importance=True, name="<b>m</b>")
    want = head_gradients(model, ids).importance
    assert torch.allclose(c.importance.importance, want, rtol=1e-5, atol=1e-9)
    table = c.table()
    assert list(table["importance"]) == pytest.approx(want.flatten().tolist(), rel=1e-5)
    page = render_census(c, standalone=True)
    section = page.split('data-el="matters"')[1].split("</section>")[0]
    assert section.count("<circle") == 8 and "What matters" in section
    assert section.count("<tr>") == 1 + 8                    # header and the 8 heads (< 10)
    assert "<b>m</b>" not in page
    plain = census(model, input_ids=ids)
    assert plain.importance is None and 'data-el="matters"' not in render_census(plain)
    span = census(model, input_ids=ids, importance=(150, 200))
    assert span.importance.target == (150, 200)
    with pytest.raises(ValueError, match=r"target must be \(start, end\) with 1 <= start"):
        census(model, input_ids=ids, importance=(150, 201))


def test_importance_is_refused_where_it_cannot_be_computed():
    """A model that is not a causal language model (an encoder), and one whose attention has
    no per-head output projection, are refused before the census runs."""
    from attnlab.inspect import census

    torch.manual_seed(0)
    bert = tf.BertModel(tf.BertConfig(num_hidden_layers=1, num_attention_heads=2,
                                      hidden_size=16, intermediate_size=32, vocab_size=V))
    with pytest.raises(ValueError, match="importance= needs a transformers causal language"):
        census(bert, input_ids=torch.arange(10)[None], importance=True)
    mha = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    with pytest.raises(ValueError, match="importance= needs a transformers causal language"):
        census(mha, inputs=torch.randn(1, 10, 16), importance=True)


def test_the_command_line_importance_flag(tmp_path, capsys):
    """attnlab inspect --importance: the census report with "What matters" and the csv column
    on kjv; refused with one line on an encoder and with --maps."""
    from attnlab.cli import main

    out = tmp_path / "r"
    assert main(["inspect", "--model", "kjv", "In the beginning God created the heaven and "
                 "the earth. And the earth was without form, and void.", "--importance",
                 "--out", str(out), "--csv", str(tmp_path / "h.csv")]) == 0
    page = (out / "report.html").read_text()
    assert 'data-el="matters"' in page and "What matters" in page
    assert "importance" in (tmp_path / "h.csv").read_text().splitlines()[0].split(",")
    capsys.readouterr()
    assert main(["inspect", "--importance", "a sentence", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--importance" in err
    assert main(["inspect", "--model", "kjv", "text", "--importance", "--maps",
                 "--out", str(out)]) == 2
    assert "takes no --maps" in capsys.readouterr().err


def _dense_value_weighted(model, ids, mask=None, band=16):
    """The value-weighted statistics from dense float64 maps (output_attentions of attnlab's
    reference: eager's are NaN on a left-padded row, which then spreads), the values (a hook on
    v_proj) and W_O: the distribution ``a_ij ||v_j W_O^h|| / sum_j a_ij ||v_j W_O^h||``, read
    by the dense specification of the statistics (reference_stats)."""
    from attnlab.core.stats import reference_stats
    from attnlab.integrations import transformers as ah

    cfg = model.config
    heads = cfg.num_attention_heads
    d = cfg.hidden_size // heads
    gpt2 = hasattr(model, "transformer")
    kv = heads if gpt2 else cfg.num_key_value_heads
    layers = model.transformer.h if gpt2 else model.model.layers
    values = []
    if gpt2:            # c_attn's output is [q | k | v]
        hooks = [layer.attn.c_attn.register_forward_hook(
            lambda m, a, o: values.append(o[..., 2 * cfg.hidden_size:])) for layer in layers]
    else:
        hooks = [layer.self_attn.v_proj.register_forward_hook(
            lambda m, a, o: values.append(o)) for layer in layers]
    ah.register(["attnlab_reference"])
    model.set_attn_implementation("attnlab_reference")
    with torch.no_grad():
        maps = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    for h in hooks:
        h.remove()
    first = 0 if mask is None else int(mask[0].nonzero()[0])
    real = None if mask is None else mask[0].bool()
    out = []
    for layer, (a, v) in enumerate(zip(maps, values)):
        a = a[0].double()                                              # (H, N, N)
        n_tok = a.shape[-1]
        v = v[0].double().reshape(n_tok, kv, d).transpose(0, 1)        # (kv, N, D)
        if gpt2:                                                       # Conv1D: x @ W
            w = layers[layer].attn.c_proj.weight.detach().double().reshape(heads, d, -1)
        else:
            w = layers[layer].self_attn.o_proj.weight.detach().double()
            w = w.reshape(w.shape[0], heads, d).permute(1, 2, 0)       # (H, D, d_model)
        norms = torch.bmm(v.repeat_interleave(heads // kv, 0), w).norm(dim=-1)   # (H, N)
        weighted = a * norms[:, None, :]
        shares = weighted / weighted.sum(-1, keepdim=True).clamp_min(1e-300)
        out.append(reference_stats(shares, sink_start=first, band=band, ids=ids[0],
                                   queries=real))
    return {name: torch.stack([getattr(s, name) for s in out])
            for name in ("sink_mass", "prev_mass", "self_mass", "local_mass", "match_mass",
                         "received")}


@pytest.mark.parametrize("family, n, padding", [("llama", 70, None), ("gpt2", 45, "left"),
                                                ("mistral", 70, "right"),
                                                ("qwen2", 45, "left"),
                                                ("gemma2", 40, "left")])
def test_value_weighted_statistics_equal_their_dense_definition(family, n, padding):
    """census(..., value_weighted=True): every row's share of sum_j a_ij ||v_j W_O^h|| on the
    sink, the previous key, the key itself, the band and the prefix-matching keys, and the
    value-weighted attention each key receives, equal the dense float64 computation within
    1e-5 of the largest, on each family (GPT-2's Conv1D projections, Mistral's sliding
    window, Gemma 2's softcap), with GQA and padding on either side (the band of 4 crosses
    tiles of the 70 tokens); per-head means and the table carry them."""
    from attnlab.inspect import census

    model = build(family)
    ids = torch.randint(0, 7, (1, n), generator=torch.Generator().manual_seed(n))  # repeats
    mask = None
    if padding == "left":
        mask = torch.ones(1, n, dtype=torch.long)
        mask[0, :6] = 0
    elif padding == "right":
        mask = torch.ones(1, n, dtype=torch.long)
        mask[0, -5:] = 0
    c = census(model, input_ids=ids, attention_mask=mask, value_weighted=True, band=4)
    dense = _dense_value_weighted(model, ids, mask, band=4)
    real = slice(None) if mask is None else mask[0].bool()
    for name in ("sink_mass", "prev_mass", "self_mass", "local_mass", "match_mass"):
        got = c.stats[name + "_vw"].double()[..., real]
        want = dense[name][..., real]
        assert float((got - want).abs().max()) <= 1e-5, name
        assert name + "_vw" in c.table().columns
    got, want = c.stats["received_vw"].double(), dense["received"]
    assert float((got - want).abs().max()) <= 1e-5 * float(want.abs().max())
    assert float(c.summary["match_mass_vw"].abs().sum()) > 0
    with pytest.raises(ValueError, match="value_weighted= needs a transformers model"):
        census(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True),
               inputs=torch.randn(1, 8, 16), value_weighted=True)


def test_a_sink_in_weight_only_is_named_on_the_first_screen():
    """A head with at least half its weight on the first token and at most a tenth of its
    value-weighted output there is named in the findings; without the value-weighted shares
    no such line is claimed."""
    from attnlab.inspect import census
    from attnlab.inspect.report.census import findings, render_census

    model = build("llama", torch.float32)
    ids = torch.randint(0, V, (1, 60), generator=torch.Generator().manual_seed(8))
    c = census(model, input_ids=ids, value_weighted=True, importance=True)
    c.summary["sink_mass"][1, 2] = 0.93
    c.summary["sink_mass_vw"][1, 2] = 0.04
    lines = [x for x in findings(c) if x.startswith("sink in weight only")]
    assert lines and "L1H2 (0.93 of the weight, 0.04 of the output)" in lines[0]
    assert "sink share of the output" in render_census(c)
    plain = census(model, input_ids=ids)
    assert not [x for x in findings(plain) if x.startswith("sink in weight only")]


def dense_relevance(model, ids, mask=None, target=None):
    """Chefer's sum_i (P_ij dP_ij)+ per layer, head and key from dense float64 maps (attnlab's
    reference, output_attentions) and their gradient by autograd, for the mean loss of the
    tokens ``target = (start, end)`` (default: every token after the first)."""
    from attnlab.integrations import transformers as ah

    ah.register(["attnlab_reference"])
    model.set_attn_implementation("attnlab_reference")
    out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    start, end = target or (1, ids.shape[1])
    logp = out.logits[0, start - 1:end - 1].log_softmax(-1)
    nll = -logp.gather(-1, ids[0, start:end, None]).squeeze(-1)
    if mask is not None:
        nll = nll[(mask[0, start:end] * mask[0, start - 1:end - 1]).bool()]
    maps = out.attentions
    grads = torch.autograd.grad(nll.mean(), maps)
    return torch.stack([(a[0] * g[0]).clamp_min(0).sum(-2).detach()
                        for a, g in zip(maps, grads)])


@pytest.mark.parametrize("family, n, padding", [("llama", 70, None), ("gpt2", 45, "left"),
                                                ("mistral", 60, None)])
def test_token_relevance_from_the_backward_tiles_equals_the_dense_maps(family, n, padding):
    """relevance=True: each key's sum_i (P_ij dP_ij)+ per head, formed in the tile backward,
    equals the same from dense float64 maps (attnlab's reference, output_attentions) and their
    gradient by autograd, within 1e-5 of the largest; lengths cross the tiles."""
    from attnlab.core.engine.tiles import tile_sizes

    model = build(family)
    ids = torch.randint(0, V, (1, n), generator=torch.Generator().manual_seed(n))
    mask = None
    if padding:
        mask = torch.ones(1, n, dtype=torch.long)
        mask[0, :5] = 0
    with tile_sizes(16, 32):
        got = head_gradients(model, ids, attention_mask=mask, relevance=True)
    want = dense_relevance(model, ids, mask)
    scale = float(want.abs().max())
    assert got.relevance.shape == want.shape
    assert float((got.relevance - want).abs().max()) <= 1e-5 * scale, family
    assert torch.allclose(got.token_relevance(), want.sum((0, 1)))
    plain = head_gradients(model, ids, attention_mask=mask)
    assert torch.allclose(plain.importance, got.importance, rtol=1e-6, atol=1e-12)
    with pytest.raises(ValueError, match="relevance=True"):
        plain.token_relevance()


def test_forwards_set_on_the_instance_are_put_back():
    """A layer whose instance already has its own forward (an accelerate hook) gets it back
    after the call; relevance on a model that is not a transformers one is refused first."""
    model = build("llama")
    layer = model.model.layers[0]
    own = layer.forward
    layer.forward = own                       # an instance attribute, as a hook sets it
    ids = torch.randint(0, V, (1, 20), generator=torch.Generator().manual_seed(9))
    head_gradients(model, ids)
    assert layer.__dict__.get("forward") is own
    assert "forward" not in model.model.layers[1].__dict__
    assert "forward" not in model.lm_head.__dict__
    with pytest.raises(ValueError, match="relevance=True needs a transformers model"):
        head_gradients(torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), ids,
                       relevance=True)
