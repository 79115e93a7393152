"""The census report in headless Chromium (slow tier: make check): every panel at 32k tokens, the
rows shown, the page without JavaScript, two reports in one page, the first screen at 8k tokens."""

import re

import pytest
import torch

from attnlab.inspect.census import Census
from attnlab.inspect.report.census import write_census
from tests.helpers import open_report
from tests.inspect.test_census_report import _synthetic

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    c = _synthetic()
    return c, write_census(c, tmp_path_factory.mktemp("census") / "census.html")


def test_at_32k_tokens_small_fast_and_every_panel_works(big):
    c, path = big
    size = path.stat().st_size
    assert size <= 10_000_000, size
    with open_report(path, viewport=(1300, 1800), timeout_ms=60_000) as opened:
        page = opened.page
        painted = float(page.eval_on_selector(".attnlab-report", "r => r.dataset.painted"))
        assert painted <= 2000, painted                      # ms from navigation to the grid
        assert page.locator(".cell").count() == 32
        page.click(".cell[data-layer='2'][data-head='5']")
        page.wait_for_function("() => document.querySelector('.attnlab-census')"
                               ".dataset.opened === '2,5'")
        assert page.text_content("[data-el=head-title]").startswith("Layer 2, head 5")
        curves = page.locator("[data-el=curves] canvas")
        assert curves.count() == 7        # sink, previous, local, prefix matching, entropy,
        #                                   distance, received
        box = curves.nth(0).bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
        assert re.search(r"positions \d+–\d+", page.text_content("[data-el=curve-value]"))
        cmap = page.locator("[data-el=cmap-frame]")
        cmap.scroll_into_view_if_needed()
        box = cmap.bounding_box()
        left, top, side, width, height = 64, 10, 512, 64 + 512 + 96, 10 + 512 + 44
        page.mouse.move(box["x"] + box["width"] * (left + 0.2 * side) / width,
                        box["y"] + box["height"] * (top + 0.8 * side) / height)
        text = page.text_content("[data-el=map-value]")
        q0, k0, shown = re.search(r"queries (\d+)–\d+, keys (\d+)–\d+: .*≈ (\S+)$",
                                  text).groups()
        cell = c.maps["mean"][2, 5, int(q0) // 128, int(k0) // 128]
        assert abs(float(shown) - float(cell)) <= 0.044 * float(cell)
        assert page.locator("[data-el=row] option").count() == 3
        assert page.locator("[data-el=row-table] tr").count() == 13
        assert "alert" not in "".join(opened.dialogs) and opened.errors == []
        assert opened.offline()


def test_rows_shown_are_the_weights(tmp_path):
    import transformers as tf

    from attnlab.inspect import census

    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=32,
        intermediate_size=64, vocab_size=50, max_position_embeddings=1024)).eval()
    ids = torch.randint(3, 50, (1, 300), generator=torch.Generator().manual_seed(1))
    c = census(model, input_ids=ids, pooled=64, rows=[299, 150], sharpest=1)
    model.set_attn_implementation("eager")
    with torch.no_grad():
        maps = model(input_ids=ids, output_attentions=True).attentions
    write_census(c, tmp_path / "c.html")
    with open_report(tmp_path / "c.html") as opened:
        page = opened.page
        page.click(".cell[data-layer='1'][data-head='2']")
        page.wait_for_function("() => document.querySelector('.attnlab-census')"
                               ".dataset.opened === '1,2'")
        page.select_option("[data-el=row]", "1")                 # query 150
        lines = page.locator("[data-el=row-table] tr")
        assert lines.count() == 13
        for i in range(1, 13):
            key, context, weight = lines.nth(i).locator("td").all_text_contents()
            true = float(maps[1][0, 2, 150, int(key)])
            assert abs(float(weight) - true) <= 5e-4 * true, (key, weight, true)
            mark = lines.nth(i).locator("td.ctx mark").text_content()
            assert mark and mark in context                             # the key in context
        assert opened.errors == []


