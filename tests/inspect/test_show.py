"""inspect.show() on tiny Hugging Face models of four families built from configs (GPT-2,
Llama with grouped-query heads, Mistral with a sliding window, T5), on a torch module, and on
precomputed maps: the maps shown equal the model's own output_attentions (eager) to 1e-5, the
causal and cross views are labelled, and the neuron view's vectors give the model's scores.
The tokenizer is the embedded model's (nothing downloaded)."""

import shutil

import pytest
import torch
import transformers as tf

from attnlab.cli import main
from attnlab.inspect import ShowOptions, show
from attnlab.nn.bert import default_model_path

TEXT = "the cat sat on the mat because it was tired"
V = 30522                                           # the embedded tokenizer's vocabulary


def build(family):
    torch.manual_seed(0)
    small = dict(num_hidden_layers=2, num_attention_heads=4, hidden_size=32,
                 intermediate_size=64, vocab_size=V, max_position_embeddings=64)
    if family == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=V,
                                                n_positions=64, bos_token_id=101,
                                                eos_token_id=102))
    if family == "llama":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **small))
    if family == "mistral":
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=4,
                                                      **small))
    if family == "t5":
        return tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=V, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            relative_attention_num_buckets=8, decoder_start_token_id=0, pad_token_id=0,
            eos_token_id=102))
    raise AssertionError(family)


@pytest.fixture(scope="module")
def tok():
    return tf.AutoTokenizer.from_pretrained(str(default_model_path()), local_files_only=True)


def _eager(model, tok, out_ids=None):
    model.set_attn_implementation("eager")
    batch = tok([TEXT], return_tensors="pt")
    kw = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    if out_ids is not None:
        kw["decoder_input_ids"] = out_ids
    with torch.no_grad():
        return model(**kw, output_attentions=True)


@pytest.mark.parametrize("family", ["gpt2", "llama", "mistral"])
def test_decoders_show_their_own_causal_maps(family, tok):
    model = build(family).eval()
    ins = show(model, tok, TEXT)
    want = torch.stack([a[0] for a in _eager(model, tok).attentions]).double()
    assert ins.maps.shape == want.shape
    assert float((ins.maps - want).abs().max()) <= 1e-5
    assert ins.captures[0].kind == "causal"
    assert "causal" in ins.report_html()
    # the neuron view's vectors: softmax(q k^T * scale) under the model's mask is the map
    c = ins.captures[0]
    s = (c.q.double() @ c.k.double().transpose(-1, -2)) * c.scale.double()[:, None, None, None]
    n = s.shape[-1]
    keep = torch.ones(n, n, dtype=torch.bool).tril()
    if family == "mistral":                          # sliding window of 4 keys
        keep &= ~torch.ones(n, n, dtype=torch.bool).tril(-4)
    probs = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
    assert float((probs - want).abs().max()) <= 1e-5


def test_an_encoder_decoder_shows_encoder_decoder_and_cross(tok):
    model = build("t5").eval()
    ins = show(model, tok, TEXT, options=ShowOptions(max_new_tokens=5))
    kinds = [c.kind for c in ins.captures]
    assert kinds == ["self", "decoder self (causal)", "cross-attention"]
    batch = tok([TEXT], return_tensors="pt")
    with torch.no_grad():
        out_ids = model.generate(input_ids=batch["input_ids"],
                                 attention_mask=batch["attention_mask"], max_new_tokens=5,
                                 do_sample=False)
    eager = _eager(model, tok, out_ids)
    for cap, want in zip(ins.captures, (eager.encoder_attentions, eager.decoder_attentions,
                                        eager.cross_attentions)):
        want = torch.stack([a[0] for a in want]).double()
        assert float((cap.maps.double() - want).abs().max()) <= 1e-5, cap.kind
    assert ins.captures[2].keys == ins.tokens
    html = ins.report_html()
    assert '"label":"cross-attention: ' in html and '"kind":"decoder self (causal)"' in html
    # the same three maps given as bertviz's model_view takes them: one dict per kind
    decoder_tokens = tok.convert_ids_to_tokens(out_ids[0].tolist())
    maps = show(attentions={"encoder": eager.encoder_attentions,
                            "decoder": eager.decoder_attentions,
                            "cross": eager.cross_attentions},
                tokens={"encoder": ins.tokens, "decoder": decoder_tokens})
    assert [c.kind for c in maps.captures] == kinds
    for got, cap in zip(maps.captures, ins.captures):
        assert float((got.maps.double() - cap.maps.double()).abs().max()) <= 1e-5, cap.kind
    with pytest.raises(ValueError, match="takes the keys encoder, decoder, cross; got 'self'"):
        show(attentions={"self": eager.encoder_attentions}, tokens={"encoder": ins.tokens})
    with pytest.raises(ValueError, match="tokens=\\{'encoder'"):
        show(attentions={"encoder": eager.encoder_attentions}, tokens=ins.tokens)


def test_show_takes_its_display_options_as_one_object():
    """show() has at most 8 parameters; the display options are one ShowOptions, and anything
    else there is refused with the fix."""
    import inspect

    assert len(inspect.signature(show).parameters) <= 8
    with pytest.raises(TypeError, match="options must be a ShowOptions, got dict"):
        show("default", text="a cat", options={"truncate": True})
    with pytest.raises(TypeError, match="unexpected keyword argument 'truncate'"):
        show("default", text="a cat", truncate=True)


