"""Estimators take their parameters after the first by name (scikit-learn's convention);
by position they still work until 0.2.0, with a FutureWarning that names them."""

import warnings

import pytest
from sklearn.base import clone

from attnlab.models import (
    AttentionForecaster,
    FeatureAttentionClassifier,
    GATClassifier,
    GlobalForecaster,
    SpatioTemporalForecaster,
)


@pytest.mark.parametrize("cls, second", [(AttentionForecaster, "lookback"),
                                         (FeatureAttentionClassifier, "n_blocks"),
                                         (GATClassifier, "heads"),
                                         (SpatioTemporalForecaster, "lookback")])
def test_a_parameter_after_the_first_by_position_warns_and_still_works(cls, second):
    with pytest.warns(FutureWarning, match=rf"pass {second} by name \({second}=4\); "
                      r"parameters after the first are keyword-only from attnlab 0\.2\.0"):
        est = cls(6, 4)
    assert est.get_params()[second] == 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # by name: no warning
        by_name = cls(6, **{second: 4})
        assert clone(by_name).get_params() == by_name.get_params()
    with pytest.raises(TypeError, match="by position and by name"):
        cls(6, 4, **{second: 5})


def test_the_global_forecaster_is_keyword_only_already():
    with pytest.raises(TypeError):
        GlobalForecaster(6, 12)
