"""Scores by turn (issue 44, point 3): a conversational set's breakdowns with CIs over conversations in
summary.json, the files, the terminal table and MLflow; a standalone set's outputs as they were.

The bundled ARCD sample's questions, chained into conversations by the paragraph they ask about (the
first question on a paragraph is its first turn, the others follow it up), scored from its BM25 ranking
file: no model, no LLM.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from composer.data import Question, QuestionSet, Turn, load_questions, load_ranking_file
from composer.evaluation import EvaluationReport, SampleTable, evaluate_ranking
from composer.evaluation.breakdowns import views
from composer.evaluation.render import render_breakdowns, render_report
from composer.metrics.stats import bootstrap_ci, bootstrap_cis

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "arcd-sample"
KS = (1, 5)
STANDALONE_KEYS = ["n_questions", "match", "ks", "metrics", "ci", "std", "n_scored", "skipped", "errors",
                   "latency_ms"]


def chained(questions: QuestionSet) -> QuestionSet:
    """Each paragraph's questions as one conversation, in file order, each with the ones before as its
    history (user turns, with a short assistant reply between)."""
    seen: dict[str, list[Question]] = {}
    out = []
    for q in questions:
        paragraph = q.relevant_ids[0]
        before = seen.setdefault(paragraph, [])
        history = tuple(t for p in before for t in (Turn("user", p.question), Turn("assistant", "…")))
        out.append(dataclasses.replace(q, conversation_id=paragraph, turn=len(before) + 1, history=history))
        before.append(q)
    return QuestionSet(out, questions.source)


@pytest.fixture(scope="module")
def standalone() -> EvaluationReport:
    questions = load_questions(SAMPLE / "questions.jsonl")
    return evaluate_ranking(questions, load_ranking_file(SAMPLE / "bm25-run.jsonl"), ks=KS)


@pytest.fixture(scope="module")
def talk() -> EvaluationReport:
    questions = chained(load_questions(SAMPLE / "questions.jsonl"))
    return evaluate_ranking(questions, load_ranking_file(SAMPLE / "bm25-run.jsonl"), ks=KS)


def test_the_sample_chains_into_conversations_of_several_turns(talk: EvaluationReport) -> None:
    conversations = talk.summary()["conversations"]
    assert 20 < conversations["n_conversations"] < len(talk)
    assert conversations["n_follow_ups"] == len(talk) - conversations["n_conversations"]
    assert max(talk.table.turns or ()) >= 5  # the 5+ view has turns


def test_breakdowns_are_the_means_of_their_turns(talk: EvaluationReport) -> None:
    table = talk.table
    recall = table.metrics["recall@5"]
    hit = table.metrics["hit_rate@5"]
    follow = np.array(table.follow_ups)
    turns = np.array(table.turns)
    keys = np.array(table.conversations)
    got = talk.summary()["conversations"]
    assert got["metrics"]["recall@5.follow_up"] == pytest.approx(recall[follow].mean())
    assert got["metrics"]["recall@5.first_turn"] == pytest.approx(recall[~follow].mean())
    assert got["metrics"]["recall@5.turn_2"] == pytest.approx(recall[turns == 2].mean())
    assert got["metrics"]["recall@5.turn_5_plus"] == pytest.approx(recall[turns >= 5].mean())
    assert "recall@5.turn_6" not in got["metrics"]
    per_conversation = [recall[keys == k].mean() for k in dict.fromkeys(keys.tolist())]
    assert got["metrics"]["recall@5.conversation"] == pytest.approx(np.mean(per_conversation))
    all_found = [float((hit[keys == k] == 1).all()) for k in dict.fromkeys(keys.tolist())]
    assert got["metrics"]["all_found@5.conversation"] == pytest.approx(np.mean(all_found))
    assert 0 < got["metrics"]["all_found@5.conversation"] < got["metrics"]["hit_rate@5.conversation"]
    assert got["n_scored"]["recall@5.follow_up"] == int(follow.sum())
    assert got["n_scored"]["all_found@5.conversation"] == got["n_conversations"]
    for name, (low, high) in got["ci"].items():
        assert low <= got["metrics"][name] + 1e-12 and got["metrics"][name] <= high + 1e-12, name


def test_intervals_of_a_conversational_set_resample_conversations(talk: EvaluationReport) -> None:
    """The report's own CIs, and each breakdown's, are the cluster bootstrap over the turns' conversations."""
    table = talk.table
    keys = np.array(table.conversations)
    recall = table.metrics["recall@5"]
    assert (talk.stats()["recall@5"].ci_low, talk.stats()["recall@5"].ci_high) == bootstrap_ci(
        recall, groups=keys.tolist()
    )
    assert (talk.stats()["recall@5"].ci_low, talk.stats()["recall@5"].ci_high) != bootstrap_ci(recall)
    follow = np.array(table.follow_ups)
    st = talk.breakdowns()["recall@5.follow_up"]
    assert (st.ci_low, st.ci_high) == bootstrap_ci(recall[follow], groups=keys[follow].tolist())


