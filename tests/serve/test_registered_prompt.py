"""The team's own prompt, end to end: a study over three prompts (inline, a file, a registry URI) exports
and registers each trial, and a fresh process sends exactly the trial's prompt: `composer eval --config`
of the exported YAML with no MLflow store reachable, and `models:/NAME@champion` (MLflow's pyfunc loader
and `composer serve`'s) with the registry's prompts deleted. Registration puts an inline or file prompt in
the Prompt Registry as `NAME.answer`, tagged with the study, the trial and the scores, references a
registry prompt without copying it, links the version to the model's run, and the manifest refuses a
model whose prompt text was edited since."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from fake_llm_server import ChatRequest, FakeLLMServer
from sample_study import SAMPLE, write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import ComposerError
from composer.llm.preflight import PING
from composer.prompts import UserPrompt
from composer.prompts.registry import load_registered, register_prompt, set_alias
from composer.record import TrialRecord
from composer.study.experiment import load_experiment

N_QUESTIONS = 4
REPLY = "جواب الفريق"
INLINE = {"system": "أنت مساعد الفريق. استشهد بالمقاطع هكذا [1].", "user": "السؤال: {question}\n\n{contexts}"}
FILE = ("system: Team voice from a file. Cite as [n]; {{braces}} stay literal.\n"
        "user: \"Passages:\\n{contexts}\\n\\nQuestion: {question}\"\n")
REGISTERED = UserPrompt.model_validate({"system": "صوت الفريق من السجل. لا تخترع.",
                                        "user": "{contexts}\n---\n{question}"})
LOAD = """
import json, sys
import mlflow.pyfunc
from composer.serve.engine import load_engine
for uri in sys.argv[2:]:
    mlflow.pyfunc.load_model(uri).predict([sys.argv[1]])
    load_engine(uri).ask(sys.argv[1])
print("done")
"""


@dataclass
class Study:
    root: Path
    exp_file: Path
    tracking: str
    server: FakeLLMServer
    bodies: dict[str, list[dict[str, Any]]]
    """The study's answer requests' messages, by trial label (inline, file, registry)."""
    trials: dict[str, int]
    outputs: dict[str, str]
    """`composer export --register`'s output, by trial label."""


def _label(config: dict[str, Any]) -> str:
    source = config["generation"]["prompt"].get("source")
    return "inline" if source is None else "registry" if source.startswith("prompts:/") else "file"


def _messages(received: list[ChatRequest]) -> list[dict[str, Any]]:
    return [{"messages": r.messages, "model": r.model} for r in received if r.messages != PING]


def _env(tracking: str) -> dict[str, str]:
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "MLFLOW_TRACKING_URI": tracking, "HF_HUB_OFFLINE": "1", "PATH": path,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def _linked(client: Any, run_id: str) -> list[tuple[str, str]]:
    """The prompt versions MLflow shows as linked to run ``run_id`` (its ``mlflow.linkedPrompts`` tag)."""
    tag = client.get_run(run_id).data.tags.get("mlflow.linkedPrompts", "[]")
    return [(p["name"], str(p["version"])) for p in json.loads(tag)]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Study]:
    """A three-trial grid over generation.prompt, each trial exported as m-<label> and promoted."""
    root = tmp_path_factory.mktemp("prompt-study")
    (root / "prompts").mkdir()
    (root / "prompts" / "answer.yaml").write_text(FILE, encoding="utf-8")
    with FakeLLMServer(lambda req: REPLY) as server:
        llm = {"model": "openai/team", "api_base": server.url, "max_retries": 0}
        choices = [INLINE, "prompts/answer.yaml", "prompts:/team-answer@prod"]
        dims = {"generation.prompt": {"choices": choices}}
        exp_file = write_experiment(root, dims=dims, defaults={"retrieval": {"mode": "bm25", "k": 3}},
                                    n_questions=N_QUESTIONS, llm=llm, sampler={"name": "grid", "seed": None},
                                    n_trials=3, objective={"k": 3, "metrics": {"recall": 1, "token_f1": 1}})
        exp = load_experiment(exp_file)
        exp.work_dir.mkdir(parents=True, exist_ok=True)
        uri = register_prompt("team-answer", REGISTERED, tracking_uri=exp.tracking_uri)
        set_alias("team-answer", "prod", int(uri.rsplit("/", 1)[1]), exp.tracking_uri)
        runner = CliRunner()
        result = runner.invoke(app, ["optimize", str(exp_file)])
        assert result.exit_code == 0, result.output
        loaded = optuna.load_study(study_name="s", storage=exp.storage_url)
        bodies: dict[str, list[dict[str, Any]]] = {}
        trials = {}
        for trial in loaded.trials:
            record = TrialRecord.of(trial)
            assert record is not None
            label = _label(dict(record.config))
            trials[label] = trial.number
            prompt = UserPrompt.model_validate(record.config["generation"]["prompt"])
            # its first sentence: the system message is sent fenced, its {{braces}} single
            mark = prompt.for_language("ar").system.split(".")[0]
            bodies[label] = [b for b in _messages(server.received) if mark in b["messages"][0]["content"]]
            assert len(bodies[label]) == N_QUESTIONS, label
        outputs = {}
        for label, number in trials.items():
            result = runner.invoke(app, ["export", "s", "-e", str(exp_file), "--trial", str(number),
                                         "--register", f"m-{label}", "--promote"])
            assert result.exit_code == 0, result.output
            outputs[label] = result.output
        server.reset_counts()
        yield Study(root, exp_file, exp.tracking_uri, server, bodies, trials, outputs)


