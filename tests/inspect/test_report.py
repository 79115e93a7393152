"""attnlab inspect end to end: the CLI writes figures and a report that works offline in real
headless Chromium, escapes user text, and opens on a clicked head."""

import json
import os
import shutil

import pytest

from attnlab.cli import main

EVIL = 'He said <script>alert("x")</script> & left.'
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("inspect")
    assert main(["inspect", EVIL, "--pair", "It was <b>bold</b>.", "--out", str(out)]) == 0
    return out


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
    island = page.split('<script type="application/json" id="data">')[1].split("</script>")[0]
    assert "<" not in island
    data = json.loads(island)
    assert data["layers"] == 6 and data["heads"] == 12 and "[SEP]" in data["tokens"]
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")


# On CI (.ci/run installs Debian's chromium) the test always runs; elsewhere it needs chromium.
@pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                    reason="needs Debian's chromium (apt-get install chromium); .ci/run installs it")
def test_report_in_headless_chromium(report, tmp_path):
    from PIL import Image, ImageStat
    from playwright.sync_api import sync_playwright

    url = (report / "report.html").resolve().as_uri()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        page = browser.new_page(viewport={"width": 1300, "height": 1800})
        errors, requests, dialogs = [], [], []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        page.goto(url)
        page.wait_for_selector("button.head canvas")
        assert page.locator("button.head").count() == 72
        page.click("button.head[data-layer='3'][data-head='7']")
        assert page.text_content("#detail-title").startswith("Layer 3, head 7")
        n = len(json.loads(page.text_content("#data"))["tokens"])
        assert page.locator("#detail-svg rect").count() == n * n
        assert page.locator("#detail-metrics tr").count() >= 9
        settings = page.inner_text("#settings")
        assert '<script>alert("x")</script>' in settings           # shown as text
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot))
        browser.close()
    assert errors == [] and dialogs == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    stat = ImageStat.Stat(Image.open(shot).convert("L"))
    assert stat.stddev[0] > 20                                      # not a blank page


def test_corpus_mode_and_usage_errors(tmp_path, capsys):
    corpus = tmp_path / "texts.txt"
    corpus.write_text("The first sentence.\nA second one\twith its pair.\n\nThird!\n")
    assert main(["inspect", "--file", str(corpus), "--out", str(tmp_path / "o")]) == 0
    assert "on 3 text(s)" in " ".join(capsys.readouterr().out.split())
    assert main(["inspect", "x", "--file", str(corpus)]) == 2
    assert main(["inspect", "--file", str(tmp_path / "missing.txt")]) == 2
    assert "cannot read it" in capsys.readouterr().err
    assert main(["inspect", "x", "--model", str(tmp_path)]) == 2
