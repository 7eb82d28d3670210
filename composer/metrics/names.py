"""A metric's name where "@" is refused: MLflow's metric and feedback names. Here, below the judges and the
MLflow writer, because a human label read back from an MLflow trace is matched to its metric by this name."""

from __future__ import annotations

import re

_METRIC_NAME = re.compile(r"[^\w\-. /]")


def mlflow_metric_name(name: str) -> str:
    """MLflow rejects "@": ``recall@10`` is logged as ``recall_at_10``."""
    return _METRIC_NAME.sub("_", name.replace("@", "_at_"))
