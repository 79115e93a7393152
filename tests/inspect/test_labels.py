"""One label table for both routes: full maps (show() up to 1,024 tokens) and the census
(past it) give the same labels and the same numbers for the same heads of the same text;
the rule table names every threshold once with its source; diagnose, inspect's metrics and
the census agree to 1e-6 on the same heads."""

import pytest
import torch

from attnlab.core.stats import attention_stats
from attnlab.diagnose import head_health
from attnlab.inspect import census, show
from attnlab.inspect import labels as table
from attnlab.inspect.metrics import head_metrics
from attnlab.inspect.show import load_kjv
from attnlab.zoo import kjv

SHARED = ("entropy", "entropy_ratio", "max_weight", "sink_mass", "prev_mass", "self_mass",
          "next_mass", "local_mass", "distance", "match_mass", "dup_mass", "prev_argmax",
          "next_argmax", "self_argmax")


def test_the_rule_table_names_each_threshold_once_with_its_source():
    labels = [r.label for r in table.RULES]
    letters = [r.letter for r in table.RULES]
    assert len(set(labels)) == len(labels) and len(set(letters)) == len(letters)
    assert table.LABELS == (*labels, table.NONE) and table.NONE == "heterogeneous"
    assert all(r.source for r in table.RULES)
    line = table.legend()
    for r in table.RULES:
        assert r.describe() in line
    import attnlab.inspect.taxonomy as tax

    census_module = __import__("sys").modules["attnlab.inspect.census"]
    for module in (tax, census_module):                   # no threshold of their own
        assert not {"SINK", "INDUCTION", "PREVIOUS", "LOCAL", "BROAD", "MASS"} & set(vars(module))


def test_diagnose_metrics_and_census_agree_on_the_same_heads():
    """Three routes over the same q, k (causal, crossing tiles): dense float64 maps through
    inspect's head metrics, the tiled pass reduced by labels.summarize (the census's
    reduction), and diagnose's head_health."""
    g = torch.Generator().manual_seed(3)
    n, h = 150, 3
    q = torch.randn(1, h, n, 16, generator=g, dtype=torch.float64)
    k = torch.randn(1, h, n, 16, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 9, (n,), generator=g)
    s = (q @ k.transpose(-1, -2)) / 4.0
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    maps = torch.softmax(s, -1)                                     # (1, H, N, N)
    dense = head_metrics(maps, ["t"] * n, ids=ids)
    st = attention_stats(q, k, causal=True, ids=ids, block=(16, 32))
    rows = {name: getattr(st, name)[0][None] for name in (
        "entropy", "max_weight", "argmax", "tied", "sink_mass", "prev_mass", "self_mass",
        "next_mass", "local_mass", "distance", "match_mass", "dup_mass", "received")}
    tiled = table.summarize(rows, torch.isfinite(st.lse[0])[None], causal=True, ids=ids)
    for name in SHARED:
        a, b = getattr(dense, name).double(), tiled[name].double()
        scale = max(float(a.abs().max()), 1.0)
        assert float((a - b).abs().max()) <= 1e-6 * scale, name
    health = head_health(q, k, causal=True, block_q=16, block_k=32)
    assert float((health.entropy.double() - dense.entropy[0].double()).abs().max()) <= 1e-6
    assert float((health.sink_mass.double() - dense.sink_mass[0].double()).abs().max()) <= 1e-6


def test_local_is_not_given_where_the_band_covers_the_text():
    model, tok = load_kjv()
    text = kjv.corpus("heldout")[:40]
    c = census(model, tok, text)
    ins = show(model, tok, text)
    assert "local" not in {x for row in c.labels for x in row}
    assert c.labels == ins.taxonomy.labels
    assert any("no head is labelled local" in note for note in c.notes)
    assert float(c.summary["local_uniform"].min()) >= 0.5


def test_the_note_past_the_trained_length_states_what_the_maps_show():
    """MiniLM (trained at 128 tokens) on 300 tokens: the note names the head whose
    previous-token mass changes most at 128 and its numbers, computed here from the maps the
    report shows; the part before 128 is the one that changes (keys past it pull queries)."""
    import re

    from attnlab.inspect.run import inspect_texts

    text = kjv.corpus("heldout")[:1300]
    ins = inspect_texts([(text, None)], model="default", truncate=True, flow_mode=False)
    n = len(ins.tokens)
    assert n > 128
    note = next(x for x in ins.notes if "trained at" in x)
    maps = ins.maps.double()
    i = torch.arange(1, n)
    prev = maps[..., i, i - 1]
    before, after = prev[..., :127].mean(-1), prev[..., 127:].mean(-1)
    layer, head = divmod(int((after - before).abs().flatten().argmax()), ins.heads)
    said = re.search(r"L(\d+)H(\d+) puts ([0-9.]+) .* 1-127 and ([0-9.]+) at queries 128-", note)
    assert said and (int(said[1]), int(said[2])) == (layer, head), note
    assert float(said[3]) == pytest.approx(float(before[layer, head]), abs=0.006)
    assert float(said[4]) == pytest.approx(float(after[layer, head]), abs=0.006)
    assert float(before[layer, head]) < 0.5 < float(after[layer, head])   # MiniLM's L0H2
    pulled = float((maps[layer, head, 1:128].argmax(-1) >= 128).double().mean())
    assert f"{pulled:.0%} of its queries 1-127" in note
    assert "never learned, and heads" not in note and "at most 128 tokens" in note


