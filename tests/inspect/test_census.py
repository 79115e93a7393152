"""The census of tiny transformers models built from configs: every statistic of every layer
and head equals the same statistic computed from the model's own output_attentions (eager)
within 1e-5, at lengths that cross the tiles, with GQA (Llama), a sliding window (Mistral),
learned positions (GPT-2), an encoder (BERT) and left padding; heads are labelled."""

import pytest
import torch
import transformers as tf

from attnlab.core.stats import reference_stats
from attnlab.inspect import census

V = 50


def build(family):
    torch.manual_seed(0)
    small = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                 intermediate_size=64, vocab_size=V, max_position_embeddings=4096)
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **small))
    if family == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=40,
                                                      **small))
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V,
                                                n_positions=2048))
    if family == "bert":
        return tf.BertModel(tf.BertConfig(**small))
    raise AssertionError(family)


def _eager_stats(model, ids, mask=None):
    model.set_attn_implementation("eager")
    kw = {"attention_mask": mask} if mask is not None else {}
    with torch.no_grad():
        maps = model(input_ids=ids, output_attentions=True, **kw).attentions
    return [reference_stats(a[0].double(), ids=ids[0]) for a in maps]


@pytest.mark.parametrize("family, n", [("llama", 1), ("llama", 129), ("llama", 1100),
                                       ("llama", 2049), ("mistral", 300), ("gpt2", 129),
                                       ("bert", 200)])
