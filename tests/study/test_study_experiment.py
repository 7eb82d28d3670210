"""Experiment files, question splits, samplers and pruners built from them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data.types import Question, QuestionSet
from composer.errors import ConfigError, InputError
from composer.evaluation.splits import SplitConfig, split_questions
from composer.pipeline.config import PipelineConfig
from composer.study._sampling import ConditionalGridSampler, make_pruner, make_sampler
from composer.study.experiment import load_experiment, locate_study
from composer.study.space_file import load_search_space, parse_search_space
from composer.tracking.trial_run import RunWriter
from composer.tracking.writer import StudyTracker, WriterSettings

MINIMAL = "name: demo\ncorpus: data/corpus.jsonl\nquestions: data/q.jsonl\nsearch_space: space.yaml\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_paths_are_relative_to_the_file_and_defaults_live_in_the_workdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp_file = write(tmp_path / "exps" / "e.yaml", MINIMAL)
    monkeypatch.chdir(tmp_path)
    exp = load_experiment(exp_file)
    assert exp.corpus == tmp_path / "exps" / "data" / "corpus.jsonl"
    assert exp.search_space == tmp_path / "exps" / "space.yaml"
    assert exp.work_dir == tmp_path / "exps" / ".composer"  # beside the file, not in the current directory
    assert exp.storage_url == f"sqlite:///{tmp_path / 'exps' / '.composer' / 'optuna.db'}"
    assert exp.tracking_uri == f"sqlite:///{tmp_path / 'exps' / '.composer' / 'mlflow.db'}"
    assert exp.mlflow_experiment == "demo"
    assert (exp.sampler.name, exp.pruner.name, exp.n_trials) == ("auto", "median", 20)
    assert exp.objective.metrics == {"recall": 1.0, "ndcg": 1.0, "answer_correctness": 1.0,
                                     "faithfulness": 1.0}


def test_full_experiment(tmp_path: Path) -> None:
    exp = load_experiment(write(tmp_path / "e.yaml", MINIMAL + (
        "objective: {k: 5, metrics: {recall: 2, ndcg: 1}, secondary: [latency_ms]}\n"
        "sampler: {name: nsga2, seed: 3, population_size: 8}\n"
        "pruner: hyperband\n"
        "n_trials: null\ntimeout: 60\n"
        "split: {held_out: 0.2, seed: 1}\n"
        "storage: postgresql://user:pw@db/optuna\n"
        "mlflow: {tracking_uri: 'http://mlflow:5000', experiment: rag, traces: 0}\n"
        "qdrant: 'http://qdrant:6333'\nworkdir: work\n"
    )))
    assert exp.multi_objective and exp.secondary_directions() == ["minimize"]
    assert exp.sampler.options == {"population_size": 8}
    assert exp.pruner.name == "hyperband" and exp.pruner.options == {}
    assert exp.work_dir == tmp_path / "work"
    assert exp.storage_url == "postgresql://user:pw@db/optuna"
    assert exp.tracking_uri == "http://mlflow:5000" and exp.mlflow_experiment == "rag"


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("n_trials: null\n", None, "needs an end"),
        ("objective: {k: 0}\n", "objective.k", "greater than or equal to 1"),
        ("objective: {metrics: {recall: -1}}\n", "objective", "weights must be >= 0"),
        ("sampler: cmaes\n", "sampler.name", "Input should be"),
        ("split: {held_out: 1.5}\n", "split.held_out", "less than 1"),
        ("n_trails: 5\n", "n_trails", "unknown key"),
        ("objective: {secondary: [cost]}\n", "objective.secondary.0", "Input should be"),
    ],
)
def test_bad_experiments_name_the_field(tmp_path: Path, extra: str, field: str | None, message: str) -> None:
    path = write(tmp_path / "e.yaml", MINIMAL + extra)
    with pytest.raises(ConfigError, match=message) as err:
        load_experiment(path)
    assert err.value.path == str(path)
    if field is not None:
        assert err.value.field == field


def test_every_config_file_reports_a_bad_value_alike(tmp_path: Path) -> None:
    """Experiment, search space and pipeline config: the key, the message without pydantic's noise
    ("Value error, ..."), the value given."""
    def experiment(extra: str) -> Callable[[], object]:
        return lambda: load_experiment(write(tmp_path / "e.yaml", MINIMAL + extra))

    too_small = "Input should be greater than or equal to 1 (got 0)"
    cases: list[tuple[Callable[[], object], str, str]] = [
        (experiment("n_trials: 0\n"), "n_trials", too_small),
        (experiment("objective: {metrics: {recall: -1}}\n"), "objective",
         "weights must be >= 0 with a positive sum (check ['recall'])"),
        (lambda: parse_search_space({"defaults": {"retrieval": {"k": 0}},
                                     "dimensions": {"retrieval.mode": {"choices": ["bm25"]}}}),
         "defaults.retrieval.k", too_small),
        (lambda: parse_search_space({"dimensions": {"retrieval.k": {"choices": [0]}}}),
         "dimensions.retrieval.k.choices", too_small),
        (lambda: PipelineConfig.from_dict({"retrieval": {"k": 0}}), "retrieval.k", too_small),
    ]
    for load, field, message in cases:
        with pytest.raises(ConfigError) as err:
            load()
        assert (err.value.field, err.value.message) == (field, message)


def test_missing_and_malformed_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_experiment(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_experiment(write(tmp_path / "list.yaml", "- 1\n"))


def test_locate_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exp_file = write(tmp_path / "e.yaml", MINIMAL + "storage: sqlite:////x/y.db\n")
    assert locate_study(None, exp_file, None)[:2] == ("demo", "sqlite:////x/y.db")
    assert locate_study("other", exp_file, "sqlite:////z.db")[:2] == ("other", "sqlite:////z.db")
    assert locate_study("s", None, None)[:2] == ("s", f"sqlite:///{tmp_path / '.composer' / 'optuna.db'}")
    with pytest.raises(ConfigError, match="name the study"):
        locate_study(None, None, None)


@pytest.mark.parametrize("url, reason", [
    ("bogus://u:pw@host/db", "Can't load plugin"),
    ("not a url", "Could not parse"),
    ("postgresql+psycopg2://u:pw@127.0.0.1:1/db", "Connection refused"),
])
def test_a_storage_that_cannot_be_opened_is_one_error_line_without_its_password(
    url: str, reason: str
) -> None:
    result = CliRunner().invoke(app, ["trials", "demo", "--storage", url])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: field 'storage': cannot open the Optuna storage")
    assert reason in result.output and ":pw@" not in result.output


def test_an_mlflow_store_that_cannot_be_used_is_an_input_error_without_its_password(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"cannot use the MLflow store bogus://\*\*\*@host") as err:
        RunWriter("bogus://u:pw@host", "demo", "demo", storage=f"sqlite:///{tmp_path / 'o.db'}")
    assert err.value.field == "mlflow.tracking_uri" and ":pw@" not in str(err.value)
    # Through the writer process too: the study learns it before its first trial.
    tracker = StudyTracker(WriterSettings("bogus://u:pw@host", "demo", "demo", spool=tmp_path / "spool",
                                          storage=f"sqlite:///{tmp_path / 'o.db'}"))
    with pytest.raises(InputError, match=r"cannot use the MLflow store bogus://\*\*\*@host") as err:
        tracker.ready()
    tracker.close()
    assert ":pw@" not in str(err.value)


def test_ui_never_prints_a_store_password() -> None:
    result = CliRunner().invoke(app, ["ui", "--tracking-uri", "http://me:pw@mlflow.example:5000"])
    assert result.exit_code == 0 and result.output == "MLflow server: http://***@mlflow.example:5000\n"


def questions(n: int) -> QuestionSet:
    return QuestionSet([Question(id=f"q{i}", question=f"question {i}") for i in range(n)], "mem")


def test_split_is_seeded_disjoint_and_keeps_file_order() -> None:
    qs = questions(100)
    selection, held = split_questions(qs, SplitConfig(held_out=0.3, seed=4))
    assert held is not None and (len(selection), len(held)) == (70, 30)
    assert {q.id for q in selection}.isdisjoint(q.id for q in held)
    ids = [q.id for q in selection]
    assert ids == sorted(ids, key=lambda x: int(x[1:]))
    again, _ = split_questions(qs, SplitConfig(held_out=0.3, seed=4))
    other, _ = split_questions(qs, SplitConfig(held_out=0.3, seed=5))
    assert [q.id for q in again] == ids and [q.id for q in other] != ids
    # Reordering the file does not move questions across the split.
    reversed_qs = QuestionSet(qs.questions[::-1], "mem")
    _, held_reversed = split_questions(reversed_qs, SplitConfig(held_out=0.3, seed=4))
    assert held_reversed is not None and {q.id for q in held_reversed} == {q.id for q in held}
    assert split_questions(qs, None) == (qs, None)
    with pytest.raises(ConfigError, match="leaves a side empty"):
        split_questions(questions(1), SplitConfig(held_out=0.3))


def test_samplers_and_pruners(tmp_path: Path, repo_root: Path) -> None:
    space = load_search_space(repo_root / "search_spaces" / "arabic-offline.yaml")
    exp = load_experiment(write(tmp_path / "e.yaml", MINIMAL))
    assert isinstance(make_sampler(exp, space, 0), optuna.samplers.TPESampler)
    multi = load_experiment(write(tmp_path / "m.yaml", MINIMAL + "objective: {secondary: [latency_ms]}\n"))
    assert isinstance(make_sampler(multi, space, 0), optuna.samplers.NSGAIISampler)
    grid = load_experiment(write(tmp_path / "g.yaml", MINIMAL + "sampler: grid\n"))
    assert isinstance(make_sampler(grid, space, 0), ConditionalGridSampler)
    bad = load_experiment(write(tmp_path / "b.yaml", MINIMAL + "sampler: {name: tpe, n_startup: 3}\n"))
    with pytest.raises(ConfigError, match="bad option for the tpe sampler") as err:
        make_sampler(bad, space, 0)
    assert err.value.field == "sampler"

    median = make_pruner(exp.pruner)
    assert isinstance(median, optuna.pruners.MedianPruner)
    nop = load_experiment(write(tmp_path / "n.yaml", MINIMAL + "pruner: none\n"))
    assert isinstance(make_pruner(nop.pruner), optuna.pruners.NopPruner)
    bad_pruner = MINIMAL + "pruner: {name: percentile, percentile: 101}\n"
    wrong = load_experiment(write(tmp_path / "w.yaml", bad_pruner))
    with pytest.raises(ConfigError, match="bad option for the percentile pruner"):
        make_pruner(wrong.pruner)


def test_a_resumed_random_sampler_does_not_replay_its_proposals(tmp_path: Path, repo_root: Path) -> None:
    space = load_search_space(repo_root / "search_spaces" / "arabic-offline.yaml")
    exp = load_experiment(write(tmp_path / "r.yaml", MINIMAL + "sampler: {name: random, seed: 0}\n"))

    def proposals(offset: int) -> list[dict[str, object]]:
        study = optuna.create_study(sampler=make_sampler(exp, space, offset))
        out = []
        for _ in range(3):
            trial = study.ask()
            space.sample(trial)
            out.append(trial.params)
            study.tell(trial, 0.0)
        return out

    assert proposals(0) == proposals(0)
    assert proposals(0) != proposals(3)


def test_the_persian_demo_loads_without_its_data(repo_root: Path) -> None:
    """PersianQA (GPL-3.0) is not shipped: the experiment and its space load and sample without it, and
    point at the folder the README tells users to download it to (which git ignores)."""
    exp = load_experiment(repo_root / "experiments" / "persian-demo.yaml")
    assert exp.corpus == repo_root / "examples" / "persianqa" / "corpus.jsonl"
    assert exp.search_space == repo_root / "search_spaces" / "persian-offline.yaml"
    assert "examples/persianqa/" in (repo_root / ".gitignore").read_text(encoding="utf-8").splitlines()
    space = load_search_space(exp.search_space)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    analyzers = set()
    for _ in range(40):
        trial = study.ask()
        config = space.sample(trial)
        if config.retrieval.mode != "dense":
            analyzers.add(config.retrieval.analyzer)
        study.tell(trial, 0.0)
    assert analyzers == {"default", "rishe"}
