"""The approximations on the embedded model (attnlab bench --model default)."""

import pytest
import torch

from attnlab.bench.model import METHODS, _forward, passages, run, swapped
from attnlab.cli import main
from attnlab.core.registry import list_backends
from attnlab.nn.bert import load_default


def test_a_window_wider_than_the_text_changes_nothing():
    model, tok = load_default()
    text = "Attention is a weighted average of the values."
    exact, layers, n = _forward(model, tok, text)
    assert n < 32
    with swapped(model, "window ±32"):
        got, got_layers, _ = _forward(model, tok, text)
    assert torch.allclose(got, exact, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(layers, got_layers))
    assert not any(name.startswith("_study") for name in list_backends())   # cleaned up
    assert {m.backend for m in model.modules() if hasattr(m, "backend")} == {"auto"}


def test_the_study_on_a_few_passages():
    res = run(pairs=3)
    assert set(res["methods"]) == set(METHODS)
    assert res["tokens"]["min"] > 64                     # long enough for LSH and windows
    for d in res["methods"].values():
        assert len(d["layer_rel_error"]) == 6
        assert -1 <= d["rank_spearman"] <= 1 and 0 < d["cosine_mean"] <= 1 + 1e-6
    w16, w32 = res["methods"]["window ±16"], res["methods"]["window ±32"]
    assert w32["layer_rel_error"][0] < w16["layer_rel_error"][0]   # a wider window is closer


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="ask for fewer"):
        passages(1000, 6)
    with pytest.raises(ValueError, match="method must be"):
        with swapped(torch.nn.Linear(2, 2), "flash"):
            pass
    assert main(["bench", "--model", "mine", "--out", str(tmp_path)]) == 2
    assert main(["bench", "--model", "default", "--pairs", "1", "--out", str(tmp_path)]) == 2
    assert main(["bench", "--model", "default", "--quick", "--out", str(tmp_path)]) == 2