def _uniform_summary(n: int, causal: bool, ids=None):
    from attnlab.core.stats import reference_stats
    from attnlab.inspect import labels as T

    w = torch.ones(n, n, dtype=torch.float64)
    w = (w.tril() if causal else w)
    w = w / w.sum(-1, keepdim=True)
    st = reference_stats(w[None], ids=ids, band=16)
    names = ["entropy", "max_weight", "argmax", "tied", "sink_mass", "prev_mass", "self_mass",
             "next_mass", "local_mass", "distance", "received"]
    names += ["match_mass", "dup_mass"] if ids is not None else []
    rows = {k: getattr(st, k)[None] for k in names}
    return T.summarize(rows, torch.ones(1, 1, n, dtype=torch.bool), causal=causal, ids=ids)


@pytest.mark.parametrize("causal", [True, False])
def test_a_uniform_head_gets_no_pattern_label_at_any_length(causal):
    """A uniform head is broad (its entropy is the uniform one) or none of the labels, at
    every length from 2 to 64: no rule a uniform head would meet on the same rows is given."""
    from attnlab.inspect import labels as T

    for n in range(2, 65):
        for ids in (None, torch.arange(n) % 3, torch.zeros(n, dtype=torch.long)):
            label = T.label_heads(_uniform_summary(n, causal, ids))[0][0]
            assert label in ("broad", T.NONE), (n, causal, label)


def test_the_sink_rule_has_a_uniform_baseline_and_says_so():
    """At 9 tokens a uniform causal head puts H_9 / 9 = 0.31 on the first token, past the
    sink rule's 0.3: a head with 0.35 there is not labelled a sink, and a note says why; at
    64 tokens the same head is."""
    from attnlab.inspect import labels as T

    s = _uniform_summary(9, True)
    assert abs(float(s["sink_mass_uniform"][0, 0]) - sum(1 / k for k in range(1, 10)) / 9) < 1e-6
    s["sink_mass"] = torch.tensor([[0.35]])
    assert T.label_heads(s)[0][0] != "sink"
    assert any("sink" in n and "uniform head scores 0.31" in n for n in T.withheld_notes(s))
    long = _uniform_summary(64, True)
    long["sink_mass"] = torch.tensor([[0.35]])
    assert T.label_heads(long)[0][0] == "sink" and not T.withheld_notes(long)


def test_a_label_read_on_a_few_rows_needs_the_minimum():
    """Duplicate token and induction read only the queries with an earlier copy or match: one
    such query (a 13-token sentence with one repeated token) gives no label, whatever its
    mass; MIN_ROWS of them do."""
    from attnlab.inspect import labels as T

    ids = torch.tensor([5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 5, 16])       # one copy
    s = _uniform_summary(13, True, ids)
    assert int(s["dup_rows"][0, 0]) == 1
    s["dup_mass"] = torch.tensor([[1.0]])
    assert T.label_heads(s)[0][0] != "duplicate token"
    assert any("1 query qualifies" in n and f"needs {T.MIN_ROWS}" in n
               for n in T.withheld_notes(s))
    ids = torch.arange(40) % 20                            # the second half repeats the first
    s = _uniform_summary(40, True, ids)
    assert int(s["dup_rows"][0, 0]) == 20 >= T.MIN_ROWS
    s["dup_mass"] = torch.tensor([[0.9]])
    assert T.label_heads(s)[0][0] == "duplicate token"


def test_a_census_of_uniform_attention_labels_nothing_at_short_lengths():
    """A tiny Llama whose queries are zero attends uniformly: at 5, 7 and 9 tokens no head is
    a sink (every head was, before the baseline), and the report's notes say why."""
    import transformers as tf

    from attnlab.inspect import census

    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, hidden_size=16,
        intermediate_size=32, vocab_size=50, max_position_embeddings=128))
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.zero_()
    for n in (5, 7, 9):
        c = census(model, input_ids=torch.arange(1, n + 1)[None])
        assert {x for row in c.labels for x in row} <= {"broad", "heterogeneous"}, c.labels
        assert any("no head is labelled sink" in note for note in c.notes), c.notes


def test_a_zoo_name_and_a_text_by_position():
    """census("kjv", text) takes the text as the text; a str where a tokenizer goes with a
    model object names text=."""
    from attnlab import zoo
    from attnlab.inspect import census
    from attnlab.zoo import kjv

    text = "In the beginning God created the heaven and the earth."
    c = census("kjv", text)
    assert "".join(c.tokens) == text
    model = zoo.load("kjv")
    with pytest.raises(TypeError, match="pass the text as text="):
        census(model, "In the beginning")
    assert census(model, kjv.tokenizer(), text=text).tokens == c.tokens
