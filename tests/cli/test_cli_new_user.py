"""What a new user hits first (issue 18: 1, 5, 6, 7, 8; issue 19.8): a rank-only run scored in its own order,
a run's answers graded and judged, failed samples listed instead of ending the eval, the work dir found from
the experiment file, verdicts acted on, ties broken by cost, small or broken studies flagged, flags that
take no value and private exported files."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer, Reply, rate_limited
from sample_study import SAMPLE, write_experiment, write_space
from scripted_llm import ScriptedRAG, kind_of
from typer.testing import CliRunner

from composer.cli.app import app
from composer.data import Hit, Question, QuestionSet, load_questions, load_ranking_file, read_ranking_file
from composer.data.ranking import ChunkTable, ranking_from_hits
from composer.errors import InputError
from composer.evaluation import evaluate_ranking

# A call the server keeps refusing gives up after its retries at once (Retry-After 10 ms, not the backoff).
REFUSED = rate_limited(0.01)


def _questions(*relevant: str) -> QuestionSet:
    return QuestionSet([Question(f"q{i}", f"question {i}?", relevant_ids=(r,))
                        for i, r in enumerate(relevant)])


# -- 18.1: a run is ranked in the order given where its scores say nothing --------------------------------


def test_a_rank_only_run_keeps_its_order_and_trec_order_is_kept_for_scored_runs() -> None:
    """All scores 0 (a rank-only retriever): re-sorting by id descending put "b" before the relevant "a"."""
    questions = _questions("a", "a")
    rank_only = {"q0": [Hit("a", 0.0), Hit("b", 0.0)], "q1": [Hit("a", 0.0), Hit("b", 0.0)]}
    assert evaluate_ranking(questions, rank_only, ks=[1]).means()["hit_rate@1"] == 1.0
    # trec_eval's order on request: ties by id descending, "b" first
    assert evaluate_ranking(questions, rank_only, ks=[1], order="score").means()["hit_rate@1"] == 0.0
    # a scored run keeps trec_eval's convention: equal top scores ordered by id descending
    scored = {"q0": [Hit("a", 1.0), Hit("b", 1.0), Hit("c", 0.5)], "q1": [Hit("a", 2.0), Hit("b", 1.0)]}
    assert evaluate_ranking(questions, scored, ks=[1]).values("hit_rate@1").tolist() == [0.0, 1.0]


def test_a_re_sort_that_moves_items_is_said_with_the_count_and_the_way_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    questions = _questions("a", "a", "a")
    run = {
        "q0": [Hit("a", 1.0), Hit("b", 2.0)],  # moved by the score
        "q1": [Hit("a", 2.0), Hit("b", 1.0)],  # already in trec order
        "q2": [Hit("a", 0.0), Hit("b", 0.0)],  # rank-only: kept
    }
    with caplog.at_level(logging.WARNING, logger="composer"):
        report = evaluate_ranking(questions, run, ks=[1])
    assert report.values("hit_rate@1").tolist() == [0.0, 1.0, 1.0]
    warned = [r.getMessage() for r in caplog.records if "re-sorted by score" in r.getMessage()]
    assert len(warned) == 1 and warned[0].startswith("1 of 3 questions re-sorted by score")
    assert "--order given" in warned[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="composer"):
        given = evaluate_ranking(questions, run, ks=[1], order="given")
    assert given.values("hit_rate@1").tolist() == [1.0, 1.0, 1.0]
    assert not [r for r in caplog.records if "re-sorted" in r.getMessage()]


def test_the_ranking_keeps_scores_with_their_items_in_the_given_order() -> None:
    table = ChunkTable(("a", "b", "c"), ("a", "b", "c"), ("", "", ""))
    ranking = ranking_from_hits({"q": [Hit("a", 0.0), Hit("c", 0.0)]}, ["q"], table)
    assert [h.id for h in ranking.hits(0)] == ["a", "c"]


def test_a_json_run_may_leave_scores_out_and_give_answers(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    lines = [{"id": "q1", "results": [{"id": "d2"}, {"id": "d1"}], "answer": "yes"},
             {"id": "q2", "results": [{"id": "d1", "score": 3}]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    given = read_ranking_file(path)
    assert [h.id for h in given.hits["q1"]] == ["d2", "d1"] and given.answers == {"q1": "yes"}
    assert load_ranking_file(path) == given.hits
    path.write_text(json.dumps({"id": "q1", "results": [{"id": "d1"}], "answer": 5}) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match="answer must be a string"):
        read_ranking_file(path)
    path.write_text(json.dumps({"id": "q1", "results": [{"id": "d1", "score": 1}, {"id": "d2"}]}) + "\n",
                    encoding="utf-8")
    with pytest.raises(InputError, match="give a score for every result of a question, or for none"):
        read_ranking_file(path)


def _example_run(tmp_path: Path, n: int, *, answers: bool) -> tuple[Path, Path, dict[str, str]]:
    """The first ``n`` example questions, a run retrieving each one's gold document (unscored), and, with
    ``answers``, each one's gold answer."""
    lines = (SAMPLE / "questions.jsonl").read_text(encoding="utf-8").splitlines()[:n]
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(lines) + "\n", encoding="utf-8")
    rows = []
    golds: dict[str, str] = {}
    for q in load_questions(questions):
        row: dict[str, Any] = {"id": q.id, "results": [{"id": r} for r in q.relevant_ids]}
        if answers:
            row["answer"] = q.gold_answers[0]
        golds[q.question] = q.gold_answers[0]
        rows.append(json.dumps(row, ensure_ascii=False))
    run = tmp_path / "run.jsonl"
    run.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return questions, run, golds


