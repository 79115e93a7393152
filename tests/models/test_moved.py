"""The forecasting modules moved into models/forecast/; their old paths warn, name the new one
and the release that removes them, and forward every name (public and private)."""

import importlib
import sys

import pytest

MOVED = {"bases": "forecast.bases", "baselines": "forecast.baselines",
         "backtest": "forecast.backtest", "ablation": "forecast.ablation",
         "forecast_nets": "forecast.nets", "paper": "forecast.paper"}


@pytest.mark.parametrize("old, new", MOVED.items())
def test_an_old_path_warns_and_forwards(old, new):
    sys.modules.pop(f"attnlab.models.{old}", None)
    with pytest.warns(DeprecationWarning, match=rf"attnlab\.models\.{old} is now "
                      rf"attnlab\.models\.{new}; the old path is removed in attnlab 0\.2\.0"):
        mod = importlib.import_module(f"attnlab.models.{old}")
    target = importlib.import_module(f"attnlab.models.{new}")
    names = [n for n in vars(target) if not n.startswith("__")]
    assert names and all(getattr(mod, n) is getattr(target, n) for n in names)


def test_the_public_paths_are_unchanged():
    from attnlab.models import AttentionForecaster, BacktestResult
    from attnlab.models.forecast import AttentionForecaster as A2
    from attnlab.models.forecast import WindowSettings

    assert AttentionForecaster is A2 and issubclass(A2, WindowSettings)
    assert BacktestResult.__module__ == "attnlab.models.forecast.backtest"
