"""docs/notebooks/inspect.ipynb, executed by nbclient (ipykernel), and two of its inline
reports in one page as a notebook's output area holds them, in real headless Chromium: each
report answers only its own hover, the neuron view's score is the model's pre-softmax score,
and nothing errs or leaves the page."""

from pathlib import Path

import nbclient
import nbformat
import pytest
import torch

from tests.helpers import open_report

pytestmark = pytest.mark.slow

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "notebooks" / "inspect.ipynb"
TEXT = "The animal didn't cross the street because it was too tired."


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "the notebook is stored with its outputs stripped"
    cwd = tmp_path_factory.mktemp("nb")
    with pytest.MonkeyPatch.context() as mp:    # one thread per xdist worker, for the kernel too
        mp.setenv("OMP_NUM_THREADS", "1")
        nbclient.NotebookClient(nb, timeout=240, kernel_name="python3",
                                resources={"metadata": {"path": str(cwd)}}).execute()
    return nb, cwd


def _html_outputs(nb):
    return [o["data"]["text/html"] for c in nb.cells if c.cell_type == "code"
            for o in c.outputs if o.get("output_type") == "execute_result"
            and "text/html" in o.get("data", {})]


def test_the_notebook_runs_and_states_the_numbers(executed):
    nb, cwd = executed
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.outputs if o.get("output_type") == "stream")
    assert "layer 2, head 5: [CLS] takes 64% of the weight" in text
    assert (cwd / "report.html").stat().st_size > 10_000
    htmls = _html_outputs(nb)
    assert len(htmls) == 4 and all("attnlab-report" in h for h in htmls)
    ids = [h.split('class="attnlab-report" id="')[1].split('"')[0] for h in htmls]
    assert len(set(ids)) == 4                                     # one root id per report


def _model_score(layer, head, i, j):
    """q_i . k_j / sqrt(d) of the embedded model, from its hidden states and weights."""
    from attnlab.nn import load_default

    model, tok = load_default()
    batch = tok([TEXT], return_tensors="pt")
    with torch.no_grad():
        res = model(batch["input_ids"], batch["attention_mask"], return_hidden_states=True)
        x = res.hidden_states[layer][0].double()
        mha = model.encoder.layers[layer].self_attn
        e, d = mha.embed_dim, mha.head_dim
        w, b = mha.in_proj_weight.double(), mha.in_proj_bias.double()
        q = x @ w[:e].T + b[:e]
        k = x @ w[e:2 * e].T + b[e:2 * e]
        cols = slice(head * d, (head + 1) * d)
    return float(q[i, cols] @ k[j, cols]) / d ** 0.5


def test_two_reports_in_one_page_in_chromium(executed, tmp_path):
    nb, _ = executed
    first, _, dates, _ = _html_outputs(nb)
    page = tmp_path / "notebook.html"
    # As Jupyter's output area holds them: each fragment in its own output div.
    page.write_text("<!doctype html><html><head><meta charset='utf-8'></head><body>"
                    + "".join(f'<div class="jp-OutputArea-output"><div>{h}</div></div>'
                              for h in (first, dates)) + "</body></html>", encoding="utf-8")
    with open_report(page, viewport=(1300, 1400)) as opened:
        p = opened.page
        a, b = p.locator(".attnlab-report").nth(0), p.locator(".attnlab-report").nth(1)
        before_b = b.locator("[data-el=hv]").get_attribute("data-lines")
        a.locator("[data-el=hv]").scroll_into_view_if_needed()
        a.locator("[data-el=hv-q] .tok[data-index='4']").hover()
        assert a.locator("[data-el=hv]").get_attribute("data-lines") == "q4"
        assert b.locator("[data-el=hv]").get_attribute("data-lines") == before_b == "all"
        # the neuron view of layer 2, head 5, query 4
        a.locator("button.head[data-layer='2'][data-head='5']").click()
        a.locator("[data-el=neuron-query]").select_option("4")
        cells = a.locator("[data-el=neuron-body] tr[data-key] td.score")
        assert cells.count() == 16                                    # the text's tokens
        for j in (0, 3, 7):
            shown = float(cells.nth(j).text_content())
            assert abs(shown - _model_score(2, 5, 4, j)) <= 1e-5, j
        assert not opened.errors, opened.errors
        assert opened.offline(), opened.requests
