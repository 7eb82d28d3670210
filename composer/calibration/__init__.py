"""Can the judge be trusted? The sheet people label (``sheet``), the judge's agreement with their labels
(``check``) and the search for a judge that agrees better (``tune``).

Above ``composer.study`` and ``composer.tracking``: a sheet is drawn from a study's trials and a check is
logged to MLflow. The judges themselves (``composer.judges``) only judge.
"""
