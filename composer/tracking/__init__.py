"""MLflow tracking: what a study, its trials, a question generation and an evaluation log, and how.

A study's runs are written by ``trial_run.RunWriter``: the parent run (``study_run``, elected through the
Optuna storage: ``parent.ParentClaims``) on a store and MLflow experiment checked first (``setup``), one
nested run per trial and its traces (``traces``); ``writer`` runs it in a process of its own, fed through
the on-disk ``spool`` (read back by ``spooled``). A trial's run is made after Optuna has told its end, from
its ``FrozenTrial``, its ``composer.record.TrialRecord`` and the ``trial.TrialArtifacts`` the runner spooled
under its number. ``read`` finds the runs again for those who read them (the CLI, calibration, the model
registry); ``synth`` logs a question generation, ``evaluation`` one evaluation report. Nothing here
imports ``composer.study`` (``tests/api/test_import_graph.py``), nor is imported by ``import composer``.
"""
