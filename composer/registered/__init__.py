"""A registered Composer model as files: the pyfunc class MLflow loads (``mlflow_model``), the files it is
opened from without MLflow (``model_files``) and the manifest they are verified against (``manifest``).

It sits below ``composer.study``, which registers models, and ``composer.serve``, which serves them.
"""
