"""The one figure convention: every figure is draw_<what>(obj, ax) -> Axes plus
save_<what>(obj, path); the old names warn for a release."""

import importlib
import inspect
import pkgutil

import attnlab.plots


def _modules():
    return [importlib.import_module(m.name) for m in
            pkgutil.iter_modules(attnlab.plots.__path__, "attnlab.plots.")
            if not m.name.rsplit(".", 1)[1].startswith("_")]


def test_every_save_has_a_draw_and_every_draw_takes_axes():
    pairs = 0
    for mod in _modules():
        public = {n: f for n, f in vars(mod).items()
                  if inspect.isfunction(f) and f.__module__ == mod.__name__
                  and not n.startswith("_")}
        for name, fn in public.items():
            if name.startswith("draw_"):
                params = list(inspect.signature(fn).parameters)
                assert "ax" in params or "axes" in params, (mod.__name__, name, params)
                assert fn.__doc__, (mod.__name__, name)
            if name.startswith("save_") and name not in ("save_figures", "save_heatmaps",
                                                         "save_bench"):
                assert f"draw_{name[5:]}" in public or name == "save_heatmap", (mod.__name__,
                                                                                name)
                pairs += 1
    assert pairs >= 20


def test_a_draw_function_fills_a_callers_subplot():
    import numpy as np
    from matplotlib.figure import Figure

    from attnlab.plots import draw_heatmap

    fig = Figure()
    left, right = fig.subplots(1, 2)
    right.plot([0, 1], [1, 0])
    assert draw_heatmap(np.eye(3), left, title="identity") is left
    assert left.get_title() == "identity" and len(right.lines) == 1
