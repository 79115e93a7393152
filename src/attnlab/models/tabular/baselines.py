"""The baselines a table model is measured against: scikit-learn's usual first models."""

from __future__ import annotations


def tabular_baselines(X, task: str, seed: int = 0) -> dict:
    """scikit-learn's usual first models: a linear one (Ridge / logistic regression, on
    standardized numeric and one-hot categorical columns) and HistGradientBoosting."""
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    from attnlab.models.tabular.inputs import is_categorical

    cats = [c for c in X.columns if is_categorical(X[c])] if isinstance(X, pd.DataFrame) else []
    prep = StandardScaler()
    if cats:
        nums = [c for c in X.columns if c not in cats]
        prep = ColumnTransformer([("num", StandardScaler(), nums),
                                  ("cat", OneHotEncoder(handle_unknown="ignore"), cats)])
    # HistGradientBoosting takes categorical columns natively from the pandas category dtype
    # (categorical_features="from_dtype"); give string columns that dtype first.
    if task == "classification":
        linear = ("logistic regression", make_pipeline(prep, LogisticRegression(max_iter=5000)))
        hgb = HistGradientBoostingClassifier(random_state=seed)
    else:
        linear = ("ridge", make_pipeline(prep, Ridge(alpha=1.0)))
        hgb = HistGradientBoostingRegressor(random_state=seed)
    return {linear[0]: linear[1], "hist gradient boosting": hgb}
