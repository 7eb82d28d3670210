"""A model registered by an earlier Composer still loads: MLflow pickled its class as
``composer.serve.mlflow_model.ComposerModel``, which now lives in ``composer.registered.mlflow_model``."""

from __future__ import annotations

import pickle

from composer.registered.mlflow_model import ComposerModel


def test_a_model_pickled_under_the_old_path_unpickles_to_the_class() -> None:
    # protocol 2 names a class as text: "c<module>\n<name>"
    payload = pickle.dumps(ComposerModel(), protocol=2)
    new = b"composer.registered.mlflow_model\nComposerModel\n"
    assert new in payload
    old = payload.replace(new, b"composer.serve.mlflow_model\nComposerModel\n")
    model = pickle.loads(old)
    assert type(model) is ComposerModel
    assert model.pipeline is None
