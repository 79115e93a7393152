"""The table and graph jobs: ``fit tabular`` and ``fit graph``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from attnlab._files import write_text_atomic
from attnlab.cli.jobs.folder import Say, check_out, quiet, result_folder
from attnlab.cli.jobs.paper import (
    graph_paper,
    table_paper,
)


def fit_tabular(X, y, out: str | Path, *, task: str = "auto", folds: int = 5,
                name: str = "table", say: Say = quiet, **params) -> dict:
    """Cross-validate against the baselines, fit on all rows, write everything to ``out``."""
    import pandas as pd
    from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score

    from attnlab.models.tabular import (
        FeatureAttentionClassifier,
        FeatureAttentionRegressor,
        task_reason,
    )
    from attnlab.models.tabular.baselines import tabular_baselines
    from attnlab.plots.tabular import save_feature_attention, save_importance

    out = Path(out)
    check_out(out)
    if isinstance(X, pd.DataFrame):
        strings = [c for c in X.columns if X[c].dtype == object or pd.api.types.is_string_dtype(
            X[c]) or pd.api.types.is_bool_dtype(X[c])]
        X = X.astype({c: "category" for c in strings})
    if task == "auto":
        task, why = task_reason(y)
        other = "regression" if task == "classification" else "classification"
        say(f"task: {task}, inferred because {why}; pass --task {other} to override")
    if task not in ("classification", "regression"):
        raise ValueError(f"--task must be auto, classification or regression, got {task!r}")
    seed = params.get("seed", 0)
    est = (FeatureAttentionClassifier if task == "classification"
           else FeatureAttentionRegressor)(**params)
    scoring = "accuracy" if task == "classification" else "r2"
    cv = (StratifiedKFold if task == "classification" else KFold)(folds, shuffle=True,
                                                                   random_state=seed)
    # the fast baselines first: a table they cannot take fails in seconds, not after the network
    models = {**tabular_baselines(X, task, seed), "attention (FT-Transformer)": est}
    scores = {}
    for label, m in models.items():
        say(f"{folds}-fold cross-validation: {label}")
        try:
            s = cross_val_score(m, X, y, cv=cv, scoring=scoring, error_score="raise")
        except (ValueError, TypeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"the {label} model failed on this table in cross-validation "
                             f"({first}); --drop the column it names, or clean it") from None
        scores[label] = {"mean": float(s.mean()), "std": float(s.std()), "folds": s.tolist()}
    say("fitting the final model on all rows")
    est.fit(X, y)
    metrics = {"table": name, "task": task, "rows": int(len(X)), "features": int(X.shape[1]),
               "scoring": scoring, "folds": folds, "cv": scores,
               "feature_importance": dict(zip(est.token_names_,
                                              map(float, est.feature_importances_))),
               "epochs_final": est.history_.epochs}
    with result_folder(out) as d:
        write_text_atomic(d / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        figs = [save_importance(est, d / "importance.png", title=f"{name}: feature importance "
                                "from [CLS] attention"),
                save_feature_attention(est, X, d / "attention.png", title=f"{name}: attention "
                                       "between feature tokens")]
        write_text_atomic(d / "model.tex", est.to_latex())
        write_text_atomic(d / "model.md", est.to_markdown())
        est.save(d / "model")
        table_paper(d / "paper", est, metrics)
    metrics["files"] = [str(out / Path(p).name) for p in figs] + [str(out / n) for n in (
        "metrics.json", "model.tex", "model.md", "model", "paper")]
    return metrics


# ---- graphs ---------------------------------------------------------------------------------

def fit_graph(graph, out: str | Path, *, karate_seeds: int = 0, seed: int = 0,
              **params) -> dict:
    """Fit a GATClassifier on the labelled nodes and write predictions, metrics, figures, the
    model and its equations. With ``karate_seeds`` (the karate club), first run the study of
    :func:`~attnlab.models.graph.study.karate_study` and fit on the split of ``seed``."""
    from attnlab.models.graph import GATClassifier
    from attnlab.models.graph.study import karate_study
    from attnlab.plots.graph import save_attention_matrix, save_graph

    out = Path(out)
    check_out(out)
    if karate_seeds:
        study = karate_study(n_seeds=karate_seeds, **params)
        mask = np.zeros(graph.num_nodes, dtype=bool)
        mask[study["rows"][seed % karate_seeds]["train_nodes"]] = True
        metrics = {"example": "karate", **study}
    else:
        from attnlab.models.graph.study import holdout_study

        mask = np.array([v is not None for v in graph.y])
        metrics = {"holdout": holdout_study(graph, mask, seed=seed, **params)}
    metrics.update(nodes=graph.num_nodes, edges=int(graph.edge_index.shape[1]),
                   labelled=int(mask.sum()))
    clf = GATClassifier(seed=seed, **params).fit(graph, mask)
    metrics["train_accuracy"] = clf.score(mask)
    rows = [f"{n},{p},{int(m)}" for n, p, m in zip(graph.names, clf.predict(), mask)]
    with result_folder(out) as d:
        write_text_atomic(d / "predictions.csv", "node,prediction,labelled\n"
                          + "\n".join(rows) + "\n")
        write_text_atomic(d / "metrics.json", json.dumps(metrics, indent=2) + "\n")
        figs = [save_graph(clf, d / "graph.png", mask),
                save_attention_matrix(clf, d / "attention.png")]
        write_text_atomic(d / "model.tex", clf.to_latex())
        write_text_atomic(d / "model.md", clf.to_markdown())
        clf.save(d / "model")
        graph_paper(d / "paper", clf, metrics)
    metrics["files"] = [str(out / "predictions.csv"), str(out / "metrics.json")] + [
        str(out / Path(p).name) for p in figs] + [str(out / n) for n in ("model.tex", "model.md",
                                                                          "model")]
    return metrics
