"""The jobs behind ``attnlab fit forecast|tabular|graph`` and ``attnlab predict``:
load data, evaluate against baselines, fit the final model, write metrics, figures, the model
and its equations into one folder. Every file is written atomically.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np

from attnlab._files import write_text_atomic

Say = Callable[[str], None]


def _quiet(_: str) -> None:
    pass


# ---- reading CSV input ----------------------------------------------------------------------

def read_csv(path: str | Path, what: str = "--csv"):
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} does not exist; give a CSV file")
    try:
        df = pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as err:
        raise ValueError(f"{what} {str(path)!r} is not a readable CSV ({err}); save it as "
                         "comma-separated UTF-8 with a header row") from None
    if df.empty:
        raise ValueError(f"{what} {str(path)!r} has no data rows")
    return df


def _column(df, name: str, option: str, path) -> None:
    if name not in df.columns:
        cols = ", ".join(map(str, df.columns[:20]))
        raise ValueError(f"{option} {name!r} is not a column of {str(path)!r}; its columns are: "
                         f"{cols}")


def series_from_csv(path, target: str, time: str | None = None, exog: list[str] | None = None):
    """``(y Series, X DataFrame or None)`` from a CSV; rows sorted by ``time`` if given."""
    import pandas as pd

    df = read_csv(path)
    _column(df, target, "--target", path)
    for c in exog or []:
        _column(df, c, "--exog", path)
    if time is not None:
        _column(df, time, "--time", path)
        try:
            idx = pd.to_datetime(df[time])
        except (ValueError, TypeError) as err:
            raise ValueError(f"--time column {time!r} does not parse as dates ({err})") from None
        df = df.assign(**{time: idx}).sort_values(time).set_index(time)
    y = pd.to_numeric(df[target], errors="coerce")
    bad = y.isna() & df[target].notna()
    if bad.any():
        raise ValueError(f"--target column {target!r} has non-numeric values, first "
                         f"{df[target][bad].iloc[0]!r}; clean the column first")
    X = df[exog].astype(float) if exog else None
    return y, X


# ---- forecasting ----------------------------------------------------------------------------

def fit_forecast(y, out: str | Path, *, X=None, horizon: int = 12, season: int | None = None,
                 n_origins: int = 10, name: str = "series", say: Say = _quiet,
                 refit: bool = False, **params) -> dict:
    """Backtest (``refit``: a model fitted at every origin), fit on the whole series,
    forecast ahead; write everything under ``out``."""
    import pandas as pd

    from attnlab.models.forecast import AttentionForecaster

    out = Path(out)
    model = AttentionForecaster(horizon=horizon, season=season, **params)
    say(f"backtest: {n_origins} origins, horizon {horizon}, encoder {model.encoder}"
        + (", refitted at every origin" if refit else ""))
    bt = model.backtest(y, X, n_origins=n_origins, refit=refit)
    say("fitting the final model on the whole series")
    model.fit(y, X)
    future = model.predict()
    first_w = model.attention_
    index = getattr(y, "index", None)
    dates = _future_index(index, horizon)
    metrics = {"series": name, "n_obs": int(len(y)), "horizon": horizon,
               "season": season, "lookback": model._lookback, "encoder": model.encoder,
               "n_origins": n_origins, "refit": refit,
               "origins": [_label(index, t) for t in bt.origins],
               "backtest": bt.metrics, "epochs_final": model.history_.epochs,
               "best_epoch_final": model.history_.best_epoch,
               "forecast": {"step": list(range(1, horizon + 1)), "value": future.tolist(),
                            "time": dates}}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    write_text_atomic(out / "backtest.md", bt.table() + "\n")
    write_text_atomic(out / "forecast.csv", pd.DataFrame(
        {"step": range(1, horizon + 1), "time": dates or [""] * horizon,
         "forecast": future}).to_csv(index=False))
    figs = [plot_backtest(y, bt, out / "backtest.png", name),
            plot_forecast_attention(bt, out / "attention.png", index, name),
            plot_future(y, future, first_w, model._lookback, out / "forecast.png", name)]
    write_text_atomic(out / "model.tex", model.to_latex())
    write_text_atomic(out / "model.md", model.to_markdown())
    model.save(out / "model")
    metrics["files"] = [str(p) for p in figs] + [str(out / n) for n in (
        "metrics.json", "backtest.md", "forecast.csv", "model.tex", "model.md", "model")]
    return metrics


def _label(index, i: int) -> str:
    if index is None:
        return str(int(i))
    v = index[int(i)]
    return v.strftime("%Y-%m-%d") if hasattr(v, "strftime") else str(v)


def _future_index(index, horizon: int) -> list[str] | None:
    import pandas as pd

    if not isinstance(index, pd.DatetimeIndex) or len(index) < 3:
        return None
    with warnings.catch_warnings():     # pandas 3 warns that infer_freq will return an offset
        warnings.simplefilter("ignore")
        freq = index.freq or pd.infer_freq(index)
    if freq is None:
        return None
    dates = pd.date_range(index[-1], periods=horizon + 1, freq=freq)[1:]
    return [d.strftime("%Y-%m-%d") for d in dates]


def _x(index, n: int):
    import pandas as pd

    return index if isinstance(index, pd.DatetimeIndex) else np.arange(n)


def plot_backtest(y, bt, path, name: str) -> Path:
    """The series' test part with every origin's forecasts from each method."""
    import matplotlib.pyplot as plt

    from attnlab.plotting import save_figure

    yv = np.asarray(y, dtype=float)
    x = _x(getattr(y, "index", None), len(yv))
    H = bt.actual.shape[1]
    start = max(0, int(bt.origins[0]) - 3 * H)
    colors = {"attention": "#d62728", "seasonal_naive": "#7f7f7f", "naive": "#bcbd22",
              "ets": "#2ca02c", "ar": "#1f77b4"}
    fig, ax = plt.subplots(figsize=(10, 4), dpi=120)
    try:
        ax.plot(x[start:], yv[start:], color="black", linewidth=1.2, label="observed")
        for name_m, fc in bt.forecasts.items():
            for k, t in enumerate(bt.origins):
                ax.plot(x[t:t + H], fc[k], color=colors.get(name_m, None), linewidth=1.1,
                        alpha=0.9, label=f"{name_m} (MASE {bt.metrics[name_m]['MASE']:.2f})"
                        if k == 0 else None, linestyle="-" if name_m == "attention" else "--")
        ax.axvline(x[int(bt.origins[0])], color="#999999", linewidth=0.8)
        ax.set_title(f"{name}: rolling-origin backtest, {len(bt.origins)} origins, horizon {H}")
        ax.set_ylabel(name)
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def plot_forecast_attention(bt, path, index, name: str) -> Path:
    """Heatmap: one row per forecast origin, one column per past step (lag)."""
    from attnlab.plotting import heatmap

    L = bt.attention.shape[1]
    cols = [f"t-{L - j}" if (L - j) % max(1, L // 12) == 0 or j == L - 1 else ""
            for j in range(L)]
    rows = [_label(index, t) for t in bt.origins]
    return heatmap(bt.attention, path, title=f"{name}: attention over the past {L} steps, "
                   "per forecast origin", row_labels=rows, col_labels=cols,
                   xlabel="past time step (lag before the origin)", ylabel="forecast origin",
                   colorbar_label="attention weight", annotate=False,
                   figsize=(min(12.0, 0.22 * L + 3.5), 0.35 * len(rows) + 2.2))


def plot_future(y, future, weights, lookback: int, path, name: str) -> Path:
    """The end of the series, the forecast, and the attention over the window it read."""
    import matplotlib.pyplot as plt

    from attnlab.plotting import save_figure

    yv = np.asarray(y, dtype=float)
    n, H = len(yv), len(future)
    fig, (ax, axw) = plt.subplots(2, 1, figsize=(10, 5), dpi=120, sharex=True,
                                  gridspec_kw={"height_ratios": [3, 1]})
    try:
        start = max(0, n - 2 * lookback)
        ax.plot(range(start - n, 0), yv[start:], color="black", label="observed")
        ax.plot(range(0, H), future, color="#d62728", marker="o", markersize=3,
                label=f"forecast ({H} steps)")
        ax.axvspan(-lookback - 0.5, -0.5, color="#2f6db3", alpha=0.08, label="window read")
        ax.set_title(f"{name}: forecast and the attention over the window it read")
        ax.legend(loc="upper left", fontsize=8)
        axw.bar(range(-lookback, 0), weights, color="#2f6db3", width=0.9)
        axw.set_ylabel("attention")
        axw.set_xlabel("time step relative to the end of the series")
        fig.tight_layout()
        return save_figure(fig, path)
    finally:
        plt.close(fig)


# ---- tables ---------------------------------------------------------------------------------

def infer_task(y) -> str:
    import pandas as pd

    s = pd.Series(y)
    if not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
        return "classification"
    if pd.api.types.is_integer_dtype(s) and s.nunique() <= 20:
        return "classification"
    return "regression"


def baselines(X, task: str, seed: int = 0) -> dict:
    """scikit-learn's usual first models: a linear one (Ridge / logistic regression, on
    standardized numeric and one-hot categorical columns) and HistGradientBoosting."""
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.linear_model import LogisticRegression, Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    from attnlab.models.tabular import _is_categorical

    cats = [c for c in X.columns if _is_categorical(X[c])] if isinstance(X, pd.DataFrame) else []
    prep = StandardScaler()
    if cats:
        nums = [c for c in X.columns if c not in cats]
        prep = ColumnTransformer([("num", StandardScaler(), nums),
                                  ("cat", OneHotEncoder(handle_unknown="ignore"), cats)])
    # HistGradientBoosting takes categorical columns natively from the pandas category dtype
    # (categorical_features="from_dtype"); fit_tabular converts string columns to it.
    if task == "classification":
        linear = ("logistic regression", make_pipeline(prep, LogisticRegression(max_iter=5000)))
        hgb = HistGradientBoostingClassifier(random_state=seed)
    else:
        linear = ("ridge", make_pipeline(prep, Ridge(alpha=1.0)))
        hgb = HistGradientBoostingRegressor(random_state=seed)
    return {linear[0]: linear[1], "hist gradient boosting": hgb}


def fit_tabular(X, y, out: str | Path, *, task: str = "auto", folds: int = 5,
                name: str = "table", say: Say = _quiet, **params) -> dict:
    """Cross-validate against the baselines, fit on all rows, write everything to ``out``."""
    from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score

    from attnlab.models.tabular import FeatureAttentionClassifier, FeatureAttentionRegressor

    import pandas as pd

    out = Path(out)
    if isinstance(X, pd.DataFrame):
        strings = [c for c in X.columns if X[c].dtype == object or pd.api.types.is_string_dtype(
            X[c]) or pd.api.types.is_bool_dtype(X[c])]
        X = X.astype({c: "category" for c in strings})
    task = infer_task(y) if task == "auto" else task
    if task not in ("classification", "regression"):
        raise ValueError(f"--task must be auto, classification or regression, got {task!r}")
    seed = params.get("seed", 0)
    est = (FeatureAttentionClassifier if task == "classification"
           else FeatureAttentionRegressor)(**params)
    scoring = "accuracy" if task == "classification" else "r2"
    cv = (StratifiedKFold if task == "classification" else KFold)(folds, shuffle=True,
                                                                   random_state=seed)
    models = {"attention (FT-Transformer)": est, **baselines(X, task, seed)}
    scores = {}
    for label, m in models.items():
        say(f"{folds}-fold cross-validation: {label}")
        s = cross_val_score(m, X, y, cv=cv, scoring=scoring)
        scores[label] = {"mean": float(s.mean()), "std": float(s.std()), "folds": s.tolist()}
    say("fitting the final model on all rows")
    est.fit(X, y)
    metrics = {"table": name, "task": task, "rows": int(len(X)), "features": int(X.shape[1]),
               "scoring": scoring, "folds": folds, "cv": scores,
               "feature_importance": dict(zip(est.token_names_,
                                              map(float, est.feature_importances_))),
               "epochs_final": est.history_.epochs}
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    figs = [est.plot_importance(out / "importance.png", title=f"{name}: feature importance "
                                "from [CLS] attention"),
            est.plot_attention(X, out / "attention.png", title=f"{name}: attention between "
                               "feature tokens")]
    write_text_atomic(out / "model.tex", est.to_latex())
    write_text_atomic(out / "model.md", est.to_markdown())
    est.save(out / "model")
    metrics["files"] = [str(p) for p in figs] + [str(out / n) for n in (
        "metrics.json", "model.tex", "model.md", "model")]
    return metrics


# ---- graphs ---------------------------------------------------------------------------------

def fit_graph(graph, out: str | Path, *, karate_seeds: int = 0, seed: int = 0,
              **params) -> dict:
    """Fit a GATClassifier on the labelled nodes and write predictions, metrics, figures, the
    model and its equations. With ``karate_seeds`` (the karate club), first run the study of
    :func:`~attnlab.models.graph.karate_study` and fit on the split of ``seed``."""
    from attnlab.models import graph as G

    out = Path(out)
    if karate_seeds:
        study = G.karate_study(n_seeds=karate_seeds, **params)
        mask = np.zeros(graph.num_nodes, dtype=bool)
        mask[study["rows"][seed % karate_seeds]["train_nodes"]] = True
        metrics = {"example": "karate", **study}
    else:
        mask = np.array([v is not None for v in graph.y])
        metrics = {}
    metrics.update(nodes=graph.num_nodes, edges=int(graph.edge_index.shape[1]),
                   labelled=int(mask.sum()))
    clf = G.GATClassifier(seed=seed, **params).fit(graph, mask)
    metrics["train_accuracy"] = clf.score(mask)
    out.mkdir(parents=True, exist_ok=True)
    rows = [f"{n},{p},{int(m)}" for n, p, m in zip(graph.names, clf.predict(), mask)]
    write_text_atomic(out / "predictions.csv", "node,prediction,labelled\n" + "\n".join(rows)
                      + "\n")
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    figs = [G.plot_graph(clf, out / "graph.png", mask),
            G.plot_attention_matrix(clf, out / "attention.png")]
    write_text_atomic(out / "model.tex", clf.to_latex())
    write_text_atomic(out / "model.md", clf.to_markdown())
    clf.save(out / "model")
    metrics["files"] = [str(out / "predictions.csv"), str(out / "metrics.json")] + [
        str(p) for p in figs] + [str(out / n) for n in ("model.tex", "model.md", "model")]
    return metrics


# ---- predicting from a saved model ----------------------------------------------------------

def predict_saved(model_dir, out_csv, *, csv=None, target: str | None = None,
                  time: str | None = None, horizon: int | None = None) -> tuple[Path, int]:
    """Predictions of a saved model into ``out_csv``; returns the path and the row count."""
    import pandas as pd

    from attnlab.models import load
    from attnlab.models.forecast import AttentionForecaster

    model = load(model_dir)
    if isinstance(model, AttentionForecaster):
        if csv is not None:
            if target is None:
                raise ValueError("--target is needed with --csv for a forecaster (the series "
                                 "to continue)")
            y, _ = series_from_csv(csv, target, time)
            pred = model.predict(horizon, y=y.to_numpy())
        else:
            pred = model.predict(horizon)
        frame = pd.DataFrame({"step": range(1, len(pred) + 1), "forecast": pred})
    else:
        if csv is None:
            raise ValueError("--csv is needed: the rows to predict for a tabular model")
        df = read_csv(csv)
        X = df.drop(columns=[target]) if target and target in df.columns else df
        frame = pd.DataFrame({"prediction": model.predict(X)})
        if hasattr(model, "predict_proba"):
            proba = model.predict_proba(X)
            for j, c in enumerate(model.classes_):
                frame[f"p({c})"] = proba[:, j]
    path = write_text_atomic(out_csv, frame.to_csv(index=False))
    return path, len(frame)
