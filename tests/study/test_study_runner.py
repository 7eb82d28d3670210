"""A trial on a scripted pipeline: batches, running objective, pruning, repeats, failures; scrubbing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import optuna
import pytest
from ended_trials import ended_trial

from composer.data.ranking import ChunkTable, Ranking, ranking_from_hits
from composer.data.types import Corpus, Document, Hit, HitLists, Question, QuestionSet
from composer.evaluation.report import StageError
from composer.evaluation.scoring import score_pipeline
from composer.generation import Answer, answer_questions, contexts_for
from composer.llm.usage import active_trackers
from composer.metrics.names import mlflow_metric_name
from composer.objective import ObjectiveConfig
from composer.pipeline.config import PipelineConfig
from composer.pipeline.pipeline import IndexInfo
from composer.record import TrialRecord
from composer.redact import MASK, flatten, scrub, scrub_url
from composer.study._optimize import after_each_trial
from composer.study.data import StudyData, config_hash
from composer.study.finish import llm_totals
from composer.study.runner import TrialRunner
from composer.study.space_file import parse_search_space
from composer.tracking.trial import TrialArtifacts
from composer.tracking.trial_run import RunWriter, trial_metrics, trial_tags

optuna.logging.set_verbosity(optuna.logging.WARNING)

CORPUS = Corpus([Document(id=f"d{i}", text=f"الوثيقة رقم {i} عن الموضوع {i}.") for i in range(10)], "mem")
QUESTIONS = QuestionSet(
    [Question(id=f"q{i}", question=f"ما الموضوع {i}؟", relevant_ids=(f"d{i}",), answers=(f"الموضوع {i}",))
     for i in range(10)],
    "mem",
)
TABLE = ChunkTable(tuple(d.id for d in CORPUS), tuple(d.id for d in CORPUS), tuple(d.text for d in CORPUS))


@dataclass
class ScriptedPipeline:
    """Ranks the relevant document first when ``good``, else never retrieves it."""

    config: PipelineConfig
    good: bool
    calls: list[int] = field(default_factory=list)
    searched: float = 0.0
    failed: dict[str, StageError] = field(default_factory=dict)
    answerer: str = "extractive"
    generator_model: str | None = None
    can_answer: bool = True

    def batched(self, answering: bool) -> bool:
        return False  # no LLM: ranked and scored at once, the batches only pruning steps

    def index(self, corpus: Corpus) -> IndexInfo:
        return IndexInfo("composer-test", len(corpus), len(corpus), False, 0, 0, 0.0)

    def universe(self) -> ChunkTable:
        return TABLE

    def rank(self, questions: Sequence[Question]) -> tuple[Ranking, dict[str, np.ndarray]]:
        self.calls.append(len(questions))
        run: HitLists = {}
        for q in questions:
            target = q.relevant_ids[0]
            ids = [target] if self.good else []
            ids += [d.id for d in CORPUS if d.id != target][: self.config.retrieval.k - len(ids)]
            run[q.id] = [Hit(i, 1.0 - r / 10) for r, i in enumerate(ids)]
        ranking = ranking_from_hits(run, [q.id for q in questions], TABLE)
        return ranking, {"retrieve": np.full(len(questions), 0.001), "rerank": np.zeros(len(questions))}

    def answer(
        self, questions: Sequence[Question], ranking: Ranking, *, max_failures: int | None = None,
        on_answer: Callable[[int], None] | None = None,
    ) -> dict[str, Answer]:
        rows = {qid: i for i, qid in enumerate(ranking.question_ids)}
        contexts = [contexts_for(ranking.hits(rows[q.id]), 5) for q in questions]
        return answer_questions(questions, contexts)  # the offline extractive answerer


@dataclass
class SpendingPipeline(ScriptedPipeline):
    """Makes one (pretend) LLM call per batch it answers: 10 prompt tokens a question, $0.25."""

    def answer(
        self, questions: Sequence[Question], ranking: Ranking, *, max_failures: int | None = None,
        on_answer: Callable[[int], None] | None = None,
    ) -> dict[str, Answer]:
        for usage in active_trackers():
            usage.record_call(cached=False, failed=None)
            usage.record_request(10 * len(questions), 1, 0.25)
        return super().answer(questions, ranking, max_failures=max_failures)


class ScriptedData(StudyData):
    built: list[ScriptedPipeline]
    kind: type[ScriptedPipeline] = ScriptedPipeline

    def pipeline(self, config: PipelineConfig) -> ScriptedPipeline:
        made = self.kind(config, good=config.retrieval.mode == "bm25")
        self.built.append(made)
        return made


def data(dims: dict[str, object] | None = None, batch_size: int = 4,
         kind: type[ScriptedPipeline] = ScriptedPipeline) -> ScriptedData:
    dims = dims or {"retrieval.mode": {"choices": ["bm25", "dense"]}, "retrieval.k": {"choices": [3]}}
    d = ScriptedData(corpus=CORPUS, questions=QUESTIONS, space=parse_search_space({"dimensions": dims}),
                     objective_config=ObjectiveConfig(k=3, metrics={"recall": 1.0, "token_f1": 1.0}),
                     workdir=Path("unused"), batch_size=batch_size)
    d.built, d.kind = [], kind
    return d


class Logged:
    """A tracker that keeps what the study hands the MLflow writer once Optuna has told a trial's end, with
    the artifacts the runner spooled for it (it stands for the tracker's spool too)."""

    def __init__(self) -> None:
        self.spooled: dict[int, TrialArtifacts] = {}
        self.logs: dict[int, tuple[optuna.trial.FrozenTrial, TrialArtifacts]] = {}

    def put_artifacts(self, number: int, artifacts: TrialArtifacts) -> None:
        self.spooled[number] = artifacts

    def submit(self, trial: optuna.trial.FrozenTrial) -> None:
        self.logs[trial.number] = (trial, self.spooled.pop(trial.number))

    def lost(self, trials: object) -> None:
        raise AssertionError(f"no trial is lost here: {trials}")


def run_trials(
    runner: TrialRunner, study: optuna.Study, n_trials: int, tracker: Logged | None = None
) -> None:
    """``study.optimize`` as a study runs it: the ended trials and their artifacts go to ``tracker``."""
    runner.spool = tracker  # type: ignore[assignment]
    callbacks = [] if tracker is None else [after_each_trial(tracker=tracker)]  # type: ignore[arg-type]
    study.optimize(runner, n_trials=n_trials, callbacks=callbacks)


def good_poor_and_repeat(d: ScriptedData, tracker: Logged | None = None) -> optuna.Study:
    """A complete trial, a pruned one (after its first batch of 4 questions), a repeat of the first."""
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    for mode in ("bm25", "dense", "bm25"):
        study.enqueue_trial({"retrieval.mode": mode, "retrieval.k": 3})
    run_trials(TrialRunner(d), study, 3, tracker)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "PRUNED", "COMPLETE"]
    return study


