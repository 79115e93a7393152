"""Applied estimators built on the attention core: time series and tables (scikit-learn
style), with a shared training loop, safetensors save/load and LaTeX equations.

    >>> from attnlab.models import AttentionForecaster, GlobalForecaster, load
"""

from __future__ import annotations

from pathlib import Path

from attnlab.models.forecast import AttentionForecaster, BacktestResult
from attnlab.models.forecast.global_model import GlobalForecaster
from attnlab.models.forecast.spatiotemporal import SpatioTemporalForecaster
from attnlab.models.graph import GATClassifier, Graph
from attnlab.models.seq2seq import ReversalSeq2Seq
from attnlab.models.tabular import FeatureAttentionClassifier, FeatureAttentionRegressor
from attnlab.models.training import TrainConfig, TrainHistory, train

ESTIMATORS = {cls.__name__: cls for cls in (AttentionForecaster, GlobalForecaster,
                                            FeatureAttentionClassifier,
                                            FeatureAttentionRegressor, GATClassifier)}


def load(path: str | Path, device: str | None = None):
    """Load any estimator saved with ``save()``, whichever class it is."""
    from attnlab.models import io

    config = io.read_config(path)
    cls = ESTIMATORS.get(config.get("kind"))
    if cls is None:
        raise ValueError(f"{str(path)!r} holds a {config.get('kind')!r}, which this attnlab "
                         f"does not know (known: {', '.join(ESTIMATORS)})")
    return cls.load(path, device=device)


__all__ = ["AttentionForecaster", "BacktestResult", "GlobalForecaster",
           "FeatureAttentionClassifier", "FeatureAttentionRegressor", "GATClassifier", "Graph",
           "ReversalSeq2Seq", "SpatioTemporalForecaster", "ESTIMATORS", "TrainConfig",
           "TrainHistory", "load", "train"]
