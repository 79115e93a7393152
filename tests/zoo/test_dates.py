"""The shipped ``dates`` model: exact on held-out dates, and its cross-attention follows the
alignment the task defines."""

import pytest
import torch

from attnlab import zoo
from attnlab.zoo.dates import (
    FORMATS,
    alignment_accuracy,
    batch,
    decode,
    exact_match,
    example,
    generate,
    tokenize,
)


@pytest.fixture(scope="module")
def model():
    return zoo.load("dates")


@pytest.fixture(scope="module")
def held():
    return generate(400, seed=2024, split="heldout")


def test_held_out_dates_are_new():
    train = {e.target for e in generate(3000, seed=5, split="train")}
    assert not train & {e.target for e in generate(300, seed=6, split="heldout")}


def test_exact_match_on_held_out_dates(model, held):
    assert exact_match(model, held) >= 0.98


def test_copied_digits_look_at_their_source(model, held):
    acc = alignment_accuracy(model, held)
    assert acc["copies"] >= 0.95


@pytest.mark.parametrize("text, iso", [("3 March 2021", "2021-03-03"),
                                       ("March 3, 2021", "2021-03-03"),
                                       ("3. März 2021", "2021-03-03"),
                                       ("3 de marzo de 2021", "2021-03-03"),
                                       ("2021年3月3日", "2021-03-03"),
                                       ("31.12.1999", "1999-12-31")])
def test_dates_as_typed(model, text, iso):
    from attnlab.zoo.dates import S_INDEX

    src = torch.tensor([[S_INDEX[t] for t in tokenize(text)]])
    assert decode(model.translate(src)[0].tolist()) == iso


def test_alignment_of_every_format():
    for fmt in FORMATS:
        e = example(2021, 11, 5, fmt)
        for ch, at, copy in zip(e.target, e.align, e.copies):
            if copy:
                assert e.source[at] == ch                 # a copied digit is that digit
        src, tgt = batch([e])
        assert src.shape[1] == len(e.source) and tgt.shape == (1, 12)


def test_bad_dates_are_refused():
    with pytest.raises(ValueError, match="not part of a date"):
        tokenize("3 Brumaire 2021")
    with pytest.raises(ValueError, match="split must be"):
        generate(2, split="test")
