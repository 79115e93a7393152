"""FeatureAttentionClassifier / Regressor: scikit-learn's estimator checks, DataFrames with
categorical columns, attention-based importance, save -> load."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer
from sklearn.utils.estimator_checks import parametrize_with_checks

from attnlab.models import FeatureAttentionClassifier, FeatureAttentionRegressor, load
from attnlab.plots.tabular import save_feature_attention, save_importance

SMALL = dict(d_token=16, n_blocks=1, nhead=2, max_epochs=40, patience=5, lr=3e-3)


@parametrize_with_checks([FeatureAttentionClassifier(**SMALL), FeatureAttentionRegressor(**SMALL)])
def test_sklearn_estimator_checks(estimator, check):
    # Every check scikit-learn applies to these estimators runs; none is excluded.
    check(estimator)


def _frame(n=240, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"age": rng.normal(40, 10, n), "income": rng.lognormal(3, 1, n),
                      "noise": rng.normal(size=n),
                      "city": pd.Categorical(rng.choice(["north", "south", "east"], n)),
                      "member": rng.choice([True, False], n)})
    logit = (X["age"] - 40) / 5 + np.where(X["city"] == "north", 2.0, -1.0)
    y = np.where(logit > 0, "yes", "no")
    return X, y


def test_dataframe_with_categorical_columns_and_importance():
    X, y = _frame()
    clf = FeatureAttentionClassifier(**SMALL).fit(X, y)
    assert clf.cat_columns_ == ["city", "member"] and clf.num_columns_ == ["age", "income", "noise"]
    assert list(clf.classes_) == ["no", "yes"]
    assert clf.score(X, y) > 0.9
    imp = clf.feature_importances_
    assert imp.shape == (5,) and imp.sum() == pytest.approx(1) and (imp > 0).all()
    fa = clf.feature_attention(X)
    assert fa.shape == (6, 6) and np.allclose(fa.sum(axis=1), 1, atol=1e-5)
    assert np.allclose(clf.attention_importance(X), imp, atol=1e-6)   # same rows
    # Unseen and missing categories go to the shared "unknown" embedding.
    new = X.head(3).copy()
    new["city"] = pd.Categorical(["west", None, "north"])
    assert clf.predict(new).shape == (3,)
    # Column order does not matter; a missing column is named.
    assert np.array_equal(clf.predict(X[X.columns[::-1]]), clf.predict(X))
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['city'\]"):
        clf.predict(X.drop(columns="city"))
    with pytest.raises(ValueError, match="pass a DataFrame"):
        clf.predict(X.to_numpy())
    bad = X.copy()
    bad.loc[3, "age"] = np.nan
    with pytest.raises(ValueError, match="'age' \\(row 3\\)"):
        clf.predict(bad)


def test_sklearn_tools_work():
    X, y = _frame(150)
    clf = FeatureAttentionClassifier(**{**SMALL, "max_epochs": 5})
    assert clone(clf).get_params() == clf.get_params()
    assert cross_val_score(clf, X, y, cv=2).shape == (2,)
    pipe = make_pipeline(FunctionTransformer(lambda d: d.assign(age=d["age"] / 10)), clf)
    assert pipe.fit(X, y).predict(X).shape == (150,)
    grid = GridSearchCV(clf, {"d_token": [8, 16]}, cv=2).fit(X, y)
    means = grid.cv_results_["mean_test_score"]
    assert grid.best_score_ == means.max()
    assert grid.best_params_ == grid.cv_results_["params"][int(means.argmax())]
    # the refitted best model is the seeded fit of those parameters on all rows
    refit = clone(clf).set_params(**grid.best_params_).fit(X, y)
    assert np.array_equal(grid.predict_proba(X), refit.predict_proba(X))


def test_one_class_and_continuous_targets_are_rejected():
    X = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="only one class"):
        FeatureAttentionClassifier(**SMALL).fit(X, np.zeros(20))
    with pytest.raises(ValueError, match="Unknown label type"):
        FeatureAttentionClassifier(**SMALL).fit(X, np.linspace(0, 1, 20))


def test_plots(tmp_path):
    X, y = _frame(120)
    clf = FeatureAttentionClassifier(**{**SMALL, "max_epochs": 5}).fit(X, y)
    for p in (save_importance(clf, tmp_path / "imp.png"),
              save_feature_attention(clf, X, tmp_path / "a.png")):
        assert p.read_bytes()[:4] == b"\x89PNG" and p.stat().st_size > 10_000


def test_save_load_round_trip(tmp_path):
    X, y = _frame()
    clf = FeatureAttentionClassifier(**SMALL).fit(X, y)
    c2 = load(clf.save(tmp_path / "clf"))
    assert isinstance(c2, FeatureAttentionClassifier)
    assert np.array_equal(c2.predict_proba(X), clf.predict_proba(X))
    assert np.array_equal(c2.predict(X), clf.predict(X))
    assert np.array_equal(c2.feature_importances_, clf.feature_importances_)

    rng = np.random.default_rng(0)
    Xn = rng.normal(size=(100, 4))
    yn = Xn @ [1.0, 2.0, 0.0, -1.0] * 100 + 5
    reg = FeatureAttentionRegressor(**SMALL).fit(Xn, yn)
    r2 = FeatureAttentionRegressor.load(reg.save(tmp_path / "reg"))
    assert np.array_equal(r2.predict(Xn), reg.predict(Xn))
    assert reg.score(Xn, yn) > 0.8
    with pytest.raises(ValueError, match="holds a 'FeatureAttentionRegressor'"):
        FeatureAttentionClassifier.load(tmp_path / "reg")
