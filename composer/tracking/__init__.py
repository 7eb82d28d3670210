"""MLflow tracking: what a study, its trials, a question generation and an evaluation log, and how.

``runs`` writes the MLflow runs (a study's parent run, one nested run per trial, per-question traces and
assessments); ``writer`` runs it in a process of its own, fed through the on-disk ``spool``; ``synth``
logs a question generation, ``evaluation`` one evaluation report. The parent run is elected through the
Optuna storage (``parent.ParentClaims``); ``trial.TrialLog`` is what a study hands the writer per
trial. Nothing here imports ``composer.study`` (``tests/test_import_graph.py``), nor is imported by
``import composer``.
"""