@pytest.mark.slow
def test_exported_yaml_sends_the_trials_prompt_with_no_mlflow_store(study: Study) -> None:
    for label, number in study.trials.items():
        out = study.root / f"export-{label}" / "best.yaml"
        result = CliRunner().invoke(app, ["export", "s", "-e", str(study.exp_file), "--trial", str(number),
                                          "-o", str(out)])
        assert result.exit_code == 0, result.output
        doc = yaml.safe_load(out.read_text("utf-8"))
        prompt = UserPrompt.model_validate(doc["pipeline"]["generation"]["prompt"])
        header = f"# Prompt: {prompt.source or 'written inline'} (sha256 {prompt.sha256[:12]})"
        assert header in out.read_text("utf-8")
    exported = yaml.safe_load((study.root / "export-registry" / "best.yaml").read_text("utf-8"))
    registry = UserPrompt.model_validate(exported["pipeline"]["generation"]["prompt"])
    assert registry.source == "prompts:/team-answer/1" and registry.version == 1
    assert registry.variants() == REGISTERED.variants()
    study.server.reset_counts()
    unreachable = f"sqlite:///{study.root / 'nowhere' / 'mlflow.db'}"
    for label in study.trials:
        done = subprocess.run(
            [sys.executable, "-m", "composer", "eval", str(study.root / "questions.jsonl"), "--corpus",
             str(SAMPLE / "corpus.jsonl"), "--config", str(study.root / f"export-{label}" / "best.yaml"),
             "--metrics", "answer_refusal_rate"],  # answers, no judge
            cwd=study.root / f"export-{label}", env=_env(unreachable), capture_output=True, text=True,
            timeout=120)  # in the export's folder: a work dir of its own, no reply cached
        assert done.returncode == 0, done.stderr
        sent = _messages(study.server.received)
        assert sorted(map(json.dumps, sent)) == sorted(map(json.dumps, study.bodies[label])), label
        study.server.reset_counts()
    assert not (study.root / "nowhere").exists()


@pytest.mark.slow
def test_python_export_carries_the_prompt_text(study: Study) -> None:
    out = study.root / "best.py"
    result = CliRunner().invoke(app, ["export", "s", "-e", str(study.exp_file), "--trial",
                                      str(study.trials["file"]), "-o", str(out), "--format", "python"])
    assert result.exit_code == 0, result.output
    namespace: dict[str, Any] = {}
    exec(compile(out.read_text("utf-8"), str(out), "exec"), namespace)
    prompt = UserPrompt.model_validate(namespace["CONFIG"]["generation"]["prompt"])
    assert prompt.for_language("en").system == "Team voice from a file. Cite as [n]; {{braces}} stay literal."
    assert f"Prompt: {prompt.source} (sha256 {prompt.sha256[:12]})" in str(namespace["__doc__"])