def test_score_pipeline_reports_a_growing_report_per_batch() -> None:
    pipeline = ScriptedPipeline(PipelineConfig.from_dict({"retrieval": {"mode": "bm25", "k": 3}}), good=True)
    seen: list[tuple[int, int]] = []
    scored = score_pipeline(pipeline, QUESTIONS, CORPUS, ks=(1, 3), batch_size=4,
                            on_batch=lambda step, report: seen.append((step, len(report))))
    assert pipeline.calls == [10]  # no LLM: every question ranked at once, the batches are pruning steps
    assert seen == [(0, 4), (1, 8), (2, 10)]
    assert [s.question_id for s in scored.report.samples] == [q.id for q in QUESTIONS]
    stats = scored.report.stats()
    assert stats["recall@1"].mean == 1.0 and stats["token_f1"].n == 10
    assert set(scored.report.samples[0].latency) == {"retrieve", "rerank", "generate"}
    assert scored.secondary_metrics()["context_tokens"] > 0
    assert scored.answerer == "extractive"


def test_a_retrieval_only_objective_answers_nothing() -> None:
    pipeline = ScriptedPipeline(PipelineConfig.from_dict({"retrieval": {"mode": "bm25", "k": 3}}), good=True)
    scored = score_pipeline(pipeline, QUESTIONS, CORPUS, ks=(1, 3), answers=False)
    assert scored.answers == {} and "token_f1" not in scored.report.means()
    assert scored.report.means()["recall@3"] == 1.0
    d = data({"retrieval.mode": {"choices": ["bm25"]}})
    d.objective_config = ObjectiveConfig(k=3, metrics={"recall": 1.0, "ndcg": 1.0})
    assert not d.answers


