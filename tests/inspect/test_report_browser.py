"""attnlab inspect end to end (slow tier: make check): the figures it writes, the user text it
escapes, and the report in headless Chromium: what a person sees and clicks, the
values under the cursor at 1,000 tokens, the page without JavaScript, the corpus selector; the
full-length limit of the CLI."""

import json

import pytest

from attnlab.cli import main
from attnlab.inspect.labels import LABEL_COLORS
from tests.helpers import open_report

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("inspect-report")]


def _first_paint_and_head_view_at_full_length(report):
    """The 512-token report in Chromium: painted within 3 s, drawn, the head view answers."""
    with open_report(report, viewport=(1300, 1000), timeout_ms=60_000) as opened:
        page = opened.page
        paint = page.evaluate("() => performance.getEntriesByName('first-paint')[0].startTime")
        assert paint < 3000, paint
        assert page.locator("[data-el=hv-q] .tok").count() == 512
        page.locator("[data-el=hv]").scroll_into_view_if_needed()
        before = page.eval_on_selector("[data-el=hv-canvas]", "c => c.toDataURL()")
        page.hover("[data-el=hv-q] .tok[data-index='300']")
        assert page.get_attribute("[data-el=hv]", "data-lines") == "q300"
        assert page.eval_on_selector("[data-el=hv-canvas]", "c => c.toDataURL()") != before
    assert opened.errors == [] and opened.offline(), (opened.errors, opened.requests)


def test_report_in_headless_chromium(report, tmp_path):
    from PIL import Image, ImageStat

    with open_report(report / "report.html", viewport=(1300, 1800)) as opened:
        page = opened.page
        assert page.locator("button.head").count() == 72
        page.click("button.head[data-layer='3'][data-head='7']")
        assert page.text_content("[data-el=detail-title]").startswith("Layer 3, head 7")
        data = json.loads(page.text_content("[data-el=data]"))
        n = len(data["texts"][0]["tokens"])
        assert page.eval_on_selector("[data-el=map-canvas]", "c => [c.width, c.height]") == [n, n]
        assert page.locator("[data-el=detail-metrics] tr").count() >= 9
        # hovering the map shows the value under the cursor
        page.locator("[data-el=map-canvas]").scroll_into_view_if_needed()
        box = page.locator("[data-el=map-canvas]").bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.25)
        assert "\u2192" in page.text_content("[data-el=map-value]")
        # head view: hovering a query token redraws the lines for that token only
        page.select_option("[data-el=hv-layer]", "2")
        before = page.eval_on_selector("[data-el=hv-canvas]", "c => c.toDataURL()")
        page.locator("[data-el=hv]").scroll_into_view_if_needed()
        page.hover("[data-el=hv-q] .tok[data-index='4']")
        assert page.get_attribute("[data-el=hv]", "data-lines") == "q4"
        assert page.eval_on_selector("[data-el=hv-canvas]", "c => c.toDataURL()") != before
        page.hover("[data-el=hv-k] .tok[data-index='2']")
        assert page.get_attribute("[data-el=hv]", "data-lines") == "k2"
        page.check("[data-el=hv-heads] input[data-head='5']")                # a second head
        assert page.locator("[data-el=hv-heads] input:checked").count() == 2
        # word level: word pieces merged, fewer rows
        page.check("[data-el=words]")
        words = page.locator("[data-el=hv-q] .tok").count()
        assert 0 < words < n
        page.uncheck("[data-el=words]")
        # pair: sentence A -> B is a block of the map
        page.select_option("[data-el=pair]", "ab")
        w, h = page.eval_on_selector("[data-el=map-canvas]", "c => [c.width, c.height]")
        assert w < n and h < n and w + h == n
        page.select_option("[data-el=pair]", "all")
        # attribution: the layer slider changes the rollout map
        page.select_option("[data-el=attr-kind]", "rollout")
        first = page.eval_on_selector("[data-el=attr-canvas]", "c => c.toDataURL()")
        page.fill("[data-el=attr-layer]", "0")
        page.dispatch_event("[data-el=attr-layer]", "input")
        assert page.text_content("[data-el=attr-layer-label]") == "after layer 0"
        assert page.eval_on_selector("[data-el=attr-canvas]", "c => c.toDataURL()") != first
        settings = page.inner_text("[data-el=settings]")
        assert '<script>alert("x")</script>' in settings           # shown as text
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot))
    assert opened.errors == [] and opened.dialogs == []
    assert opened.offline(), opened.requests
    stat = ImageStat.Stat(Image.open(shot).convert("L"))
    assert stat.stddev[0] > 20                                      # not a blank page