def test_census_equals_the_statistics_of_output_attentions(family, n):
    model = build(family).eval()
    g = torch.Generator().manual_seed(n)
    half = torch.randint(3, V, (1, n // 2 + 1), generator=g)
    ids = torch.cat([half, half, half], 1)[:, :n]            # repeated: induction can match
    c = census(model, input_ids=ids)
    want = _eager_stats(model, ids)
    assert c.stats["entropy"].shape == (2, 4, n) and len(c.labels) == 2
    for name in ("entropy", "max_weight", "sink_mass", "prev_mass", "local_mass", "distance",
                 "match_mass", "received"):
        got = c.stats[name].double()
        exp = torch.stack([getattr(s, name) for s in want])
        scale = max(float(exp.abs().max()), 1.0) if name in ("distance", "received") else 1.0
        assert float((got - exp).abs().max()) <= 1e-5 * scale, (family, n, name)
    assert model.config._attn_implementation == "eager"      # set back (here: the test's)


STATS = ("entropy", "max_weight", "sink_mass", "prev_mass", "self_mass", "next_mass",
         "local_mass", "distance", "match_mass", "received")


def _padded_spec(model, ids, mask):
    """The census's specification on a padded sequence, from eager's own maps: padding rows
    count for nothing (eager spreads them over every key; they are zeroed here), and the sink
    is the first real token."""
    real = mask[0].bool()
    first = int(real.nonzero()[0])
    model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    return [reference_stats(a[0].double(), ids=ids[0], queries=real, sink_start=first)
            for a in maps], real


@pytest.mark.parametrize("family", ["llama", "mistral", "gpt2", "bert"])
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("n, pad", [(70, 9), (161, 40)])
def test_padded_sequences_equal_eager_on_their_real_tokens(family, side, n, pad, tiles):
    """Every family the census takes, either padding side, lengths crossing the (16, 32)
    tiles and a pad that ends inside one: no NaN on a real row, the sink on the first real
    token, and padding queries absent from every statistic (received included)."""
    tiles(tiled_sizes=(16, 32))
    model = build(family).eval()
    if family == "mistral":
        model.config.sliding_window = 24              # the band crosses the tiles too
    g = torch.Generator().manual_seed(n + pad)
    half = torch.randint(3, V, (1, n // 2 + 1), generator=g)
    ids = torch.cat([half, half], 1)[:, :n]
    mask = torch.ones_like(ids)
    if side == "left":
        mask[0, :pad] = 0
    else:
        mask[0, n - pad:] = 0
    c = census(model, input_ids=ids, attention_mask=mask)
    want, real = _padded_spec(model, ids, mask)
    for name in STATS:
        got = c.stats[name].double()
        exp = torch.stack([getattr(s, name) for s in want])
        assert not torch.isnan(got).any(), (family, side, name)
        scale = max(float(exp.abs().max()), 1.0) if name in ("distance", "received") else 1.0
        assert float((got - exp).abs().max()) <= 2e-5 * scale, (family, side, n, name)
    assert bool(torch.isneginf(c.stats["lse"][..., ~real]).all())     # padding rows: no key
    assert float(c.stats["sink_mass"][..., real].mean()) > 0           # a sink that exists
    assert any("padding" in note for note in c.notes)


def test_mistral_left_padding_across_a_tile_gives_no_nan():
    """A float finfo.min mask whose first key tile is wholly masked for a row (row 575 of a
    64-key window after 300 pads, default 256 x 512 tiles): its running sum once met a huge
    shift, and 0 * inf gave NaN entropies on 525 real rows per head."""
    model = tf.MistralForCausalLM(tf.MistralConfig(
        num_key_value_heads=2, sliding_window=64, num_hidden_layers=1, num_attention_heads=4,
        hidden_size=32, intermediate_size=64, vocab_size=V, max_position_embeddings=4096))
    ids = torch.randint(3, V, (1, 1100), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :300] = 0
    c = census(model.eval(), input_ids=ids, attention_mask=mask)
    want, real = _padded_spec(model, ids, mask)
    for name in ("entropy", "sink_mass", "received"):
        got, exp = c.stats[name].double(), torch.stack([getattr(s, name) for s in want])
        assert not torch.isnan(got).any(), name
        assert float((got - exp).abs().max()) <= 2e-5 * max(float(exp.abs().max()), 1), name


def test_an_encoders_next_token_head_is_not_induction():
    """Prefix matching counts keys before the query only: an encoder head that looks at the
    next token (whose previous token is the query's own) scores 0, on any repeated text."""
    w = torch.zeros(1, 12, 12, dtype=torch.float64)
    w[0, torch.arange(11), torch.arange(1, 12)] = 1.0                  # next token
    w[0, 11, 11] = 1.0
    ids = torch.tensor([5, 6, 7, 8] * 3)
    s = reference_stats(w, ids=ids)
    assert float(s.match_mass.abs().max()) == 0.0
    assert float(s.next_mass[0, :11].min()) == 1.0


def test_census_refuses_what_it_cannot_take():
    model = build("gpt2")
    with pytest.raises(ValueError, match="one sequence"):
        census(model, input_ids=torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="more than the 2048 positions.*larger n_positions"):
        census(build("gpt2"), input_ids=torch.ones(1, 2049, dtype=torch.long))   # its field
    with pytest.raises(ValueError, match="attention_mask must have"):
        census(model, input_ids=torch.ones(1, 5, dtype=torch.long),
               attention_mask=torch.ones(1, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="transformers model or a module with attnlab's"):
        census(torch.nn.Linear(2, 2), input_ids=torch.ones(1, 5, dtype=torch.long))


def _dense_from_record(model, *args):
    from attnlab.inspect import record

    with torch.no_grad(), record(model) as rec:
        model(*args)
    return [m[0].double() for m in rec.raw]                  # per layer (H, N, N)


@pytest.mark.parametrize("n", [1, 40, 150])
def test_attnlab_modules_and_torch_multihead_attention(n):
    from attnlab.nn.multihead import MultiheadAttention

    class Tiny(torch.nn.Module):                             # one attnlab, one torch layer
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(V, 16)
            self.a = MultiheadAttention(16, 4, batch_first=True, num_kv_heads=2)
            self.b = torch.nn.MultiheadAttention(16, 4, batch_first=True)

        def forward(self, ids):
            x = self.embed(ids)
            x = x + self.a(x, x, x, is_causal=True, need_weights=False)[0]
            causal = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool).triu(1)
            return x + self.b(x, x, x, attn_mask=causal, need_weights=False)[0]

    torch.manual_seed(1)
    model = Tiny().eval()
    ids = torch.randint(0, V, (1, n), generator=torch.Generator().manual_seed(n))
    c = census(model, input_ids=ids, pooled=8, rows=[n - 1], sharpest=1)
    dense = _dense_from_record(model, ids)
    assert c.layer_names == ["a", "b"] and c.heads == 4
    for layer, w in enumerate(dense):
        h = w.shape[0]
        want = reference_stats(w, ids=ids[0])
        for name in ("entropy", "sink_mass", "prev_mass", "distance", "received", "match_mass"):
            got = c.stats[name][layer, :h].double()
            exp = getattr(want, name)
            scale = max(float(exp.abs().max()), 1.0)
            assert float((got - exp).abs().max()) <= 1e-5 * scale, (layer, name)
        index, rows = c.rows[layer]
        assert index[0] == n - 1
        torch.testing.assert_close(rows[:h].double(), w[:, index], atol=1e-6, rtol=1e-5)
        assert c.maps["max"][layer, :h].amax() <= 1.0 + 1e-6


def test_census_of_the_zoo_induction_model_finds_its_heads():
    from attnlab import zoo
    from attnlab.zoo.induction import repeated_tokens

    model = zoo.load("induction")
    ids = repeated_tokens(1, 20, prefix=7, generator=torch.Generator().manual_seed(3))
    c = census(model, input_ids=ids)
    assert "induction" in c.labels[1]                        # layer 1 holds them by construction
    assert "previous token" in c.labels[0]


def test_layers_with_different_head_counts_are_refused_by_name():
    class Two(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a = torch.nn.MultiheadAttention(8, 2, batch_first=True)
            self.b = torch.nn.MultiheadAttention(8, 4, batch_first=True)

        def forward(self, x):
            return self.b(self.a(x, x, x)[0], x, x)[0]

    with pytest.raises(ValueError, match="a: 2, b: 4"):
        census(Two(), inputs=torch.randn(1, 6, 8))


@pytest.mark.parametrize("family", ["llama", "mistral", "gpt2"])
def test_the_census_forward_gives_the_models_own_logits(family):
    # the statistics' first pass is the tiled forward with extra value columns, and serves
    # the model's attention call: the logits must be the model's
    model = build(family).eval()
    ids = torch.randint(3, V, (1, 300), generator=torch.Generator().manual_seed(4))
    model.set_attn_implementation("eager")
    with torch.no_grad():
        want = model(input_ids=ids).logits
    seen = {}
    model.register_forward_hook(lambda m, a, kw, out: seen.setdefault("logits", out.logits),
                                with_kwargs=True)
    census(model, input_ids=ids)
    torch.testing.assert_close(seen["logits"], want, atol=2e-5, rtol=1e-4)


def test_rotary_models_run_past_their_positions_with_a_note_learned_ones_refuse():
    model = build("llama").eval()
    model.config.max_position_embeddings = 100
    c = census(model, input_ids=torch.randint(3, V, (1, 130)))
    assert c.length == 130 and c.trained == 100
    assert any("past the 100 positions the model was trained at" in n for n in c.notes)
    # labelled on the trained positions, the rest beside them
    ent = c.stats["entropy"].double()
    assert torch.allclose(c.summary["entropy"].double(), ent[..., :100].mean(-1), atol=1e-6)
    assert torch.allclose(c.summary_past["entropy"].double(), ent[..., 100:].mean(-1),
                          atol=1e-6)
    table = c.table()
    assert {"label_past", "entropy_past"} <= set(table.columns)
    same = census(model, input_ids=torch.randint(3, V, (1, 130)), trained=200)
    assert same.trained is None and not same.labels_past      # 130 tokens: within 200
    with pytest.raises(ValueError, match="trained must be an int >= 2"):
        census(model, input_ids=torch.randint(3, V, (1, 130)), trained=0)
    with pytest.raises(ValueError, match="more than the 2048 positions.*larger n_positions"):
        census(build("gpt2"), input_ids=torch.ones(1, 2049, dtype=torch.long))   # its field


def test_sharpest_rows_are_the_late_rows_with_the_largest_top_weight():
    from attnlab.core.stats import attention_stats
    from attnlab.inspect.collect import sharpest_rows

    g = torch.Generator().manual_seed(7)
    q, k = torch.randn(1, 2, 100, 8, generator=g), torch.randn(1, 2, 100, 8, generator=g)
    q[..., 80, :] *= 20                                  # row 80 becomes the sharpest late row
    got = attention_stats(q, k, causal=True, rows=sharpest_rows([3], 2), block=(16, 32))
    assert got.row_index.tolist()[0] == 3 and 80 in got.row_index.tolist()
    assert all(i >= 50 for i in got.row_index.tolist()[1:]) and len(got.row_index) == 3
    assert sharpest_rows([3], 0) == [3]


def test_long_calls_use_the_spare_cpus_and_give_the_callers_threads_back(monkeypatch):
    """A census on an oversubscribed machine runs on the CPUs left free (here: 4 CPUs, 2.4
    kept busy by other processes, so 2 threads), and the caller's setting is back afterwards,
    even when the call fails."""
    import os
    import sys

    from attnlab import _threads

    census_module = sys.modules["attnlab.inspect.collect"]     # where the census calls it
    seen = []
    real = census_module.attention_stats

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(census_module, "attention_stats", spy)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr(_threads, "busy_cpus", lambda: 2.4)
    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        census(build("llama").eval(), input_ids=torch.randint(3, V, (1, 40)))
        assert seen and set(seen) == {2}
        assert torch.get_num_threads() == 4
        with pytest.raises(ValueError):
            census(build("llama"), input_ids=torch.ones(2, 5, dtype=torch.long))
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


def test_the_load_is_other_processes_now_not_this_ones_last_minute(monkeypatch):
    """busy_cpus reads the runnable threads of other processes now: this process's own
    running threads are not counted, and where /proc cannot be read the 1-minute average
    less this process stands in."""
    import os

    from attnlab import _threads

    monkeypatch.setattr(_threads, "_running", lambda path: 3)       # 3 runnable, 1 of them ours
    monkeypatch.setattr(_threads, "_own_running", lambda: 1)
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0, 2.0, 2.0))   # our own last minute
    assert _threads.busy_cpus(gap_s=0) == 2.0
    monkeypatch.setattr(_threads, "_own_running", lambda: 3)
    assert _threads.busy_cpus(gap_s=0) == 0.0

    def unreadable(path):
        raise OSError(path)

    monkeypatch.setattr(_threads, "_running", unreadable)
    assert _threads.busy_cpus(gap_s=0) == 1.0
    assert _threads._own_running() >= 1                 # the thread that asks is running
