"""The forecasting, table and graph modules moved into models/forecast/, tabular/ and graph/;
their old paths warn, name the new one and the release that removes them, and forward every
name (public and private)."""

import importlib
import sys

import pytest

MOVED = {"bases": "forecast.bases", "baselines": "forecast.baselines",
         "backtest": "forecast.backtest", "ablation": "forecast.ablation",
         "forecast_nets": "forecast.nets", "paper": "forecast.paper",
         "tabular_input": "tabular.inputs", "graph_data": "graph.data",
         "graph_study": "graph.study"}


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


def test_the_table_and_graph_packages_keep_their_names():
    from attnlab.models import FeatureAttentionClassifier, GATClassifier, Graph
    from attnlab.models.graph import GATClassifier as G2
    from attnlab.models.graph import Graph as Gr2
    from attnlab.models.tabular import FeatureAttentionClassifier as F2
    from attnlab.models.tabular import infer_task

    assert GATClassifier is G2 and Graph is Gr2 and FeatureAttentionClassifier is F2
    assert infer_task([0, 1, 1]) == "classification"


def test_the_tables_baselines_moved_to_their_wing_and_the_old_path_still_has_them():
    import warnings

    from attnlab.models.tabular.baselines import tabular_baselines

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("attnlab.models.baselines")
        assert old.tabular_baselines is tabular_baselines
        with pytest.raises(AttributeError, match="has no attribute 'nope'"):
            _ = old.nope
