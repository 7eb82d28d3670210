"""Judges checked against human labels: agreement metrics, labels files and MLflow feedback, `composer
judges check` through a scripted judge (cached: a rerun sends nothing), and the agreement that travels."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer
from typer.testing import CliRunner

from composer.cli.app import app
from composer.errors import InputError
from composer.judges.agreement import accuracy, bootstrap_agreement, cohen_kappa, spearman, terciles
from composer.judges.labels import load_labels

# -- agreement metrics --------------------------------------------------------------------------------


def test_a_constant_judge_has_kappa_0_and_a_judge_returning_the_labels_has_kappa_1() -> None:
    labels = [0, 1] * 25
    assert cohen_kappa(labels, [1] * 50) == 0.0
    assert accuracy(labels, [1] * 50) == 0.5
    assert cohen_kappa(labels, labels) == 1.0
    ratings = [1, 2, 3, 4, 5] * 8
    assert cohen_kappa(ratings, ratings, quadratic=True) == 1.0
    assert cohen_kappa(ratings, [3] * 40, categories=[1, 2, 3, 4, 5], quadratic=True) == 0.0
    assert spearman(ratings, ratings) == pytest.approx(1.0)
    assert math.isnan(spearman(ratings, [3] * 40))


def test_a_judge_flipped_on_a_fifth_of_the_answers_has_the_expected_kappa_within_its_ci() -> None:
    labels = [0, 1] * 50
    judged = [1 - y if i % 5 == 0 else y for i, y in enumerate(labels)]  # 10 passes and 10 fails flipped
    assert accuracy(labels, judged) == pytest.approx(0.8)
    # marginals stay 50/50: chance agreement 0.5, so kappa = (0.8 - 0.5) / (1 - 0.5)
    kappa = cohen_kappa(labels, judged)
    assert kappa == pytest.approx(0.6)
    ci = bootstrap_agreement(labels, judged, [0, 1])
    assert ci["kappa"][0] < 0.6 < ci["kappa"][1]
    assert ci["accuracy"][0] < 0.8 < ci["accuracy"][1]
    assert ci["kappa"][1] - ci["kappa"][0] < 0.5


def test_quadratic_kappa_weighs_a_near_miss_less_than_a_far_one() -> None:
    labels = [1, 2, 3, 4, 5] * 4
    near = [min(5, y + 1) for y in labels]
    far = [6 - y for y in labels]
    assert cohen_kappa(labels, near, quadratic=True) > 0.5 > cohen_kappa(labels, far, quadratic=True)


def test_length_terciles_split_answers_evenly_by_rank() -> None:
    assert terciles([5, 1, 9, 3, 7, 2]) == [1, 0, 2, 1, 2, 0]


# -- labels files -------------------------------------------------------------------------------------


def _write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_labels_from_csv_take_contexts_as_a_json_list_and_questions_by_id(tmp_path: Path) -> None:
    from composer.data import load_questions

    questions = _write_jsonl(tmp_path / "q.jsonl", [
        {"id": "q1", "question": "ما عاصمة مصر؟", "reference_answer": "القاهرة"}])
    labels = tmp_path / "labels.csv"
    labels.write_text(
        'id,answer,contexts,metric,label\nq1,القاهرة,"[""القاهرة عاصمة مصر"", ""نص"" ]",faithfulness,1\n',
        encoding="utf-8")
    (found,) = load_labels(labels, questions=list(load_questions(questions)))
    assert found.contexts == ("القاهرة عاصمة مصر", "نص")
    assert (found.question, found.reference_answer, found.label) == ("ما عاصمة مصر؟", "القاهرة", 1)


@pytest.mark.parametrize(
    ("row", "field", "words"),
    [
        ({"metric": "faithfulness", "label": 7}, "label", "0/1"),
        ({"metric": "faithfulness", "label": "maybe"}, "label", "'maybe'"),
        ({"metric": "helpfulness", "label": 1}, "metric", "unknown metric"),
        ({"metric": "llm_judge_rating", "label": 0}, "label", "1-5"),
        ({"metric": "faithfulness", "label": 1, "answer": ""}, "answer", "missing answer"),
    ],
)
def test_a_bad_label_row_names_file_line_and_field(
    tmp_path: Path, row: dict[str, object], field: str, words: str
) -> None:
    good = {"id": "q1", "question": "س؟", "answer": "ج", "metric": "faithfulness", "label": 1}
    path = _write_jsonl(tmp_path / "labels.jsonl", [good, {**good, "id": "q2", **row}])
    with pytest.raises(InputError) as caught:
        load_labels(path)
    assert (caught.value.path, caught.value.line, caught.value.field) == (str(path), 2, field)
    assert words in str(caught.value)


def test_a_metric_mixing_pass_fail_and_ratings_is_refused_at_the_zero(tmp_path: Path) -> None:
    rows = [{"id": f"q{i}", "question": "س؟", "answer": "ج", "metric": "answer_correctness", "label": v}
            for i, v in enumerate((4, 0, 5))]
    with pytest.raises(InputError, match="mix 0/1") as caught:
        load_labels(_write_jsonl(tmp_path / "labels.jsonl", rows))
    assert caught.value.line == 2


def test_the_cli_reports_a_bad_labels_file_in_one_line_with_exit_2(tmp_path: Path) -> None:
    path = _write_jsonl(tmp_path / "labels.jsonl", [
        {"id": "q1", "question": "س؟", "answer": "ج", "metric": "faithfulness", "label": "x"}])
    result = CliRunner().invoke(app, ["judges", "check", str(path), "--judge", "openai/fake",
                                      "--workdir", str(tmp_path / "work")])
    assert result.exit_code == 2
    assert f"{path}:1 (field 'label')" in result.output
    assert "Traceback" not in result.output


# -- the check through a scripted judge ---------------------------------------------------------------

WRONG = "خطأ"


def judge_route(req: ChatRequest) -> str:
    """A judge that fails an answer containing WRONG and rates it 2, else passes it and rates it 5."""
    bad = WRONG in req.prompt
    if '"rating"' in req.system:
        return json.dumps({"rating": 2 if bad else 5, "reason": "سبب"})
    if '"verdicts"' in req.system:
        count = len(re.findall(r"^\d+\. ", req.prompt, flags=re.MULTILINE))
        return json.dumps({"verdicts": [0 if bad else 1] * count, "reason": "غير مدعوم" if bad else "مدعوم"})
    raise AssertionError(f"unexpected request: {req.system[:60]}")


def labelled(n: int = 10) -> list[dict[str, object]]:
    """Faithfulness and rating labels; the judge disagrees with the label of every fifth answer."""
    rows: list[dict[str, object]] = []
    for i in range(n):
        bad = i % 2 == 1
        answer = f"القاهرة {'خطأ' if bad else 'صحيح'} {i}" + " جدا" * (i % 3)
        human_bad = bad != (i % 5 == 0)
        common = {"id": f"q{i}", "question": f"ما عاصمة مصر رقم {i}؟", "answer": answer,
                  "contexts": ["القاهرة عاصمة مصر"], "reference_answer": "القاهرة"}
        rows.append({**common, "metric": "faithfulness", "label": 0 if human_bad else 1})
        rows.append({**common, "metric": "llm_judge_rating", "label": 2 if human_bad else 5,
                     "rationale": "قرار بشري"})
    return rows


def test_check_reports_agreement_and_a_rerun_sends_nothing(tmp_path: Path) -> None:
    labels = _write_jsonl(tmp_path / "labels.jsonl", labelled())
    work, out = tmp_path / "work", tmp_path / "out"
    args = ["judges", "check", str(labels), "--judge", "openai/fake", "--workdir", str(work), "--json"]
    with FakeLLMServer(judge_route) as server:
        first = CliRunner().invoke(app, [*args, "--llm-base", server.url, "--out", str(out)])
        assert first.exit_code == 0, first.output
        assert server.chat_requests == 20  # one verdict call per short answer, one rating call
        server.reset_counts()
        again = CliRunner().invoke(app, [*args, "--llm-base", server.url])
        assert again.exit_code == 0, again.output
        assert server.chat_requests == 0
    result = json.loads(first.stdout)
    faith = result["metrics"]["faithfulness"]
    assert faith["n"] == 10 and faith["accuracy"] == pytest.approx(0.8)
    assert faith["kappa"] == pytest.approx(cohen_kappa(
        [int(str(r["label"])) for r in labelled() if r["metric"] == "faithfulness"],
        [int(WRONG not in str(r["answer"])) for r in labelled() if r["metric"] == "faithfulness"]), abs=1e-4)
    assert faith["ci"]["kappa"][0] <= faith["kappa"] <= faith["ci"]["kappa"][1]
    assert faith["confusion"] == [[4, 1], [1, 4]]
    assert set(faith["by_language"]) == {"ar"} and set(faith["by_length"]) == {"short", "medium", "long"}
    assert sum(g["n"] for g in faith["by_length"].values()) == 10
    rating = result["metrics"]["llm_judge_rating"]
    assert rating["scale"] == "ordinal" and rating["categories"] == [1, 2, 3, 4, 5]
    assert len(rating["worst"]) == 2 and {w["reason"] for w in rating["worst"]} == {"rated 2.0/5: سبب",
                                                                                     "rated 5.0/5: سبب"}
    assert json.loads((out / "check.json").read_text(encoding="utf-8"))["judge"] == "openai/fake"
    assert (out / "judged.csv").read_text(encoding="utf-8").count("\n") == 21
    assert json.loads(again.stdout)["metrics"]["faithfulness"]["kappa"] == faith["kappa"]


def test_check_prints_a_table_logs_an_mlflow_run_and_its_agreement_travels(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from composer.judges.config import JudgeConfig
    from composer.judges.trust import agreement_warning, latest_check

    labels = _write_jsonl(tmp_path / "labels.jsonl", labelled())
    work = tmp_path / "work"
    judge = JudgeConfig(model="openai/fake", metrics=("faithfulness",))
    assert "never checked" in str(agreement_warning(judge, None, work))
    assert "composer judges check" in str(agreement_warning(judge, None, work))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with FakeLLMServer(judge_route) as server:
        url = server.url
        result = CliRunner().invoke(app, [
            "judges", "check", str(labels), "--judge", "openai/fake", "--llm-base", url,
            "--metrics", "faithfulness", "--workdir", str(work), "--mlflow-experiment", "judge-checks",
            "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    assert "faithfulness" in result.output and "Worst disagreements" in result.output
    checked = JudgeConfig(model="openai/fake", api_base=url, metrics=("faithfulness",))
    found = latest_check(checked, None, work)["faithfulness"]
    assert found is not None and found["n"] == 10 and found["kappa"] == pytest.approx(0.6)
    assert agreement_warning(checked, None, work) is None
    assert "kappa 0.60" in str(agreement_warning(checked, None, work, min_kappa=0.7))
    other_model = JudgeConfig(model="openai/other", api_base=url, metrics=("faithfulness",))
    assert latest_check(other_model, None, work) == {"faithfulness": None}
    client = MlflowClient(uri)
    checks = client.get_experiment_by_name("judge-checks")
    assert checks is not None
    (run,) = client.search_runs([checks.experiment_id])
    assert run.data.metrics["faithfulness.all.kappa"] == pytest.approx(0.6)


# -- labels from MLflow human feedback ----------------------------------------------------------------


def test_human_feedback_on_mlflow_traces_becomes_labels(tmp_path: Path) -> None:
    import mlflow
    from mlflow.entities import AssessmentSource, AssessmentSourceType, SpanType

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.create_experiment("study")
    human = AssessmentSource(AssessmentSourceType.HUMAN, "reviewer@example.com")
    judge = AssessmentSource(AssessmentSourceType.LLM_JUDGE, "openai/fake")
    ids = []
    for n in range(2):
        root = mlflow.start_span_no_context("question", span_type=SpanType.CHAIN, experiment_id=experiment,
                                            inputs={"question": f"سؤال {n}؟", "question_id": f"q{n}"})
        child = mlflow.start_span_no_context("retrieve", span_type=SpanType.RETRIEVER, parent_span=root,
                                             inputs={"query": "x"})
        child.end(outputs=[{"id": "d1#0", "page_content": f"مقطع {n}", "metadata": {}}])
        root.end(outputs={"answer": f"جواب {n}"})
        ids.append(root.trace_id)
    mlflow.flush_trace_async_logging()
    mlflow.log_feedback(trace_id=ids[0], name="faithfulness", value=0.3, source=judge)  # not a person's
    mlflow.log_feedback(trace_id=ids[0], name="faithfulness", value=True, source=human, rationale="مدعوم")
    mlflow.log_feedback(trace_id=ids[1], name="faithfulness", value=True, source=human)
    mlflow.log_feedback(trace_id=ids[1], name="faithfulness", value=False, source=human)  # changed mind
    mlflow.log_expectation(trace_id=ids[1], name="expected_response", value="مرجع")
    mlflow.log_feedback(trace_id=ids[1], name="helpfulness", value=True, source=human)  # no judged metric
    out = tmp_path / "labels.jsonl"
    result = CliRunner().invoke(app, ["judges", "labels", str(out), "--experiment", "study",
                                      "--tracking-uri", uri])
    assert result.exit_code == 0, result.output
    rows = {r["id"]: r for r in map(json.loads, out.read_text(encoding="utf-8").splitlines())}
    assert rows[ids[0]] == {"id": ids[0], "question": "سؤال 0؟", "answer": "جواب 0", "contexts": ["مقطع 0"],
                            "metric": "faithfulness", "label": 1, "rationale": "مدعوم"}
    assert (rows[ids[1]]["label"], rows[ids[1]]["reference_answer"]) == (0, "مرجع")
    assert [lb.label for lb in load_labels(out)] == [rows[i]["label"] for i in rows]


def test_a_judge_that_passes_long_answers_shows_its_bias_in_the_length_terciles(tmp_path: Path) -> None:
    """People fail every answer with WRONG; the judge passes any answer over six words: it agrees on the
    short third and not on the long one."""
    from composer.calibration.check import check
    from composer.judges.config import JudgeConfig

    def long_lover(req: ChatRequest) -> str:
        (statement,) = re.findall(r"^1\. (.+)$", req.prompt, flags=re.MULTILINE)
        return json.dumps({"verdicts": [int(len(statement.split()) > 6 or WRONG not in statement)]})

    rows = [{"id": f"q{i}", "question": f"ما عاصمة مصر رقم {i}؟", "contexts": ["القاهرة عاصمة مصر"],
             "answer": f"القاهرة {WRONG if i % 2 else 'صحيح'} {i}" + " جدا" * (2 * (i // 4)),  # 3, 5, 7 words
             "metric": "faithfulness", "label": int(i % 2 == 0)} for i in range(12)]
    labels = load_labels(_write_jsonl(tmp_path / "labels.jsonl", rows))
    with FakeLLMServer(long_lover) as server:
        judge = JudgeConfig(model="openai/fake", api_base=server.url, metrics=("faithfulness",))
        result = check(labels, judge, workdir=tmp_path / "work", store=False)
    by_length = result.metrics["faithfulness"].by_length
    assert [by_length[t].n for t in ("short", "medium", "long")] == [4, 4, 4]
    assert by_length["short"].kappa == 1.0 and by_length["short"].accuracy == 1.0
    assert by_length["long"].kappa == 0.0 and by_length["long"].accuracy == 0.5
