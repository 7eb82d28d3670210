"""MLflow tracking: what a study, its trials, a question generation and an evaluation log, and how.

``runs`` writes the MLflow runs (a study's parent run, one nested run per trial, per-question traces and
assessments); ``writer`` runs it in a process of its own, fed through the on-disk ``spool``; ``synth``
logs a question generation, ``evaluation`` one evaluation report. The parent run is elected through the
Optuna storage (``parent.ParentClaims``); a trial's run is made after Optuna has told its end, from
its ``FrozenTrial``, its ``composer.record.TrialRecord`` and its ``trial.TrialReport``. Nothing here
imports ``composer.study`` (``tests/api/test_import_graph.py``), nor is imported by
``import composer``.
"""