def test_a_repeated_configuration_returns_the_earlier_result_without_running() -> None:
    d = data()
    study = optuna.create_study(direction="maximize")
    for _ in range(2):
        study.enqueue_trial({"retrieval.mode": "bm25", "retrieval.k": 3})
    study.optimize(TrialRunner(d), n_trials=2)
    first, second = study.trials
    assert len(d.built) == 1  # the repeat built no pipeline
    assert second.value == first.value
    one, two = TrialRecord.of(first), TrialRecord.of(second)
    assert one is not None and two is not None
    assert two.duplicate_of == 0 and two.metrics == one.metrics
    assert two.config_hash == one.config_hash == config_hash(d.space.build(first.params))
    assert sorted(first.intermediate_values) == [0, 1, 2]  # one report per batch of 4, 4 and 2 questions
    assert first.intermediate_values[2] == pytest.approx(first.value)


def test_a_poor_trial_is_pruned_between_batches() -> None:
    d = data()
    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    study.enqueue_trial({"retrieval.mode": "bm25", "retrieval.k": 3})
    study.enqueue_trial({"retrieval.mode": "dense", "retrieval.k": 3})
    study.optimize(TrialRunner(d), n_trials=2)
    good, poor = study.trials
    assert good.state == optuna.trial.TrialState.COMPLETE
    assert poor.state == optuna.trial.TrialState.PRUNED
    record = TrialRecord.of(poor)
    assert record is not None and record.metrics["pruned_at_questions"] == 4
    assert list(poor.intermediate_values) == [0]  # stopped at the first step


def test_a_pruned_trial_logs_its_running_composite_apart_from_complete_ones() -> None:
    """In MLflow a pruned trial's composite over its first questions must not pass for a result: it is
    ``composite_at_prune``, with where it stopped; Optuna keeps its intermediate values."""
    tracker = Logged()
    study = good_poor_and_repeat(data(), tracker)
    good, poor, _ = study.trials
    runs = {n: trial_metrics(trial, TrialRecord.of(trial)) for n, (trial, _) in tracker.logs.items()}
    pruned = runs[1]
    assert "composite" not in pruned
    assert pruned["composite_at_prune"] == poor.intermediate_values[0]
    assert pruned["pruned_at_step"] == 0 and pruned["pruned_at_questions"] == 4
    assert runs[0]["composite"] == pytest.approx(good.value)
    assert "composite_at_prune" not in runs[0]
    assert runs[2]["composite"] == runs[0]["composite"]  # the repeat
    # Every trial, the pruned one included, hands its report (so far) to the writer, after Optuna's tell.
    trial, report = tracker.logs[1]
    assert report.report is not None and len(report.report) == 4 and trial.state.name == "PRUNED"
    repeat, nothing = tracker.logs[2]
    assert trial_tags(repeat, TrialRecord.of(repeat), nothing)["composer.duplicate_of"] == "0"
    assert nothing.report is None


def test_every_trial_records_its_own_llm_spending_for_the_study_totals() -> None:
    study = good_poor_and_repeat(data(kind=SpendingPipeline))
    good, poor, repeat = (TrialRecord.of(t) for t in study.trials)
    assert good is not None and poor is not None and repeat is not None
    # One pretend call per batch answered: all 10 questions at once (the scripted pipeline ranks without an
    # LLM); the pruned trial stopped after it too; the repeat made none.
    assert good.llm_usage["llm_calls"] == 1 and good.llm_usage["llm_prompt_tokens"] == 100
    assert poor.llm_usage["llm_calls"] == 1
    assert repeat.llm_usage == {}
    totals = llm_totals(study.trials)
    assert totals["llm_calls"] == 2 and totals["llm_cached_calls"] == 0
    assert totals["llm_prompt_tokens"] == 200 and totals["llm_total_tokens"] == 202
    assert totals["llm_cost_usd"] == 0.5
    assert llm_totals(good_poor_and_repeat(data()).trials) == {}  # no LLM, nothing to sum


