"""The report of a causal model and of an encoder-decoder, drawn in headless Chromium."""

import json

import pytest
import torch

from attnlab.inspect.generative import inspect_dates, inspect_induction
from attnlab.inspect.report import write_report
from tests.helpers import open_report


@pytest.fixture(scope="module")
def dates_ins():
    return inspect_dates("3. März 2021")


def test_dates_inspection_has_three_captures(dates_ins):
    kinds = [c.kind for c in dates_ins.captures]
    assert kinds == ["self", "decoder self (causal)", "cross-attention"]
    cross = dates_ins.captures[2]
    assert cross.maps.shape[-2:] == (11, 7) and cross.keys == tokenize_source()
    assert cross.align[:4] == [3, 4, 5, 6] and cross.align[5:7] == [2, 2]
    dec = dates_ins.captures[1].maps
    assert not torch.triu(dec, diagonal=1).any()
    assert dates_ins.notes[0].endswith("'2021-03-03'")


def tokenize_source():
    from attnlab.zoo.dates import tokenize
    return tokenize("3. März 2021")


def test_cross_attention_view_in_chromium(dates_ins, tmp_path):
    path = write_report(dates_ins, tmp_path / "report.html", {"model": "dates"})
    with open_report(path) as opened:
        page = opened.page
        assert page.locator("[data-el=text] option").count() == 3
        page.select_option("[data-el=text]", "2")                     # the cross-attention capture
        page.click("button.head[data-layer='1'][data-head='0']")
        assert int(page.get_attribute("[data-el=map-canvas]", "data-aligned")) == 7   # 4 + 2 + 1
        assert "known to read" in page.text_content("[data-el=detail-title]")
        assert page.locator("[data-el=hv-q] .tok").count() == 11      # output tokens
        assert page.locator("[data-el=hv-k] .tok").count() == 7       # source tokens
        page.hover("[data-el=hv-q] .tok >> nth=0")
        assert page.get_attribute("[data-el=hv]", "data-lines") == "q0"
    assert opened.errors == [] and opened.offline(), (opened.errors, opened.requests)


def test_causal_report_in_chromium(tmp_path):
    ins = inspect_induction("5 9 14 22 5 9 14 22")
    path = write_report(ins, tmp_path / "report.html", {"model": "induction"})
    data = json.loads(path.read_text().split('data-el="data">')[1].split("</script>")[0])
    assert "match_mass" in data["metrics"] and "ablation" in data["metrics"]
    with open_report(path) as opened:
        assert opened.page.locator("button.head").count() == 8
        assert opened.page.locator("[data-el=head-table] tr").count() == 9   # header + 8 heads
    assert opened.errors == []
