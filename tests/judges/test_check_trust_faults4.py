"""`composer judges check` never reports a broken judge as a trusted one (issue 42): the labels used and
those left out are said, by why; the share of the judge's replies that could be read is shown; when most
labels got no verdict of the judge's own the check exits 1 and the agreement that travels says so."""

from __future__ import annotations

import json
from pathlib import Path

from fake_llm_server import ChatRequest, FakeLLMServer
from scripted_llm import kind_of
from typer.testing import CliRunner

from composer.cli.app import app

REFUSAL = "I don't know."


def _labels(path: Path) -> Path:
    """12 answer_correctness labels as in the issue: 4 refusals of an answerable question (scored 0 by a
    rule, never sent to the judge) labelled 0, and 8 answers for the judge."""
    rows = []
    for i in range(12):
        refused = i < 4
        answer = REFUSAL if refused else f"القاهرة هي العاصمة {'BROKEN' if i == 7 else i}"
        rows.append({"id": f"q{i}", "question": f"ما عاصمة مصر رقم {i}؟", "reference_answer": "القاهرة",
                     "answer": answer, "metric": "answer_correctness", "label": 0 if refused else 1})
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _check(labels: Path, url: str, work: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["judges", "check", str(labels), "--judge", "openai/fake", "--llm-base",
                                      url, "--workdir", str(work), *args])
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)  # no crash
    return result.exit_code, result.output


def test_a_judge_whose_replies_cannot_be_read_is_not_trusted(tmp_path: Path) -> None:
    from composer.judges.config import JudgeConfig
    from composer.judges.trust import agreement_warning, latest_check

    def unreadable(_: ChatRequest) -> str:
        return "The answer looks right to me."  # no JSON: every call fails, the fallback scores

    labels, work = _labels(tmp_path / "labels.jsonl"), tmp_path / "work"
    with FakeLLMServer(unreadable) as server:
        code, output = _check(labels, server.url, work, "--out", str(tmp_path / "out"))
        url = server.url
    said = " ".join(output.split())
    assert code == 1, output  # before: exit 0 and "all (kappa) n=4 accuracy 1.00"
    assert "answer_correctness: 0 of 12 labels used; left out: 8 the judge failed (bad_response)" in said
    assert "4 scored by a rule without asking the judge (refusal of an answerable question)" in said
    assert "answer_correctness: judge replies read: 0 of 8 calls (0%)" in said
    assert "answer_correctness: NOT TRUSTED: 12 of 12 labels got no verdict of the judge's own" in said
    assert "Traceback" not in output

    check = json.loads((tmp_path / "out" / "check.json").read_text(encoding="utf-8"))["metrics"][
        "answer_correctness"]
    assert (check["n"], check["labels_total"], check["trusted"]) == (0, 12, False)
    assert check["left_out"]["the judge failed (bad_response)"]["count"] == 8
    assert (check["replies_read"], check["replies"]) == (0, 8)
    judged = (tmp_path / "out" / "judged.csv").read_text(encoding="utf-8")
    assert judged.count(",the judge failed (bad_response),") == 8  # each label says why it was left out

    judge = JudgeConfig(model="openai/fake", api_base=url, metrics=("answer_correctness",))
    stored = latest_check(judge, None, work)["answer_correctness"]
    assert stored is not None and stored["trusted"] is False
    warning = str(agreement_warning(judge, None, work))
    assert "agrees poorly" in warning and "on 0 labels of 12, not trusted" in warning


def test_a_judge_that_reads_most_labels_is_trusted_and_says_what_it_left_out(tmp_path: Path) -> None:
    def mostly(req: ChatRequest) -> str:
        assert kind_of(req) == "correctness"
        if "BROKEN" in json.dumps(req.messages):  # the repair request too
            return "no JSON here"  # one answer the judge cannot read
        return json.dumps({"answer": [1], "reference": [1]})

    labels, work = _labels(tmp_path / "labels.jsonl"), tmp_path / "work"
    with FakeLLMServer(mostly) as server:
        code, output = _check(labels, server.url, work, "--json")
    check = json.loads(output.splitlines()[-1])["metrics"]["answer_correctness"]
    assert code == 0, output
    assert check["trusted"] is True and check["untrusted"] is None
    assert (check["labels_total"], check["n"], check["accuracy"]) == (12, 7, 1.0)
    assert check["left_out"]["the judge failed (bad_response)"]["ids"] == ["q7"]
    assert check["left_out"]["scored by a rule without asking the judge (refusal of an answerable question)"][
        "ids"] == ["q0", "q1", "q2", "q3"]


def test_dash_e_is_an_experiment_yaml_and_the_mlflow_name_has_its_own_option(tmp_path: Path) -> None:
    from mlflow import MlflowClient
    from sample_study import write_experiment

    from composer.study.experiment import load_experiment

    def supported(req: ChatRequest) -> str:
        return json.dumps({"verdicts": [1], "reason": "مدعوم"})

    rows = [{"id": f"q{i}", "question": f"س{i}؟", "answer": "القاهرة", "contexts": ["القاهرة عاصمة مصر"],
             "metric": "faithfulness", "label": 1} for i in range(3)]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (tmp_path / "exp").mkdir()
    exp = load_experiment(write_experiment(tmp_path / "exp", name="checked"))
    work = tmp_path / "work"

    def runs(uri: str, name: str) -> int:
        found = MlflowClient(uri).get_experiment_by_name(name)
        return 0 if found is None else len(MlflowClient(uri).search_runs([found.experiment_id]))

    with FakeLLMServer(supported) as server:
        code, output = _check(labels, server.url, work, "-e", str(tmp_path / "exp" / "experiment.yaml"))
        assert code == 0, output  # before: "-e" was no option of `judges check`
        assert runs(exp.tracking_uri, exp.mlflow_experiment) == 1  # the experiment's store and name
        uri = f"sqlite:///{tmp_path}/checks.db"
        code, output = _check(labels, server.url, work, "--mlflow-experiment", "judge-checks",
                              "--tracking-uri", uri)
        assert code == 0 and "deprecated" not in output, output
        code, output = _check(labels, server.url, work, "--experiment", "judge-checks", "--tracking-uri", uri)
    assert code == 0, output  # the old spelling, for one release
    assert "warning: --experiment judge-checks as an MLflow experiment name is deprecated" in output
    assert runs(uri, "judge-checks") == 2
