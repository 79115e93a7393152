"""The forecasting, table and graph modules live in models/forecast/, tabular/ and graph/; the
public names stay importable from attnlab.models, and the old module paths are gone."""

import importlib

import pytest


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


@pytest.mark.parametrize("old", ["bases", "baselines", "backtest", "ablation", "forecast_nets",
                                 "paper", "tabular_input", "graph_data", "graph_study"])
def test_the_old_paths_are_gone(old):
    """0.1.0 was never released: the modules that moved left no forwarding shim behind."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"attnlab.models.{old}")