def test_eval_run_grades_the_runs_answers(tmp_path: Path) -> None:
    questions, run, _ = _example_run(tmp_path, 4, answers=True)
    result = CliRunner().invoke(app, ["eval", str(questions), "--run", str(run), "--corpus",
                                      str(SAMPLE / "corpus.jsonl"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["metrics"]["token_f1"] == 1.0 and summary["n_scored"]["token_f1"] == 4
    assert summary["metrics"]["hit_rate@1"] == 1.0


def test_eval_run_judges_the_runs_answers_with_judge(tmp_path: Path) -> None:
    questions, run, golds = _example_run(tmp_path, 4, answers=True)
    with FakeLLMServer(ScriptedRAG(golds)) as server:
        result = CliRunner().invoke(app, [
            "eval", str(questions), "--run", str(run), "--corpus", str(SAMPLE / "corpus.jsonl"),
            "--judge", "openai/fake", "--llm-base", server.url, "--metrics", "answer_correctness",
            "--workdir", str(tmp_path / "work"), "--json"])
        kinds = {kind_of(r) for r in server.received}
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_scored"]["answer_correctness"] == 4 and summary["metrics"]["answer_correctness"] > 0.75
    assert summary["llm"]["judge"] == "openai/fake" and summary["llm"]["error_rates"]["failed_samples"] == 0
    assert "generate" not in kinds  # the run's answers are judged, never regenerated
    (tmp_path / "bare").mkdir()
    no_answers, run2, _ = _example_run(tmp_path / "bare", 2, answers=False)
    refused = CliRunner().invoke(app, ["eval", str(no_answers), "--run", str(run2), "--judge", "openai/x"])
    assert refused.exit_code == 2 and "the run has none" in refused.output


# -- 19.8: failed samples are listed and the rest scored, unless --strict -----------------------------------


def test_a_sample_the_judge_failed_on_is_scored_by_its_fallback_and_counted_apart(tmp_path: Path) -> None:
    """A judge failure its deterministic fallback rescued is scored, and no failed sample (issue 42): the
    LLM line counts it apart, and --strict, which ends an eval on failed samples, lets it pass."""
    questions, run, golds = _example_run(tmp_path, 5, answers=True)
    first = next(iter(load_questions(questions)))
    scripted = ScriptedRAG(golds)

    def route(req: ChatRequest) -> Reply | str:
        return REFUSED if first.question in req.prompt else scripted(req)

    args = ["eval", str(questions), "--run", str(run), "--judge", "openai/fake", "--metrics",
            "answer_correctness", "--workdir", str(tmp_path / "work")]
    with FakeLLMServer(route) as server:
        lenient = CliRunner().invoke(app, [*args, "--llm-base", server.url])
        strict = CliRunner().invoke(app, [*args, "--llm-base", server.url, "--strict"])
    assert lenient.exit_code == 0, lenient.output
    assert strict.exit_code == 0, strict.output
    for output in (" ".join(lenient.output.split()), " ".join(strict.output.split())):  # lines wrap
        assert "samples failed" not in output
        assert "0 failed samples · 1 scored by the judge's fallback (the judge failed)" in output


def test_an_eval_where_every_sample_failed_exits_2_with_the_cause(tmp_path: Path) -> None:
    questions, run, _ = _example_run(tmp_path, 2, answers=True)
    with FakeLLMServer(lambda req: REFUSED) as server:
        result = CliRunner().invoke(app, ["eval", str(questions), "--run", str(run), "--judge", "openai/fake",
                                          "--llm-base", server.url, "--metrics", "answer_correctness",
                                          "--workdir", str(tmp_path / "work")])
    assert result.exit_code == 2
    assert result.output.startswith("error: the judge failed on every one of the 2 samples (each was scored "
                                    "by its deterministic fallback instead)")


# -- studies made by hand: trials with records, as a study stores them --------------------------------------


def _record(number: int, composite: float, *, latency: float = 10.0, cost: float | None = None,
            mode: str = "bm25") -> dict[str, Any]:
    from composer.pipeline.config import PipelineConfig
    from composer.record import TrialRecord

    config = PipelineConfig.from_dict({"retrieval": {"mode": mode, "k": 5}}).to_dict()
    metrics = {"composite": composite, "recall@5": composite, "latency_ms": latency}
    if cost is not None:
        metrics["llm_cost_usd"] = cost
    return TrialRecord(config, f"hash{number}", metrics=metrics).to_dict()


def _study(url: str, trials: list[dict[str, Any]], *, name: str = "hand",
           attrs: dict[str, Any] | None = None) -> Any:
    """A study with one complete trial per record (a failed one where the record has an error)."""
    import optuna
    from optuna.distributions import IntDistribution

    from composer.study._storage import make_storage

    study = optuna.create_study(storage=make_storage(url), study_name=name, direction="maximize")
    for key, value in (attrs or {}).items():
        study.set_user_attr(key, value)
    for i, record in enumerate(trials):
        failed = record.get("error") is not None
        study.add_trial(optuna.trial.create_trial(
            params={"i": i}, distributions={"i": IntDistribution(0, 1000)},
            value=None if failed else record["metrics"]["composite"],
            state=optuna.trial.TrialState.FAIL if failed else optuna.trial.TrialState.COMPLETE,
            user_attrs={"composer": record}))
    return study


def _url(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


# -- 18.7: ties go to the faster, then the cheaper configuration ------------------------------------------


def test_equal_composites_are_broken_by_latency_then_cost_in_every_ranking(tmp_path: Path) -> None:
    from composer.study.export import best_trial
    from composer.study.leaderboard import leaderboard, ranked_trials

    study = _study(_url(tmp_path / "optuna.db"), [
        _record(0, 0.8, latency=90.0),  # the slowest of the tied: first by number, the old winner
        _record(1, 0.8, latency=20.0, cost=0.5),
        _record(2, 0.8, latency=20.0, cost=0.1),
        _record(3, 0.7, latency=1.0),
    ])
    assert [t.number for t in ranked_trials(study)] == [2, 1, 0, 3]
    assert best_trial(study).number == 2
    assert leaderboard(study)["trial"].tolist() == [2, 1, 0, 3]


def test_an_equal_composite_goes_to_the_pareto_front_before_the_faster_trial(tmp_path: Path) -> None:
    """Two objectives (composite, context tokens): trial 0 ties trial 1's composite with more tokens, so it
    is dominated and cannot be the best, however fast it ran (it was, when latency broke the tie)."""
    import optuna
    from optuna.distributions import IntDistribution

    from composer.study.export import best_trial
    from composer.study.leaderboard import leaderboard, ranked_trials

    study = optuna.create_study(storage=_url(tmp_path / "optuna.db"), study_name="multi",
                                directions=["maximize", "minimize"])
    for i, (composite, tokens, latency) in enumerate([(0.8, 900, 1.0), (0.8, 300, 50.0), (0.7, 100, 1.0)]):
        study.add_trial(optuna.trial.create_trial(
            params={"i": i}, distributions={"i": IntDistribution(0, 10)}, values=[composite, tokens],
            user_attrs={"composer": _record(i, composite, latency=latency)}))
    assert {t.number for t in study.best_trials} == {1, 2}
    assert [t.number for t in ranked_trials(study)] == [1, 0, 2]
    assert best_trial(study).number == 1
    assert leaderboard(study)["trial"].tolist() == [1, 0, 2]


def test_failures_are_summarised_by_cause() -> None:
    from composer.cli.optimize import failure_lines
    from composer.study.leaderboard import failure_causes

    class Trial:
        def __init__(self, number: int, error: str | None) -> None:
            import optuna

            from composer.record import TrialRecord

            self.number = number
            self.state = optuna.trial.TrialState.FAIL if error else optuna.trial.TrialState.COMPLETE
            record = TrialRecord({}, "", error=error, failure="error" if error else None)
            self.user_attrs = {"composer": record.to_dict()}

    hub = "OSError: sentence-transformers/x is not a local folder and the Hub is offline\nTraceback..."
    trials = [Trial(0, hub), Trial(1, None), Trial(2, "MemoryError: out"), Trial(3, hub)]
    causes = failure_causes(trials)  # type: ignore[arg-type]
    assert causes == [(hub.splitlines()[0], [0, 3]), ("MemoryError: out", [2])]
    assert failure_lines(causes) == ["3 failed trials by cause:", f"  2 x {hub.splitlines()[0]} (#0, #3)",
                                     "  1 x MemoryError: out (#2)"]


def test_an_arabic_only_space_on_a_persian_corpus_is_flagged(tmp_path: Path) -> None:
    from composer.study.space import language_warning
    from composer.study.space_file import load_search_space

    space = write_space(tmp_path, {"retrieval.mode": {"choices": ["bm25"]},
                                   "retrieval.analyzer": {"choices": ["isri", "tashaphyne"]}})
    persian = ["این یک متن فارسی است که در آن چند کلمه آمده است.", "کتاب‌ها را از کتابخانه گرفتم."] * 5
    arabic = ["ذهب الطالب إلى المدرسة في الصباح الباكر.", "كانت المدينة التي زرتها جميلة."] * 5
    warning = language_warning(load_search_space(space), persian)
    assert warning is not None and warning.startswith(
        "the search space's analyzer isri, tashaphyne is for Arabic, but the corpus is Persian")
    assert "Persian's own: rishe" in warning
    assert language_warning(load_search_space(space), arabic) is None


# -- 18.5: the work dir is found from the experiment file ----------------------------------------------------


def test_trials_from_another_folder_read_the_work_dir_beside_the_experiment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    exp = write_experiment(project, dims={"retrieval.k": {"choices": [5]}}, file="exp.yaml", name="hand")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    missing = CliRunner().invoke(app, ["trials", "-e", str(exp)])
    assert missing.exit_code == 2
    assert f"no study storage at {project / '.composer' / 'optuna.db'}" in missing.output
    assert "give --experiment" not in missing.output
    _study(_url(project / ".composer" / "optuna.db"), [_record(0, 0.5)])
    found = CliRunner().invoke(app, ["trials", "-e", str(exp)])
    assert found.exit_code == 0, found.output
    assert "#0" in found.output and not (elsewhere / ".composer").exists()


# -- 18.6: verdicts acted on; 18.8: exports any user may read ------------------------------------------------


def _exported_study(tmp_path: Path, *, runner_up_better: bool) -> tuple[str, Path, Any]:
    """A study of two trials over the sample's questions, split 25% held out, its held-out verdict given."""
    from composer.evaluation.splits import SplitConfig, split_questions

    questions = load_questions(SAMPLE / "questions.jsonl")
    selection, _ = split_questions(questions, SplitConfig(held_out=0.25, seed=0))
    held = {"n_questions": 47, "winner": {"trial": 0, "held_out_composite": 0.5},
            "runner_up": {"trial": 1, "held_out_composite": 0.6},
            "difference": {"mean": -0.1, "ci95": [-0.15, -0.05], "n_paired": 47,
                           "winner_really_better": False, "runner_up_really_better": runner_up_better}}
    attrs = {"composer": {"split": {"held_out": 0.25, "seed": 0},
                          "selection_fingerprint": selection.fingerprint(), "k_eval": 5},
             "held_out": held}
    url = _url(tmp_path / "optuna.db")
    _study(url, [_record(0, 0.9), _record(1, 0.8)], attrs=attrs)
    return url, tmp_path / "best.yaml", selection


def test_export_says_when_the_held_out_runner_up_is_better_and_offers_trial(tmp_path: Path) -> None:
    url, out, _ = _exported_study(tmp_path, runner_up_better=True)
    umask = os.umask(0o022)
    try:
        result = CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out)])
    finally:
        os.umask(umask)
    assert result.exit_code == 0, result.output
    assert "trial #0" in result.output
    assert ("warning: on the 47 held-out questions the runner-up #1 is really better than the winner #0 "
            "(difference -0.1000, 95% CI [-0.1500, -0.0500]); to export it instead: --trial 1"
            ) in result.output
    assert out.stat().st_mode & 0o777 == 0o644  # not the temporary file's 0600: an export is for sharing
    chosen = CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out), "--trial", "1"])
    assert chosen.exit_code == 0 and "trial #1" in chosen.output and "warning" not in chosen.output


