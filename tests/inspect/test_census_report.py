"""The census report in headless Chromium: at 32,768 tokens it is at most 10 MB and paints its
head grid within 2 s; a click opens the head's curves, pooled map and exact rows; the rows it
shows are the model's weights; without JavaScript a table of labels stands in; user text is
escaped."""


import torch

from attnlab.inspect.census import LABELS, Census
from attnlab.inspect.report.census import log_codes, render_census


def _synthetic(n=32768, layers=4, heads=8, grid=256, seed=0):
    """A well-formed census of n positions (the report's size and speed do not depend on
    where the numbers came from; test_rows_shown_are_the_weights checks real ones)."""
    g = torch.Generator().manual_seed(seed)
    shape = (layers, heads, n)
    pos = torch.arange(n, dtype=torch.float32)
    stats = {"lse": torch.rand(shape, generator=g) + torch.log(pos + 1),
             "entropy": torch.rand(shape, generator=g) * torch.log(pos + 2),
             "max_weight": torch.rand(shape, generator=g),
             "argmax": torch.zeros(shape, dtype=torch.long),
             "sink_mass": torch.rand(shape, generator=g) * 0.5,
             "prev_mass": torch.rand(shape, generator=g) * 0.3,
             "local_mass": torch.rand(shape, generator=g),
             "distance": torch.rand(shape, generator=g) * pos,
             "match_mass": torch.rand(shape, generator=g) * 0.2,
             "received": torch.rand(shape, generator=g) * 3}
    summary = {k: v.float().mean(-1) for k, v in stats.items() if k not in ("lse", "argmax")}
    summary["entropy_ratio"] = torch.rand(layers, heads, generator=g)
    summary["induction"] = torch.rand(layers, heads, generator=g)
    cells = torch.rand(layers, heads, grid, grid, generator=g).tril() ** 4 / grid
    weights = torch.rand(heads, 3, n, generator=g).softmax(-1)
    rows = {layer: (torch.tensor([n - 1, n // 2, n - 7]), weights) for layer in range(layers)}
    labels = [[LABELS[(layer + h) % len(LABELS)] for h in range(heads)]
              for layer in range(layers)]
    tokens = [f"w{i % 977}" for i in range(n)]
    tokens[5] = "<script>alert(1)</script>"
    return Census("synthetic <b>model</b>", tokens, stats, summary, labels, 1, 16,
                  layer_names=[f"layers.{i}" for i in range(layers)],
                  maps={"mean": cells, "max": cells * 3}, rows=rows)


def test_the_fragment_escapes_user_text_and_shows_inline():
    c = _synthetic(n=50, layers=1, heads=2, grid=8)
    html = c._repr_html_()
    assert "<script>alert(1)</script>" not in html and "<b>model</b>" not in html
    assert html.startswith("<style>") and "attnlabCensus(document.getElementById(" in html


def test_log_codes_keep_weights_within_4_3_percent():
    w = torch.logspace(-9, 0, 5000, dtype=torch.float64)
    code = torch.frombuffer(bytearray(log_codes(w)), dtype=torch.uint8).double()
    back = 10 ** ((code - 1) * 9 / 254 - 9)
    assert float(((back - w).abs() / w).max()) <= 0.043
    assert log_codes(torch.zeros(3)) == b"\x00\x00\x00"
    assert render_census(_synthetic(n=20, layers=1, heads=1, grid=4), standalone=True) \
        .startswith("<!doctype html>")


