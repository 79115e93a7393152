"""Table input of the feature-attention estimators: which columns are numeric and which
categorical, category codes (0 = unknown), the quantile transform of numeric columns, and
the checks at fit and predict time. A mixin: the estimator holds the fitted state
(``num_columns_``, ``cat_columns_``, ``categories_``, ``quantile_``, ``from_frame_``).
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.base import is_regressor
from sklearn.preprocessing import QuantileTransformer
from sklearn.utils.validation import column_or_1d, validate_data


def is_categorical(series) -> bool:
    """Whether a column is treated as categorical: category, object, string or bool dtype."""
    import pandas as pd

    dt = series.dtype
    return (isinstance(dt, pd.CategoricalDtype) or pd.api.types.is_object_dtype(dt)
            or pd.api.types.is_string_dtype(dt) or pd.api.types.is_bool_dtype(dt))


def infer_task(y) -> str:
    """``"classification"`` for non-numeric or bool targets, integer targets with at most 20
    values, and numeric targets of exactly two values (0/1 stored as floats); else
    ``"regression"``. :func:`task_reason` says which rule decided."""
    return task_reason(y)[0]


def task_reason(y) -> tuple[str, str]:
    """``(task, why)``: :func:`infer_task`'s answer and the rule that gave it, in words."""
    import pandas as pd

    s = pd.Series(y)
    k = s.nunique()
    if not pd.api.types.is_numeric_dtype(s) or pd.api.types.is_bool_dtype(s):
        return "classification", "the target is not numeric"
    if k == 2:
        values = ", ".join(map(str, sorted(s.dropna().unique())))
        return "classification", f"the target has two values ({values})"
    if pd.api.types.is_integer_dtype(s) and k <= 20:
        return "classification", f"the target holds integers with {k} values (at most 20)"
    return "regression", f"the target is numeric with {k} values"


class TableInput:
    """Fit-time and predict-time input of a table estimator (see the module docstring)."""

    def _learn_columns(self, X) -> None:
        """At fit time, from a DataFrame: which columns are numeric, which categorical, and
        each categorical column's categories (code 0 is kept for unknown values)."""
        import pandas as pd

        self.feature_names_in_ = np.asarray([str(c) for c in X.columns], dtype=object)
        self.n_features_in_ = X.shape[1]
        self.cat_columns_ = [str(c) for c in X.columns if is_categorical(X[c])]
        self.num_columns_ = [str(c) for c in X.columns if str(c) not in self.cat_columns_]
        self.categories_ = {str(c): sorted({str(v) for v in X[c].astype("object")
                                            if not pd.isna(v)})
                            for c in X.columns if str(c) in self.cat_columns_}

    def _encode_frame(self, X) -> tuple[np.ndarray, np.ndarray]:
        """A DataFrame with the learned columns -> (numeric array, category codes)."""
        import pandas as pd

        X = X.rename(columns=str)
        try:
            num = X[self.num_columns_].to_numpy(dtype=float)
        except (TypeError, ValueError) as err:
            raise ValueError(f"numeric columns {self.num_columns_} must hold numbers ({err})"
                             ) from None
        bad = np.argwhere(~np.isfinite(num))
        if bad.size:
            raise ValueError(f"X has a missing or infinite value in numeric column "
                             f"{self.num_columns_[bad[0][1]]!r} (row {bad[0][0]}); fill or "
                             "drop it first")
        codes = np.zeros((len(X), len(self.cat_columns_)), dtype=np.int64)
        for j, c in enumerate(self.cat_columns_):
            lookup = {v: i + 1 for i, v in enumerate(self.categories_[c])}   # 0 = unknown
            codes[:, j] = [0 if pd.isna(v) else lookup.get(str(v), 0)
                           for v in X[c].astype("object")]
        return num, codes

    def _tensors(self, num: np.ndarray, codes: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Quantile-normalized numeric features and category codes on the model's device."""
        if num.shape[1]:
            num = self.quantile_.transform(num)
        x_num = torch.tensor(num, dtype=torch.float32, device=self.device_)
        x_cat = torch.tensor(codes, dtype=torch.long, device=self.device_)
        return x_num, x_cat

    def _fit_input(self, X, y) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        """Validate X and y at fit time, learn the columns and the quantile transform."""
        import pandas as pd

        self.from_frame_ = isinstance(X, pd.DataFrame) and any(is_categorical(X[c])
                                                              for c in X.columns)
        if self.from_frame_:
            y = column_or_1d(np.asarray(y), warn=True)
            if len(y) != len(X):
                raise ValueError(f"X has {len(X)} rows but y has {len(y)}")
            self._learn_columns(X)
            num, codes = self._encode_frame(X)
        else:
            X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=is_regressor(self))
            self.num_columns_ = [str(c) for c in getattr(
                self, "feature_names_in_", [f"x{j}" for j in range(X.shape[1])])]
            self.cat_columns_, self.categories_ = [], {}
            num, codes = X, np.zeros((len(X), 0), dtype=np.int64)
        n_q = max(2, min(1000, len(num)))
        self.quantile_ = QuantileTransformer(n_quantiles=n_q, output_distribution="normal",
                                             subsample=10**9, random_state=self.seed)
        if num.shape[1]:
            self.quantile_.fit(num)
        return (*self._tensors(num, codes), y)

    def _input(self, X) -> tuple[torch.Tensor, torch.Tensor]:
        """Validate X against what fit saw -> (x_num, x_cat)."""
        import pandas as pd

        if self.from_frame_:
            if not isinstance(X, pd.DataFrame):
                raise ValueError("this model was fitted on a DataFrame with categorical "
                                 f"columns {self.cat_columns_}; pass a DataFrame with the "
                                 "same columns")
            return self._tensors(*self._encode_frame(self._columns_by_name(X)))
        if isinstance(X, pd.DataFrame) and hasattr(self, "feature_names_in_"):
            X = self._columns_by_name(X)
            num = X.to_numpy(dtype=float) if all(
                pd.api.types.is_numeric_dtype(X[c]) for c in X.columns) else None
            if num is not None:
                bad = np.argwhere(~np.isfinite(num))
                if bad.size:
                    raise ValueError(f"X has a missing or infinite value in column "
                                     f"{str(X.columns[bad[0][1]])!r} (row {bad[0][0]}); fill "
                                     "or drop it first")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return self._tensors(X, np.zeros((len(X), 0), dtype=np.int64))

    def _columns_by_name(self, X):
        """The fitted columns of the DataFrame ``X``, in the fitted order: columns are matched
        by name; a missing one or one the model does not know is an error naming it."""
        names = [str(c) for c in self.feature_names_in_]
        have = [str(c) for c in X.columns]
        missing = [c for c in names if c not in have]
        extra = [c for c in have if c not in names]
        if missing:
            raise ValueError(f"X lacks column(s) {missing} seen in fit; got columns {have}. "
                             "Pass the fitted columns (matched by name, in any order)")
        if extra:
            raise ValueError(f"X has column(s) {extra} the model was not fitted on; drop them "
                             f"(the fitted columns are {names})")
        return X.rename(columns=str)[names]