def test_export_is_quiet_when_the_winner_holds(tmp_path: Path) -> None:
    url, out, _ = _exported_study(tmp_path, runner_up_better=False)
    result = CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out)])
    assert result.exit_code == 0 and "warning" not in result.output


def test_eval_split_scores_the_studys_selection_or_held_out_questions(tmp_path: Path) -> None:
    url, out, selection = _exported_study(tmp_path, runner_up_better=False)
    assert CliRunner().invoke(app, ["export", "hand", "--storage", url, "--out", str(out)]).exit_code == 0
    base = ["eval", str(SAMPLE / "questions.jsonl"), "--corpus", str(SAMPLE / "corpus.jsonl"), "--config",
            str(out), "--workdir", str(tmp_path / "work"), "--json"]
    n_all = len(load_questions(SAMPLE / "questions.jsonl"))
    counts = {}
    for split in ("selection", "held_out", "all"):
        result = CliRunner().invoke(app, [*base, "--split", split])
        assert result.exit_code == 0, result.output
        counts[split] = json.loads(result.stdout)["n_questions"]
    assert counts == {"selection": len(selection), "held_out": n_all - len(selection), "all": n_all}
    pipeline = tmp_path / "plain.yaml"
    pipeline.write_text("retrieval: {mode: bm25}\n", encoding="utf-8")
    no_study = CliRunner().invoke(app, [*base[:5], str(pipeline), "--split", "selection"])
    assert no_study.exit_code == 2 and "--split needs the study's split" in no_study.output