@pytest.mark.slow
def test_registration_registers_or_references_the_prompt_and_links_it(study: Study) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(study.tracking, registry_uri=study.tracking)
    for label in ("inline", "file"):
        assert f"prompt: prompts:/m-{label}.answer/1 (registered now: " in study.outputs[label]
        registered = load_registered(f"prompts:/m-{label}.answer/1", study.tracking)
        recorded = optuna.load_study(study_name="s", storage=load_experiment(study.exp_file).storage_url)
        record = TrialRecord.of(recorded.trials[study.trials[label]])
        assert record is not None
        trial_prompt = UserPrompt.model_validate(record.config["generation"]["prompt"])
        assert registered.variants() == trial_prompt.variants()
        version = client.get_prompt_version(f"m-{label}.answer", 1)
        assert version.tags["composer.study"] == "s"
        assert version.tags["composer.trial"] == str(study.trials[label])
        scores = json.loads(version.tags["composer.scores"])
        assert set(scores) == {"composite", "recall@3", "token_f1"} and scores["composite"] is not None
        champion = client.get_model_version_by_alias(f"m-{label}", "champion")
        assert champion.tags["composer.prompt.source"] == f"prompts:/m-{label}.answer/1"
        assert champion.tags["composer.prompt.version"] == "1"
        assert champion.tags["composer.prompt.sha256"] == registered.sha256  # the trial run's tag keys
        assert _linked(client, str(champion.run_id)) == [(f"m-{label}.answer", "1")]
        (logged,) = client.search_logged_models([client.get_run(str(champion.run_id)).info.experiment_id],
                                                filter_string=f"source_run_id = '{champion.run_id}'")
        assert f"m-{label}.answer" in logged.tags["mlflow.linkedPrompts"]
    # the registry's prompt is referenced: no new version of it, and no m-registry.answer
    assert "prompt: prompts:/team-answer/1 (referenced" in study.outputs["registry"]
    assert [v.version for v in client.search_prompt_versions("team-answer")] == [1]
    assert client.get_prompt("m-registry.answer") is None
    champion = client.get_model_version_by_alias("m-registry", "champion")
    assert champion.tags["composer.prompt.source"] == "prompts:/team-answer/1"
    assert _linked(client, str(champion.run_id)) == [("team-answer", "1")]


@pytest.mark.slow
def test_champion_sends_the_trials_prompt_with_the_registry_prompts_deleted(study: Study) -> None:
    from mlflow import MlflowClient

    from composer.data import load_questions

    question = load_questions(study.root / "questions.jsonl").questions[0].question
    client = MlflowClient(study.tracking, registry_uri=study.tracking)
    for name in ("team-answer", "m-inline.answer", "m-file.answer"):
        for version in client.search_prompt_versions(name):
            client.delete_prompt_version(name, str(version.version))
        client.delete_prompt(name)
    study.server.reset_counts()
    models = [f"models:/m-{label}@champion" for label in study.trials]
    done = subprocess.run([sys.executable, "-c", LOAD, question, *models], cwd=study.root,
                          env=_env(study.tracking), capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    sent = _messages(study.server.received)
    assert len(sent) == 2 * len(study.trials)  # pyfunc's predict and composer serve's ask, per model
    for label in study.trials:
        system = study.bodies[label][0]["messages"][0]["content"]
        mine = [b for b in sent if b["messages"][0]["content"] == system]
        assert len(mine) == 2 and mine[0] == mine[1], label
        assert mine[0] in study.bodies[label], label


@pytest.mark.slow
def test_a_model_whose_prompt_text_was_edited_is_refused(study: Study, tmp_path: Path) -> None:
    from composer.registered.model_files import composer_artifacts, open_pipeline, registered_folder

    folder = registered_folder("models:/m-inline@champion", study.tracking)
    assert folder is not None
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    artifacts = composer_artifacts(copy)
    assert artifacts is not None
    config_file = Path(artifacts["pipeline"])
    config = json.loads(config_file.read_text("utf-8"))
    prompt = config["generation"]["prompt"]
    assert prompt["source"] == "prompts:/m-inline.answer/1" and prompt["version"] == 1  # text and URI
    prompt["default"]["system"] = "Ignore the passages."
    config_file.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    with pytest.raises(ComposerError, match=r"pipeline\.json differs since it was registered"):
        open_pipeline(artifacts)


def test_a_winner_without_a_prompt_of_its_own_registers_none() -> None:
    from composer.study.registry import _register_prompt

    doc = {"pipeline": {"generation": {"template": "grounded"}}, "scores": {}, "objective": {}}
    assert _register_prompt(doc, "m", "sqlite:///unused.db") == (
        None, "none registered: the winner has no prompt of its own (generation.prompt unset)")
    assert not Path("unused.db").exists()


def test_an_unresolved_prompt_is_never_exported() -> None:
    from composer.errors import InputError
    from composer.study.export import prompt_of

    with pytest.raises(InputError, match="never resolved to its text"):
        prompt_of({"generation": {"prompt": "prompts:/answers@prod"}})
