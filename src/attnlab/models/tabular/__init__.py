"""Tables: attention over feature tokens (FT-Transformer) with a scikit-learn interface.

* ``estimator``: :class:`FeatureAttentionClassifier`, :class:`FeatureAttentionRegressor`;
* ``inputs``: their table input (column types, category codes, checks), ``infer_task``.
"""

from attnlab.models.tabular.estimator import FeatureAttentionClassifier, FeatureAttentionRegressor
from attnlab.models.tabular.inputs import TableInput, infer_task, is_categorical, task_reason

__all__ = ["FeatureAttentionClassifier", "FeatureAttentionRegressor", "TableInput",
           "infer_task", "is_categorical", "task_reason"]