def test_precomputed_maps_and_a_torch_module(tok):
    model = build("gpt2").eval()
    model.set_attn_implementation("eager")
    batch = tok([TEXT], return_tensors="pt")
    with torch.no_grad():
        maps = model(**batch, output_attentions=True).attentions
    tokens = tok.convert_ids_to_tokens(batch["input_ids"][0].tolist())
    ins = show(attentions=maps, tokens=tokens)
    assert torch.equal(ins.maps, torch.stack([a[0] for a in maps]).double())
    assert ins.captures[0].kind == "causal"
    with pytest.raises(ValueError, match="one token per position"):
        show(attentions=maps, tokens=tokens[:-1])
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, dropout=0.0)
    x = torch.randn(1, 6, 16)
    ins = show(layer, inputs=(x,), tokens=list("abcdef"))
    assert ins.maps.shape == (1, 4, 6, 6) and ins.captures[0].q is not None
    a, b = ins._repr_html_(), ins._repr_html_()
    assert a.split('id="')[1].split('"')[0] != b.split('id="')[1].split('"')[0]


@pytest.mark.parametrize("family", ["llama", "mistral", "t5"])
def test_the_command_line_inspects_any_local_folder(tmp_path, family, capsys):
    path = tmp_path / family
    build(family).save_pretrained(path)
    src = default_model_path()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        shutil.copy(src / name, path / name)
    if family != "t5":                                       # T5's positions are relative
        long = " ".join(["word"] * 80)                       # 82 tokens > 64 positions
        assert main(["inspect", long, "--model", str(path), "--out", str(tmp_path / "o")]) == 2
        assert "64 positions" in capsys.readouterr().err
        assert main(["inspect", long, "--model", str(path), "--truncate",
                     "--out", str(tmp_path / "o")]) == 0
        assert "cut from 82 to 64" in capsys.readouterr().out
    assert main(["inspect", TEXT, "--model", str(path), "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):
        (path / name).unlink()
    assert main(["inspect", TEXT, "--model", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "tokenizer" in err and len(err.strip().splitlines()) == 1


def _byte_level_tokenizer():
    """A byte-level BPE tokenizer (GPT-2's scheme) trained here on a few lines, nothing
    downloaded."""
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(["注意 the cat sat on the mat", "the cat 注意力"] * 20, vocab_size=300,
                            min_frequency=1, show_progress=False)
    return tf.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)


def test_byte_level_tokens_are_shown_as_text_not_mojibake():
    from attnlab.inspect.tokens import display_tokens

    bpe = _byte_level_tokenizer()
    ids = bpe("注意 the cat")["input_ids"]
    raw = bpe.convert_ids_to_tokens(ids)
    assert any("æ" in t or "Ġ" in t for t in raw)                # what transformers gives
    shown = display_tokens(bpe, raw)
    assert "".join(shown) == "注意 the cat"
    assert " the" in shown or " " in "".join(shown)
    wordpiece = tf.AutoTokenizer.from_pretrained(str(default_model_path()), local_files_only=True)
    assert display_tokens(wordpiece, ["[CLS]", "##ing"]) == ["[CLS]", "##ing"]   # untouched


def test_show_refuses_what_it_would_have_to_guess(tok):
    model = build("gpt2")
    with pytest.raises(TypeError, match="one string.*once per text"):
        show(model, tok, ["a text", "another"])
    with pytest.raises(ValueError, match="text is empty"):
        show(model, tok, "   ")
    with pytest.raises(ValueError, match="pair= is for sentence-pair encoders"):
        show(model, tok, TEXT, pair="a second sentence")
    with pytest.raises(ValueError, match="empty tuple.*attn_implementation='eager'"):
        show(attentions=(), tokens=["a"])               # transformers 5's sdpa gives ()
    ins = show(model, tok)                               # the default text, said so
    assert any("default sentence" in n for n in ins.notes)


def test_near_duplicate_flags_are_grouped_and_capped():
    import itertools

    from attnlab.inspect.report import FLAG_GROUPS, _flags_html

    # 16 heads all alike: 120 pairs, one line
    one = _flags_html([], [((0, a), (0, b), 0.05) for a, b in itertools.combinations(range(16), 2)])
    assert one.count("<li>") == 1 and "16 heads" in one
    many = _flags_html([(1, 1)], [((0, 2 * i), (0, 2 * i + 1), 0.01) for i in range(30)])
    assert many.count("<li>") == 1 + FLAG_GROUPS + 1 and "18 more" in many


def test_a_capture_that_cannot_fit_is_refused_before_it_starts():
    from attnlab.inspect.hf import check_capture_memory

    cfg = tf.GPT2Config(n_layer=12, n_head=12)
    check_capture_memory(cfg, 512, "gpt2", available=24 * 10**9)          # 1.1 GB: fine
    with pytest.raises(MemoryError, match="census.*shorter text"):
        check_capture_memory(cfg, 8192, "gpt2", available=24 * 10**9)    # 271 GB
