"""Estimators take their parameters after the first by name (scikit-learn's convention). Every
parameter
has its constraints declared as data, checked by scikit-learn's validation."""

import warnings

import pytest
from sklearn.base import clone

from attnlab.models import (
    AttentionForecaster,
    FeatureAttentionClassifier,
    FeatureAttentionRegressor,
    GATClassifier,
    GlobalForecaster,
    SpatioTemporalForecaster,
)


@pytest.mark.parametrize("cls", [AttentionForecaster, FeatureAttentionClassifier,
                                 GATClassifier, SpatioTemporalForecaster, GlobalForecaster])
def test_parameters_after_the_first_are_keyword_only(cls):
    with pytest.raises(TypeError):
        cls(6, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # by name: no warning
        est = cls(6)
        assert clone(est).get_params() == est.get_params()


def test_the_global_forecaster_is_keyword_only_already():
    with pytest.raises(TypeError):
        GlobalForecaster(6, 12)


ALL = [AttentionForecaster, GlobalForecaster, FeatureAttentionClassifier,
       FeatureAttentionRegressor, GATClassifier, SpatioTemporalForecaster]


@pytest.mark.parametrize("cls", ALL)
def test_every_parameter_has_declared_constraints_and_the_defaults_meet_them(cls):
    est = cls()
    assert set(cls._parameter_constraints) == set(est.get_params())
    est._validate_params()


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("name, value", [("max_epochs", 0), ("lr", 0.0), ("seed", -1),
                                         ("dropout", 1.0), ("verbose", "yes")])
def test_a_value_out_of_its_constraint_is_named_with_what_was_expected(cls, name, value):
    with pytest.raises(ValueError, match=rf"The '{name}' parameter of {cls.__name__} must be "
                       rf".* Got {value!r} instead"):
        cls(**{name: value})._validate_params()
