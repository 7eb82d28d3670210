"""A study's workers on Ray (``executor: {ray: ...}``, ``composer optimize --ray``): the driver
(``driver.py``) opens the study and its MLflow parent run, runs N workers as Ray tasks (``worker.py``),
shows their trials and does the end once; set-ups a cluster cannot share are refused first
(``refusals.py``). Ray is imported only here, and only when a study asks for it.
"""