def test_without_javascript_a_table_of_labels_stands_in(tmp_path):
    from playwright.sync_api import sync_playwright

    from tests.helpers import CHROMIUM

    c = _synthetic(n=300, layers=2, heads=3, grid=32)
    write_census(c, tmp_path / "c.html")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox",
                                                                    "--disable-gpu"])
        try:
            page = browser.new_page(java_script_enabled=False)
            page.goto((tmp_path / "c.html").resolve().as_uri())
            still = page.locator("[data-el=still]")
            assert still.is_visible() and "JavaScript" in still.inner_text()
            assert still.locator("td").count() == 6
        finally:
            browser.close()


def test_two_inline_census_reports_in_one_page_each_answer_their_own_clicks(tmp_path):
    # as a notebook's output area holds them: fragments (no page), ids unique, scoped
    a, b = _synthetic(n=4000, layers=2, heads=3, grid=64), _synthetic(n=3000, layers=3,
                                                                        heads=2, grid=64)
    page = tmp_path / "nb.html"
    page.write_text("<!doctype html><html><body>" + a._repr_html_() + b._repr_html_()
                    + "</body></html>", encoding="utf-8")
    with open_report(page) as opened:
        p = opened.page
        roots = p.locator(".attnlab-census")
        assert roots.count() == 2
        for r in range(2):
            assert float(roots.nth(r).get_attribute("data-painted")) <= 2000
        roots.nth(1).locator(".cell[data-layer='2'][data-head='1']").click()
        assert roots.nth(1).locator("[data-el=head-title]").text_content().startswith(
            "Layer 2, head 1")
        assert roots.nth(0).locator("[data-el=head-title]").text_content().startswith(
            "Layer 0, head 0")
        assert opened.errors == []


@pytest.mark.xdist_group("kjv_8k")
def test_the_first_screen_answers_which_heads_are_which_at_8k_tokens(tmp_path):
    """kjv on 8,000 bytes of Acts (past its 4,096 trained positions): the first screen states
    which heads are sinks, previous-token, local or induction heads, or that none is, with
    the numbers, and the legend; every grid cell prints its value; the colour bar is drawn
    with the label's threshold; the heads are labelled on the trained positions."""
    import io

    from PIL import Image

    from attnlab.inspect import show
    from attnlab.inspect.show import load_kjv
    from attnlab.zoo import kjv

    model, tok = load_kjv()
    text = (kjv.corpus("heldout") * 4)[:8000]
    c = show(model, tok, text)
    assert isinstance(c, Census) and c.trained == 4096
    c.save(tmp_path / "c.html")
    height = 1000
    with open_report(tmp_path / "c.html", viewport=(1300, height), timeout_ms=30_000) as opened:
        page = opened.page
        findings = page.locator("[data-el=findings] li").all_text_contents()
        said = " | ".join(findings)
        for kind in ("sink", "previous token", "local", "induction"):
            assert kind in said, said
        assert "no sink head: largest sink_mass" in said and "no induction head" in said
        assert page.locator("[data-el=findings]").bounding_box()["y"] < height   # no scroll
        legend = page.locator("[data-el=legend]")
        assert "P previous token: prev_mass > 0.5" in legend.text_content()
        assert legend.bounding_box()["y"] + legend.bounding_box()["height"] <= height
        cells = page.locator(".cell").all_text_contents()
        assert len(cells) == 32 and all(re.match(r"^\d+\.\d\d \S$", x) for x in cells), cells
        bar = page.locator("[data-el=grid-bar]")
        bar.scroll_into_view_if_needed()
        img = Image.open(io.BytesIO(bar.screenshot())).convert("RGB")
        colours = {img.getpixel((x, y)) for x in range(img.width) for y in range(img.height)}
        assert len(colours) > 100                                # a gradient, not a blank
        assert any(r > 180 and g < 80 and b < 80 for r, g, b in colours)   # the threshold mark
        assert page.get_attribute("[data-el=grid-bar]", "data-threshold") == "0.8"   # local
        assert "from 4,096 on" in page.text_content("[data-el=head-title]")
        assert page.get_attribute("[data-el=cmap-frame]", "data-drawn") == "1"
        assert opened.errors == []


