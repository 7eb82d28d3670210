"""Where models registered by an earlier Composer find their class.

MLflow pickles a pyfunc model's class by its import path, and those models name
``composer.serve.mlflow_model.ComposerModel``; the class now lives in ``composer.registered.mlflow_model``
(below the study, which registers it). Nothing in Composer imports this module: only unpickling does.
"""

from composer.registered.mlflow_model import ComposerModel

__all__ = ["ComposerModel"]
