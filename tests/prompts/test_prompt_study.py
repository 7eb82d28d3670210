"""A team's prompt through the command line: each bad template stops `composer optimize` and `composer
eval --config` before anything is written (exit 2, one line naming file and field), and a study answers
with exactly the team's text (inline, file, registry alias), in Arabic and in English."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pytest
from fake_llm_server import ChatRequest, FakeLLMServer
from sample_study import SAMPLE, write_experiment
from typer.testing import CliRunner

from composer.cli.app import app
from composer.prompts import UserPrompt, register_prompt, set_alias
from composer.record import TrialRecord
from composer.study.experiment import load_experiment

GOOD = {"system": "Team voice. Cite as [1].", "user": "Passages:\n{contexts}\nQuestion: {question}"}
BAD = {
    "missing-question": {"user": "Passages: {contexts}"},
    "missing-contexts": {"user": "Question: {question}"},
    "unknown": {"user": "{contexts} {question} {answer}"},
    "unbalanced": {"user": "{contexts} {question} {oops"},
}


def _bad_experiment(root: Path, prompt: Any, **fields: Any) -> Path:
    return write_experiment(root, dims={"retrieval.k": {"choices": [3]}, "generation.prompt": [prompt]},
                            defaults={"retrieval": {"mode": "bm25"}}, n_questions=4,
                            llm={"model": "openai/fake", "api_base": "http://127.0.0.1:9"}, **fields)


@pytest.mark.parametrize("case", [*BAD, "file", "registry"])
def test_a_bad_prompt_stops_optimize_before_anything_is_written(tmp_path: Path, case: str) -> None:
    prompt: Any = BAD.get(case)
    if case == "file":
        (tmp_path / "p.yaml").write_text("user: \"{question}\"\n", encoding="utf-8")
        prompt = "p.yaml"
    elif case == "registry":
        prompt = "prompts:/answers@champion"
    exp_file = _bad_experiment(tmp_path, prompt)
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line
    assert ("p.yaml" if case == "file" else "space.yaml") in line and "generation.prompt" in line
    work = tmp_path / ".composer"
    assert not (work / "optuna.db").exists() and not (work / "mlflow.db").exists()


@pytest.mark.parametrize("uri", ["prompts:/answers@missing", "prompts:/answers/7"])
def test_a_registry_uri_that_does_not_resolve_in_an_existing_store_stops_optimize(tmp_path: Path, uri: str
                                                                                  ) -> None:
    """The store is there and holds ``answers``, but not that alias or version: one line, nothing written."""
    store_file = tmp_path / "registry.db"
    pinned = register_prompt("answers", UserPrompt.model_validate(GOOD), tracking_uri=f"sqlite:///{store_file}")
    set_alias("answers", "champion", int(pinned.rsplit("/", 1)[1]), f"sqlite:///{store_file}")
    before = store_file.read_bytes()
    exp_file = _bad_experiment(tmp_path, uri, mlflow={"traces": 0, "tracking_uri": f"sqlite:///{store_file}"})
    result = CliRunner().invoke(app, ["optimize", str(exp_file)])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line, result.output
    assert "space.yaml" in line and "generation.prompt" in line and uri in line and "does not resolve" in line
    assert store_file.read_bytes() == before and not (tmp_path / ".composer" / "optuna.db").exists()


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_prompt_stops_eval_config(tmp_path: Path, case: str) -> None:
    config = tmp_path / "pipeline.yaml"
    generation = {"model": "openai/fake", "prompt": BAD[case]}
    config.write_text(json.dumps({"retrieval": {"mode": "bm25"}, "generation": generation}), encoding="utf-8")
    result = CliRunner().invoke(app, ["eval", str(SAMPLE / "questions.jsonl"), "--corpus",
                                      str(SAMPLE / "corpus.jsonl"), "--config", str(config),
                                      "--workdir", str(tmp_path / "work")])
    assert result.exit_code == 2, result.output
    assert str(config) in result.output and "generation.prompt.default" in result.output
    assert not (tmp_path / "work").exists()


@pytest.mark.slow
def test_a_study_sends_exactly_the_team_s_prompt(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'registry.db'}"
    registered = {"ar": {"system": "صوت الفريق.", "user": "المقاطع:\n{contexts}\nالسؤال: {question}"},
                  "en": {"system": "Registry voice.", "user": "Context:\n{contexts}\nAsk: {question}"}}
    set_alias("answers", "candidate", int(register_prompt(
        "answers", UserPrompt.model_validate(registered), tracking_uri=store).rsplit("/", 1)[1]), store)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "a.yaml").write_text(
        "system: File voice.\nuser: \"Docs:\\n{contexts}\\nQ: {question}\"\n", encoding="utf-8")
    seen: list[ChatRequest] = []

    def route(req: ChatRequest) -> str:
        seen.append(req)
        return "An answer."

    questions = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()
    with FakeLLMServer(route) as server:
        exp_file = write_experiment(
            tmp_path, n_questions=4, sampler={"name": "grid", "seed": None}, n_trials=3,
            dims={"generation.prompt": [GOOD, "prompts/a.yaml", "prompts:/answers@candidate"]},
            defaults={"retrieval": {"mode": "bm25", "k": 3}}, objective={"k": 3, "metrics": {"token_f1": 1}},
            llm={"model": "openai/fake", "api_base": server.url}, mlflow={"traces": 0, "tracking_uri": store})
        english = [json.dumps({**json.loads(line), "id": f"en{i}",
                               "question": f"Who is Jamal Khashoggi {i}?"})
                   for i, line in enumerate(questions[:2])]
        (tmp_path / "questions.jsonl").write_text("\n".join([*questions[:2], *english]) + "\n",
                                                  encoding="utf-8")
        result = CliRunner().invoke(app, ["optimize", str(exp_file)])
        assert result.exit_code == 0, result.output
    systems = {r.system.split(" ")[0] for r in seen if "⟦data⟧" in r.prompt}
    assert {"Team", "File", "صوت", "Registry"} <= systems
    for req in seen:
        if req.system.startswith("صوت الفريق."):
            assert req.prompt.startswith("المقاطع:\n⟦data⟧\n[1] ")
        if req.system.startswith("Team voice."):
            assert req.prompt.startswith("Passages:\n⟦data⟧\n[1] ")
    exp = load_experiment(exp_file)
    study = optuna.load_study(study_name="s", storage=exp.storage_url)
    sources = set()
    for trial in study.trials:
        record = TrialRecord.of(trial)
        assert record is not None
        sources.add(record.config["generation"]["prompt"].get("source"))
    assert sources == {None, str(tmp_path / "prompts" / "a.yaml"), "prompts:/answers/1"}
