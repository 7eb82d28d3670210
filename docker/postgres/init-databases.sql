-- Run by the postgres image on its first start (empty volume). POSTGRES_DB creates `optuna`, the Optuna
-- storage shared by every worker; MLflow's tracking server keeps its runs in a database of its own.
CREATE DATABASE mlflow;