def test_switches_are_shown_without_a_value_in_help() -> None:
    import re

    for command in ([], ["eval"], ["optimize"], ["trials"], ["synth"], ["index"]):
        result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"}, terminal_width=200)
        assert result.exit_code == 0
        switches = [line for line in result.output.splitlines()
                    if re.search(r"--(json|strict|csv|review|verbose|debug)\b", line)]
        assert switches and not [line for line in switches if "<bool>" in line], (command, switches)


# -- 18.8 optimize --workdir; 18.7 a selection set too small to separate the top trials ----------------------

@pytest.mark.slow
def test_optimize_workdir_and_a_selection_set_that_cannot_separate_the_top_trials(tmp_path: Path) -> None:
    """k 5 and k 10 rank alike at the objective's cutoff 5: equal composites, a difference CI of [0, 0]."""
    dims = {"retrieval.mode": {"choices": ["bm25"]}, "retrieval.k": {"choices": [5, 10]}}
    exp = write_experiment(tmp_path, dims=dims, n_questions=8, name="small", sampler="grid",
                           objective={"k": 5, "metrics": {"recall": 1, "ndcg": 1}})
    work = tmp_path / "chosen-work"
    result = CliRunner().invoke(app, ["optimize", str(exp), "--workdir", str(work)])
    assert result.exit_code == 0, result.output
    assert (work / "optuna.db").is_file() and not (tmp_path / ".composer").exists()
    output = " ".join(result.output.split())  # as wrapped at the console's width
    assert "warning: selection set too small to separate the top trials: on its 8 questions" in output
    assert "95% CI [+0.0000, +0.0000] spans 0" in output
    assert f"export: composer export small --storage sqlite:///{work / 'optuna.db'}" in output
    # The export it offers lands in the work dir (where load_pipeline keeps indexes), not in the cwd.
    assert f"--out {work.resolve() / 'best.yaml'}" in output
