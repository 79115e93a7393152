"""The shipped ``kjv`` decoder: what it is (a transformers Llama with RoPE, GQA and 4,096
positions, at most 30 MB), what its training measured still holds on the shipped weights, its
held-out books never entered training, the census reads it from a file through the CLI, and
the census's labels are borne out by ablation."""

import json

import pytest
import torch

from attnlab import zoo
from attnlab.zoo import kjv


@pytest.fixture(scope="module")
def model():
    return zoo.load("kjv")


def test_what_it_is(model):
    path = zoo.weights_dir() / "kjv.safetensors"
    assert path.stat().st_size <= 30_000_000
    c = model.config
    assert type(model).__name__ == "LlamaForCausalLM"
    assert c.max_position_embeddings >= 4096 and c.num_key_value_heads < c.num_attention_heads
    assert c.rope_parameters["rope_theta"] == 10000.0
    tok = kjv.tokenizer()
    ids = tok(["In the beginning"], add_special_tokens=False)["input_ids"][0]
    assert ids == kjv.encode("In the beginning").tolist()


def test_held_out_books_are_apart_from_training():
    books = kjv.books()
    assert len(books) == 66 and set(kjv.HELD_OUT) <= set(books)
    held, train = kjv.corpus("heldout"), kjv.corpus("train")
    assert held.startswith("Acts 1\n1 The former treatise") and "Acts 1\n" not in train
    with pytest.raises(ValueError, match="split must be"):
        kjv.corpus("test")


def test_the_recorded_held_out_loss_holds(model):
    facts = zoo.facts("kjv")
    want = facts["heldout_loss_nats_per_byte"]["1024"]
    got = kjv.heldout_loss(model, 1024)
    assert abs(got - want) < 1e-3, (got, want)
    assert want < 1.2                     # bytes of English: a unigram model needs about 2.9


def test_inspect_reads_a_book_past_1024_bytes_as_a_census(tmp_path, capsys):
    from attnlab.cli import main

    book = tmp_path / "acts.txt"
    book.write_text(kjv.corpus("heldout")[:1500], encoding="utf-8")
    assert main(["inspect", "--model", "kjv", "--file", str(book), "--out",
                 str(tmp_path / "out"), "--csv", str(tmp_path / "heads.csv")]) == 0
    said = capsys.readouterr().out
    assert "census of 4 layers x 8 heads on 1500 tokens" in said
    import pandas as pd

    heads = pd.read_csv(tmp_path / "heads.csv")                    # the per-head table
    assert len(heads) == 32 and list(heads.columns[:3]) == ["layer", "head", "label"]
    assert {"sink_mass", "prev_mass", "local_mass", "match_mass"} <= set(heads.columns)
    html = (tmp_path / "out" / "report.html").read_text()
    island = html.split('data-el="data">', 1)[1].split("</script>", 1)[0]
    data = json.loads(island.replace("\\u003c", "<"))
    assert data["tokens"][:3] == ["A", "c", "t"] and data["n"] == 1500


def test_the_labels_are_borne_out_by_ablation(model):
    # what the census found (no sink and no induction head: see docs/inspect.md), checked by
    # removing heads: the previous-token head costs the repeated passage, the local heads the
    # plain text, each far more than as many unlabelled heads
    from attnlab.inspect import census
    from attnlab.inspect.ablation import ablate_heads

    text = kjv.encode(kjv.corpus("heldout")[:1024])[None]
    rep = torch.cat([text[:, :512], text[:, :512]], 1)
    c = census(model, input_ids=text)
    heads = {lab: [(la, h) for la in range(c.layers) for h in range(c.heads)
                   if c.labels[la][h] == lab]
             for lab in ("previous token", "local", "heterogeneous")}
    assert heads["previous token"] and heads["local"], c.labels

    def loss(ids, start):
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, start:-1].float()
        return float(torch.nn.functional.cross_entropy(logits.transpose(1, 2),
                                                       ids[:, start + 1:]))

    for label, ids, start in (("previous token", rep, 512), ("local", text, 0)):
        base = loss(ids, start)
        with ablate_heads(model, heads[label]):
            labelled = loss(ids, start) - base
        with ablate_heads(model, heads["heterogeneous"][:len(heads[label])]):
            unlabelled = loss(ids, start) - base
        assert labelled > 3 * max(unlabelled, 0.005), (label, labelled, unlabelled)
