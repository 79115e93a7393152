"""`attnlab inspect --model induction|dates|PATH` through the CLI, PATH a local Hugging Face
decoder or encoder-decoder folder (tiny, random, saved here with the embedded model's
tokenizer files: nothing downloaded)."""

import shutil

import pytest
import torch

from attnlab.cli import main
from attnlab.nn.bert import default_model_path


def _folder(tmp_path, kind, positions=64):
    import transformers as tf

    torch.manual_seed(0)
    vocab = 30522                                    # the embedded tokenizer's
    if kind == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_head=2, n_embd=16,
                                                 vocab_size=vocab, n_positions=positions,
                                                 bos_token_id=101, eos_token_id=102))
    else:
        model = tf.BartForConditionalGeneration(tf.BartConfig(
            encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32,
            vocab_size=vocab, max_position_embeddings=64, pad_token_id=0, bos_token_id=101,
            eos_token_id=102, decoder_start_token_id=101, forced_eos_token_id=None))
    path = tmp_path / kind
    model.save_pretrained(path)
    src = default_model_path()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        shutil.copy(src / name, path / name)
    return path


@pytest.mark.parametrize("kind", ["gpt2", "bart"])
def test_inspect_a_local_transformers_folder(tmp_path, kind):
    path = _folder(tmp_path, kind)
    out = tmp_path / "out"
    assert main(["inspect", "the cat sat on the mat", "--model", str(path),
                 "--out", str(out)]) == 0
    html = (out / "report.html").read_text()
    assert ('"label":"cross-attention: ' in html) == (kind == "bart")


def test_inspect_the_embedded_models(tmp_path, capsys):
    assert main(["inspect", "5 9 14 5 9 14", "--model", "induction",
                 "--out", str(tmp_path)]) == 0
    assert "induction" in capsys.readouterr().out
    assert main(["inspect", "2021年3月3日", "--model", "dates", "--out", str(tmp_path)]) == 0
    assert "2021-03-03" in capsys.readouterr().out


@pytest.mark.parametrize("args, words", [
    (["x y", "--model", "induction"], "token ids"),
    (["99", "--model", "induction"], "1..63"),
    (["3 Brumaire 2021", "--model", "dates"], "not part of a date"),
    (["3 March 2021", "--model", "dates", "--pair", "x"], "one text"),
    (["3 March 2021", "--model", "dates", "--target", "similarity"], "--target"),
])
def test_bad_input_to_the_embedded_models(tmp_path, capsys, args, words):
    assert main(["inspect", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_broken_transformers_folder_is_one_line(tmp_path, capsys):
    path = _folder(tmp_path, "gpt2")
    w = path / "model.safetensors"
    w.write_bytes(w.read_bytes()[:5000])
    assert main(["inspect", "hello", "--model", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "cannot load the weights" in err and "Traceback" not in err


def test_past_1024_tokens_a_decoder_gets_the_census_report(tmp_path, capsys):
    # the same routing as show(): one text of 1,300 tokens from a file, exact rows named
    path = _folder(tmp_path, "gpt2", positions=2048)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(" ".join(f"w{i % 37}" if i % 5 else "the" for i in
                                          range(j * 100, j * 100 + 100)) for j in range(6)))
    out = tmp_path / "out"
    assert main(["inspect", "--file", str(corpus), "--model", str(path), "--rows", "5,-2",
                 "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert "census of 2 layers x 2 heads on" in said
    html = (out / "report.html").read_text()
    assert "attnlabCensus" in html and '"index":[5,' in html
    from attnlab.inspect import ShowOptions, show

    # the notebook's route
    c = show(str(path), text=corpus.read_text(), options=ShowOptions(rows=[5, -2]))
    n = c.length
    assert n > 1024 and c.rows[0][0].tolist()[:3] == [5, n - 2, n - 1]
    assert main(["inspect", "a b c", "--model", str(path), "--census",
                 "--out", str(tmp_path / "o2")]) == 0                 # forced at any length
    assert "attnlabCensus" in (tmp_path / "o2" / "report.html").read_text()


@pytest.mark.parametrize("args, words", [
    (["a b", "--census"], "apply to 'kjv', 'smollm2' and Hugging Face folders"),
    (["a b", "--rows", "1,x"], "--rows '1,x'"),
])
def test_census_options_are_checked(tmp_path, capsys, args, words):
    assert main(["inspect", *args, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_census_rows_out_of_range_are_one_line(tmp_path, capsys):
    path = _folder(tmp_path, "gpt2")
    assert main(["inspect", "a b c", "--model", str(path), "--census", "--rows", "99",
                 "--out", str(tmp_path / "o")]) == 2
    assert "rows must be token positions in [0, " in capsys.readouterr().err