def test_a_standalone_sets_outputs_are_unchanged(standalone: EvaluationReport, tmp_path: Path) -> None:
    summary = standalone.summary()
    assert [key for key in summary if key not in standalone.meta] == STANDALONE_KEYS
    assert standalone.breakdowns() == {} and standalone.breakdown_means() == {}
    assert standalone.table.conversations is None
    scored = [standalone.values(name) for name in standalone.metric_names]
    assert [list(summary["ci"][name]) for name in standalone.metric_names] == [
        list(ci) for ci in bootstrap_cis(scored)
    ]
    standalone.save(tmp_path)
    header = (tmp_path / "samples.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header.startswith("question_id,question,retrieved_ids,answer,context_tokens,")
    trace = json.loads((tmp_path / "traces.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert list(trace) == ["question_id", "question", "retrieved", "answer", "metrics", "latency", "skipped",
                           "error", "context_tokens", "reasons"]
    assert render_breakdowns(standalone) is None
    assert "over conversations" not in _text(render_report(standalone))


def test_files_carry_each_turns_conversation(talk: EvaluationReport, tmp_path: Path) -> None:
    talk.save(tmp_path)
    samples = pd.read_csv(tmp_path / "samples.csv")
    assert list(samples.columns[:5]) == ["question_id", "question", "conversation", "turn", "follow_up"]
    assert samples["turn"].tolist() == list(talk.table.turns or ())
    assert samples["follow_up"].tolist() == list(talk.table.follow_ups or ())
    lines = (tmp_path / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    traces = [json.loads(line) for line in lines]
    assert [(t["conversation"], t["turn"], t["follow_up"]) for t in traces] == list(
        zip(talk.table.conversations or (), talk.table.turns or (), talk.table.follow_ups or (), strict=True)
    )
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert summary["conversations"]["metrics"]["recall@5.follow_up"] == pytest.approx(
        talk.breakdowns()["recall@5.follow_up"].mean
    )


def test_a_report_read_back_keeps_its_breakdowns_and_an_old_one_has_none(talk: EvaluationReport) -> None:
    """From its records (as files and traces show them), and from a table written before the columns
    existed: each question its own conversation, no breakdowns."""
    again = EvaluationReport(talk.samples, talk.ks, talk.match_mode)
    assert again.breakdown_means() == talk.breakdown_means()
    assert again.stats() == talk.stats()
    old = dataclasses.replace(talk.table, conversations=None, turns=None, follow_ups=None)
    assert EvaluationReport(old, talk.ks, talk.match_mode).breakdowns() == {}
    assert "conversations" not in EvaluationReport(old, talk.ks, talk.match_mode).summary()


def test_batches_of_lone_questions_join_a_conversational_table(talk: EvaluationReport) -> None:
    from composer.evaluation.table import concat_tables

    first, rest = talk.table.head(3), dataclasses.replace(talk.table.head(5), conversations=None, turns=None,
                                                          follow_ups=None)
    joined = concat_tables([first, rest])
    assert joined.conversations == (*talk.table.conversations[:3], *talk.table.question_ids[:5])  # type: ignore[index]
    assert joined.turns == (*talk.table.turns[:3], 1, 1, 1, 1, 1)  # type: ignore[index]
    assert set(views(joined)) >= {"first_turn", "follow_up", "turn_1"}


def test_the_terminal_shows_the_scores_by_turn(talk: EvaluationReport) -> None:
    table = render_breakdowns(talk)
    assert table is not None
    assert [c.header for c in table.columns] == ["metric", "first_turn", "follow_up", "turn_1", "turn_2",
                                                 "turn_3", "turn_4", "turn_5_plus", "conversation"]
    text = _text(table)
    assert f"{talk.breakdowns()['recall@5.follow_up'].mean:.3f}" in text
    assert "all_found" in text and "conversations" in text
    assert "over conversations" in _text(render_report(talk))


def test_mlflow_logs_the_breakdowns_of_an_evaluation(talk: EvaluationReport, tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from composer.tracking.evaluation import log_evaluation

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = log_evaluation(talk, uri, "turns")
    logged = MlflowClient(uri).get_run(run_id).data.metrics
    assert logged["recall_at_5.follow_up"] == pytest.approx(talk.breakdowns()["recall@5.follow_up"].mean)
    assert logged["all_found_at_5.conversation"] == pytest.approx(
        talk.breakdowns()["all_found@5.conversation"].mean
    )
    assert "recall_at_5.turn_5_plus" in logged and "recall_at_5" in logged


def _text(renderable: object) -> str:
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(renderable)
    return out.getvalue()


def test_a_table_without_conversations_has_no_views() -> None:
    assert views(SampleTable(("q",), ("?",))) == {}


def test_the_gate_resamples_the_new_sets_conversations() -> None:
    """New minus baseline over 4 conversations of 10 turns, the gain all in one: as 40 turns the gate
    calls it significant; over conversations it is not."""
    from composer.evaluation.gate import Scores, compare
    from composer.objective import Objective

    ids = tuple(f"q{i}" for i in range(40))
    conversations = tuple(f"c{i // 10}" for i in range(40))
    new = {"recall@5": np.where(np.arange(40) < 10, 1.0, 0.5)}
    old = {"recall@5": np.full(40, 0.5)}
    objective = Objective({"recall@5": 1.0})
    grouped = compare(Scores(ids, new, "new", conversations=conversations),
                      Scores(ids[::-1], {k: v[::-1] for k, v in old.items()}, "old"),
                      objective, metric="recall@5", margin=0.0)
    alone = compare(Scores(ids, new, "new"), Scores(ids, old, "old"), objective, metric="recall@5",
                    margin=0.0)
    assert alone.ci95[0] > 0 and "significantly better" in alone.reason
    assert grouped.ci95[0] == 0.0 and "no significant drop" in grouped.reason
    assert grouped.difference == alone.difference


def test_the_held_out_verdict_resamples_conversations(monkeypatch: pytest.MonkeyPatch) -> None:
    """``held_out`` reads the held-out report's conversations: its CI is the cluster bootstrap's."""
    from types import SimpleNamespace

    from composer.objective import Objective
    from composer.study import finish

    conversations = tuple(f"c{i // 10}" for i in range(40))
    columns = [{"recall@5": np.where(np.arange(40) < 10, 1.0, 0.5)}, {"recall@5": np.full(40, 0.5)}]

    def report(metrics: dict[str, np.ndarray]) -> EvaluationReport:
        table = SampleTable(tuple(f"q{i}" for i in range(40)), ("?",) * 40, metrics=metrics,
                            conversations=conversations, turns=(1,) * 40, follow_ups=(False,) * 40)
        return EvaluationReport(table, (5,), "document")

    trials = [SimpleNamespace(number=n, params={}) for n in (3, 7)]
    monkeypatch.setattr(finish, "ranked_trials", lambda study: trials)
    monkeypatch.setattr(finish.TrialRecord, "of", lambda t: SimpleNamespace(composite=0.6, config_hash="h"))
    scored = iter(SimpleNamespace(report=report(c)) for c in columns)
    objective = Objective({"recall@5": 1.0})
    data = SimpleNamespace(rebuild=lambda params, config_hash: None,
                           score=lambda pipeline, questions, batch_size: next(scored), objective=objective)
    held = finish.held_out(None, [None] * 40, data, Console(file=io.StringIO()))  # type: ignore[arg-type]
    assert held is not None and held.difference is not None
    expected = objective.difference(columns[0], columns[1], conversations)
    assert held.difference.ci95 == expected[1]
    assert held.difference.ci95 != objective.difference(columns[0], columns[1])[1]
    assert not held.difference.winner_really_better


def test_a_trial_run_logs_the_breakdowns_of_its_spooled_report(
    talk: EvaluationReport, tmp_path: Path
) -> None:
    """Through the spool (the conversation columns survive it) into the trial's MLflow run."""
    from ended_trials import ended_trial
    from writer_logs import runs_by_trial, writer_for

    from composer.tracking.spool import Spool, read_record

    table = talk.table.head(20)
    report = EvaluationReport(dataclasses.replace(table, retrieved=None), talk.ks, talk.match_mode)
    trial, artifacts = ended_trial(0, {"retrieval": {"mode": "bm25", "k": 5}}, "COMPLETE",
                                   metrics={"composite": 0.5, **report.means()}, report=report)
    spool = Spool(tmp_path / "spool")
    back = read_record(spool.put_artifacts(0, artifacts), spool.tables, {})
    assert back.report.table.conversations == table.conversations
    assert back.report.table.turns == table.turns and back.report.table.follow_ups == table.follow_ups
    writer_for(tmp_path).write_trial(trial, back)
    logged = runs_by_trial(tmp_path)[0].data.metrics
    expected = report.breakdown_means()
    assert logged["recall_at_5.follow_up"] == pytest.approx(expected["recall@5.follow_up"])
    assert logged["all_found_at_1.conversation"] == pytest.approx(expected["all_found@1.conversation"])