def test_what_matters_at_8k_tokens_in_chromium(tmp_path):
    """kjv on 8,000 bytes with importance and the value-weighted statistics: the first screen
    still holds the findings; "What matters" draws one dot per head, ranks ten heads with
    their label's statistic by weight and by output, lists the most relevant tokens in
    context; the keys that receive the most by output sit beside those by weight."""
    from attnlab.inspect import census
    from attnlab.inspect.show import load_kjv
    from attnlab.zoo import kjv

    model, tok = load_kjv()
    text = (kjv.corpus("heldout") * 4)[:8000]
    c = census(model, tok, text, importance=True, value_weighted=True)
    assert c.importance.relevance is not None and "received_vw" in c.stats
    c.save(tmp_path / "c.html")
    height = 1000
    with open_report(tmp_path / "c.html", viewport=(1300, height), timeout_ms=30_000) as opened:
        page = opened.page
        assert page.locator("[data-el=findings]").bounding_box()["y"] < height
        assert page.locator("[data-el=matters-plot] circle").count() == c.layers * c.heads
        top = page.locator("[data-el=matters-top] tr")
        assert top.count() == 11                                  # a header and ten heads
        assert "weight" in top.nth(0).text_content() and "output" in top.nth(0).text_content()
        tokens = page.locator("[data-el=matters-tokens] tr")
        assert tokens.count() == 21
        assert page.locator("[data-el=matters-tokens] mark").count() == 20
        assert page.locator("[data-el=received-vw] tr").count() == 21
        assert page.locator("[data-el=received-vw-note]").is_visible()
        page.locator("[data-el=matters]").scroll_into_view_if_needed()
        page.screenshot(path=str(tmp_path / "matters.png"))
        assert opened.errors == []


@pytest.mark.parametrize("which", ["smollm2", "minilm", "kjv"])
def test_contexts_read_as_the_text_in_chromium(which, tmp_path):
    """The contexts of the rows and of the keys that receive the most, as Chromium shows them:
    with the brackets of the token taken out, each is a stretch of the text itself (no space
    inside a word, none before a comma), on each kind of tokenizer."""
    from tests.inspect.test_tokens import tiny_census

    text = ("Kent's banishment, unbelievable. Fare thee well, King: sith thus thou wilt "
            "appear, freedom lives hence, and banishment is here.")
    _, c = tiny_census(which, text)
    path = write_census(c, tmp_path / "census.html")
    reads = text.lower() if which == "minilm" else text
    with open_report(path) as opened:
        page = opened.page
        cells, marked = [], []
        for table in ("received", "row-table"):
            if table == "row-table":
                page.select_option("[data-el=row]", index=0)
            ctx = page.locator(f"[data-el={table}] td.ctx")
            cells += ctx.all_text_contents()
            marked += page.locator(f"[data-el={table}] td.ctx mark").all_text_contents()
        options = page.locator("[data-el=row] option").all_text_contents()
    assert len(cells) > 10 and len(marked) == len(cells)     # one token marked in each
    for option in options:                  # plain text: the token between white brackets
        assert option == "none kept" or option.count("\u27e6") == option.count("\u27e7") == 1
    for cell, token in zip(cells, marked):
        assert token and token in cell, (cell, token)
        plain = cell.strip("\u2026")
        for special in ("[CLS]", "[SEP]", "</s>"):           # the tokenizers' own markers
            plain = plain.replace(special, "")
        plain = plain.strip()
        assert plain in reads, (which, cell)