def test_length_limit_is_an_error_or_an_explicit_cut(tmp_path, capsys):
    # over 5 s: the only report at the model's full 512 tokens opened in Chromium (first paint,
    # head view)
    long_text = " ".join(["word"] * 600)                        # 602 tokens with [CLS], [SEP]
    assert main(["inspect", long_text, "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "602 tokens, more than the 512 positions" in err and "--truncate" in err
    assert "Traceback" not in err
    args = ["inspect", long_text, "--truncate", "--no-flow", "--out", str(tmp_path / "b")]
    assert main(args) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "text 1 was cut from 602 to 512 tokens" in out
    page = (tmp_path / "b" / "report.html").read_text()
    assert "cut from 602 to 512 tokens" in page
    _first_paint_and_head_view_at_full_length(tmp_path / "b" / "report.html")


def test_corpus_report_has_a_text_selector(tmp_path):
    corpus = tmp_path / "texts.txt"
    corpus.write_text("The first sentence.\nA second, longer one about cats.\nThird!\n")
    assert main(["inspect", "--file", str(corpus), "--out", str(tmp_path)]) == 0
    with open_report(tmp_path / "report.html") as opened:
        page = opened.page
        assert page.locator("[data-el=text] option").count() == 3
        n0 = page.locator("[data-el=hv-q] .tok").count()
        page.select_option("[data-el=text]", "1")
        assert page.locator("[data-el=hv-q] .tok").count() != n0         # the second text's tokens
    assert opened.errors == []


def test_values_under_the_cursor_are_the_weights_at_1000_tokens(tmp_path):
    # A causal map of 1,000 tokens whose rows spread their mass (weights ~1e-3 and below,
    # far under each map's largest weight): every value the cursor reads must be within 1%
    # of the true weight or within 1e-6 (stored bfloat16). One byte per weight scaled to the
    # map's maximum read 0.0000 for 93% of such weights.
    import re

    import torch

    from attnlab.inspect import show

    n = 1000
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(1, 2, n, n, generator=g) * 2.0
    scores[..., 0] += 4.0                                       # a sink: a large maximum
    maps = scores.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    maps = maps.softmax(-1)
    report = show(attentions=(maps,), tokens=[f"t{i}" for i in range(n)])
    report.save(tmp_path / "r.html")
    rx = re.compile(r"\((\d+)\) \u2192 .* \((\d+)\): (\S+)$")
    seen = 0
    with open_report(tmp_path / "r.html", viewport=(1300, 1800), timeout_ms=60_000) as opened:
        page = opened.page
        page.click("button.head[data-layer='0'][data-head='1']")
        canvas = page.locator("[data-el=map-canvas]")
        canvas.scroll_into_view_if_needed()
        box = canvas.bounding_box()
        for fx, fy in ((0.02, 0.9), (0.3, 0.95), (0.5, 0.6), (0.7, 0.99), (0.45, 0.5),
                       (0.9, 0.97), (0.1, 0.3), (0.001, 0.999)):
            page.mouse.move(box["x"] + box["width"] * fx, box["y"] + box["height"] * fy)
            text = page.text_content("[data-el=map-value]")
            i, j, value = rx.search(text).groups()
            true = float(maps[0, 1, int(i), int(j)])
            shown = float(value)
            assert abs(shown - true) <= max(0.01 * true, 1e-6), (text, true)
            # the digits the 16-bit code carries: 3 significant above 1e-4, the 2e-6 step below
            digits = value.lstrip("0.").replace(".", "")
            assert (len(digits) <= 3 if shown >= 1e-4 else len(value.split(".")[1]) == 6), text
            seen += true > 0
        low = page.text_content("[data-el=map-bar] .lo")      # the log scale's low end
        assert low.startswith("\u2264") and float(low[1:]) > 0, low
        tags = page.locator("[data-el=taxonomy] .tag").all_text_contents()
        assert tags and all(t in LABEL_COLORS for t in tags), tags[:5]    # whole words
    assert seen >= 6 and opened.errors == []


def test_without_javascript_a_notice_and_a_still_picture(tmp_path):
    # An untrusted notebook or GitHub's preview shows the HTML without running its script:
    # the reader gets a line saying so and the model view as a PNG; with the script it is
    # hidden (the other Chromium tests run with it).
    import torch
    from playwright.sync_api import sync_playwright

    from attnlab.inspect import show
    from tests.helpers import CHROMIUM

    maps = torch.rand(2, 3, 9, 9).softmax(-1)
    show(attentions=tuple(maps[:, None]), tokens=list("abcdefghi")).save(tmp_path / "r.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update"])
        try:
            page = browser.new_page(java_script_enabled=False)
            page.goto((tmp_path / "r.html").resolve().as_uri())
            still = page.locator("[data-el=still]")
            assert still.is_visible() and "JavaScript" in still.inner_text()
            assert page.eval_on_selector("[data-el=still] img", "i => i.naturalWidth") > 100
        finally:
            browser.close()
    with open_report(tmp_path / "r.html") as opened:
        assert not opened.page.locator("[data-el=still]").is_visible()


def test_figures_in_png_and_svg(report):
    for stem in ("model_grid", "metric_entropy_ratio", "metric_within_segment", "rollout", "flow",
                 "gradient", "head_embedding"):
        assert (report / f"{stem}.png").stat().st_size > 5_000, stem
        assert (report / f"{stem}.svg").read_text().lstrip().startswith("<?xml")
    assert not list(report.glob(".*"))                       # nothing half-written left over


def test_user_text_is_escaped_in_html_and_in_the_data_island(report):
    page = (report / "report.html").read_text()
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    island = page.split('<script type="application/json" data-el="data">')[1].split("</script>")[0]
    assert "<" not in island
    data = json.loads(island)
    assert data["layers"] == 6 and data["heads"] == 12 and "[SEP]" in data["texts"][0]["tokens"]
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")