def test_a_failing_trial_fails_alone_with_its_error_recorded() -> None:
    d = data({"chunking.method": {"choices": ["fixed_chars"]}, "chunking.size": {"choices": [100]},
              "chunking.overlap": {"choices": [100]}})
    study = optuna.create_study(direction="maximize")
    study.optimize(TrialRunner(d), n_trials=1, catch=(Exception,))
    assert study.trials[0].state == optuna.trial.TrialState.FAIL
    record = TrialRecord.of(study.trials[0])
    assert record is not None and record.error is not None and "overlap" in record.error


def test_scrub_masks_secrets_but_not_scores_or_index_keys() -> None:
    values = {"embedding": {"api_key": "sk-123", "api_base": "https://user:pw@host/v1", "model": "m"},
              "token_f1": 0.5, "composer.index_key": "composer-abc", "auth_token": "t", "empty_key": "",
              "password": "p"}
    out = scrub(values)
    assert out["embedding"] == {"api_key": MASK, "api_base": f"https://{MASK}@host/v1", "model": "m"}
    assert out["token_f1"] == 0.5 and out["composer.index_key"] == "composer-abc"
    assert out["auth_token"] == MASK and out["password"] == MASK and out["empty_key"] == ""


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:pa/ss@host:5432/db", f"postgresql://{MASK}@host:5432/db"),  # "/" in a password
    ("postgresql://u:p@ss@host/db", f"postgresql://{MASK}@host/db"),  # an unescaped "@" in one
    ("https://sk-abc@host/v1", f"https://{MASK}@host/v1"),  # a token as the user
    ("https://host/@name/page", "https://host/@name/page"),  # a path, not userinfo
    ("http://h/v1?accessToken=abc&x=1", f"http://h/v1?accessToken={MASK}&x=1"),  # camelCase
    ("https://b.blob/c?sv=2024&X-Amz-Signature=zz", f"https://b.blob/c?sv=2024&X-Amz-Signature={MASK}"),
    ("http://h/?sessionId=1&keyword=ok", f"http://h/?sessionId={MASK}&keyword=ok"),
    ("http://h/?clientSecret=s&api-key=k", f"http://h/?clientSecret={MASK}&api-key={MASK}"),
    ("sqlite:///work/optuna.db?timeout=30", "sqlite:///work/optuna.db?timeout=30"),
    ("failed: see postgresql://a:b@c/d now", f"failed: see postgresql://{MASK}@c/d now"),
])
def test_scrub_url_masks_every_credential_form(url: str, shown: str) -> None:
    assert scrub_url(url) == shown


def test_a_failed_trials_error_is_scrubbed_in_its_record() -> None:
    error = "OperationalError: postgresql://u:pw@db/x refused"
    record = TrialRecord({}, "", error=error, failure="error")
    assert record.to_dict()["error"] == f"OperationalError: postgresql://{MASK}@db/x refused"


def test_a_failed_trials_run_is_scrubbed_like_any_other(tmp_path: Path) -> None:
    """A trial failed before it had a pipeline (an invalid sampled combination) may quote the sampled
    values in its error: its run's tags and params are scrubbed as a finished trial's are."""
    writer = RunWriter(
        f"sqlite:///{tmp_path / 'mlflow.db'}", "scrub", "s", storage=f"sqlite:///{tmp_path / 'o.db'}"
    )
    endpoint = "https://user:s3cret@llm.example/v1"
    config = {"generation.api_base": endpoint}
    record = TrialRecord(config, "", error=f"ConfigError: [api_base={endpoint!r}]", failure="invalid")
    writer.write_trial(*ended_trial(0, config, "FAIL", record=record))
    [run] = writer.client.search_runs([writer.experiment_id], filter_string="tags.`composer.trial` = '0'")
    assert run.data.tags["composer.error"] == f"ConfigError: [api_base='https://{MASK}@llm.example/v1']"
    assert run.data.params["generation.api_base"] == f"https://{MASK}@llm.example/v1"
    assert run.info.status == "FAILED" and run.data.tags["composer.state"] == "FAIL"


def test_metric_names_and_flattened_params() -> None:
    assert mlflow_metric_name("recall@10") == "recall_at_10"
    assert mlflow_metric_name("latency_ms") == "latency_ms"
    flat = flatten(PipelineConfig().to_dict())
    assert flat["chunking.method"] == "paragraph" and flat["rerank.lambda"] == 0.7
