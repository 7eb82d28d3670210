"""Composer as a library: ``evaluate`` a system, ``optimize`` one (Composer's pipeline or a user's factory),
``load_pipeline`` an exported winner. The CLI is a layer over these same paths.

Every entry point takes paths or objects alike (a question set as a file, a DataFrame, a list of dicts or a
``QuestionSet``) and raises ``ComposerError`` subclasses with the messages the CLI prints: a bad key in an
in-memory config names the key, never a raw pydantic ``ValidationError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import ValidationError
from typing_extensions import Unpack  # typing's from Python 3.11; read at run time by get_type_hints

from composer.errors import ConfigError, config_error
from composer.options import EvaluationMlflow, ExperimentOptions, PrunerName, SamplerName
from composer.protocols import CorpusSource, Evaluable, Questions, Split, SystemFactory

if TYPE_CHECKING:
    from composer.cost.estimate import Estimate
    from composer.data.types import Corpus, QuestionSet
    from composer.evaluation.gate import Scores
    from composer.evaluation.judging import Judging
    from composer.evaluation.report import EvaluationReport
    from composer.objective import ObjectiveConfig
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import Pipeline
    from composer.prompt_tuning.result import PromptOptimization
    from composer.prompts import UserPrompt
    from composer.study.experiment import ExperimentConfig
    from composer.study.study import StudyResult

DEFAULT_WORKDIR = Path(".composer")


# -- evaluate -----------------------------------------------------------------------------------------


def evaluate(
    system: Evaluable,
    questions: Questions,
    corpus: CorpusSource | None = None,
    *,
    k: Sequence[int] = (1, 3, 5, 10),
    metrics: Sequence[str] | None = None,
    judge: str | Mapping[str, object] | None = None,
    concurrency: int = 8,
    workdir: str | Path | None = None,
    mlflow: str | EvaluationMlflow | bool | None = None,
    split: Split = "all",
    baseline: Evaluable | EvaluationReport | None = None,
    objective: str | Path | Mapping[str, float] | None = None,
    gate_metric: str = "composite",
    margin: float = 0.0,
) -> EvaluationReport:
    """Score ``system`` on ``questions``: retrieval metrics at every cutoff in ``k``, answer metrics when
    it answers, LLM judges with ``judge``; bootstrap CIs, latency per question and failures counted.

    Args:
        system: A pipeline config (YAML path, dict, ``PipelineConfig``), a ``Pipeline``, a run (run file
            path, or mapping question id -> ranked ids or hits), or a user's system
            (``composer.protocols.System``): an object with ``retrieve(question) -> list`` (a LlamaIndex
            retriever too; optionally with ``answer(question, contexts) -> str``; sync or ``async def``), a
            LangChain retriever or runnable (``invoke(question) -> list of Documents``), or a plain callable
            ``question -> list``.
        questions: A question set: a file (.jsonl, .json, .csv, .tsv, .xlsx, .parquet), a DataFrame, a
            list of dicts or a ``QuestionSet``.
        corpus: The documents, in the same forms (or a document file or folder); required for a Composer
            pipeline, which indexes it; for any other system it supplies hit texts and checks the ids.
        k: The cutoffs of the retrieval metrics.
        metrics: The LLM-judged metrics to compute (default: the judge's own, answer_correctness and
            faithfulness); retrieval and deterministic answer metrics are always reported.
        judge: A litellm model name or a judge block (``model``, ``api_base``, ``api_key_env``,
            ``timeout``...).
        concurrency: Questions in flight at once for a user's system (1 calls it one question at a time).
        workdir: Where caches (judge replies, indexes) live; default ``.composer``.
        mlflow: Log the report as an MLflow run: a tracking URI, ``{"tracking_uri", "experiment",
            "run_name"}``, or True for ``<workdir>/mlflow.db``.
        split: With ``system`` an exported best.yaml: score only the study's ``selection`` or
            ``held_out`` questions, split as the study split them.
        baseline: The CI gate: an earlier report, an ``eval --out`` folder, or any system this function
            takes, scored on the same questions; ``report.gate`` then holds the verdict.
        objective: Weights (``{"recall@10": 1, "ndcg@10": 1}``, ``"recall@10=1,ndcg@10=1"``) or a YAML
            file whose composite the report carries (default: the exported ``system``'s objective).
        gate_metric: What the gate compares: ``composite`` or one metric (``ndcg@10``).
        margin: The gate's tolerance: a drop in the mean up to this passes, unless significant.

    Returns:
        The report: ``report.means()``, ``report.stats()``, ``report.summary()``, ``report.save(path)``;
        ``report.gate.passed`` with a baseline.

    Raises:
        ConfigError: A bad config, metric or judge (naming the key or argument), or ``judge`` given for a
            system that cannot answer.
        InputError: An unreadable or invalid question set, corpus or run file (naming file, line, field).
        ComposerError: ``system`` is none of the above, or a system returned something unreadable.

    Example:
        ::

            report = composer.evaluate(
                {"retrieval": {"mode": "bm25", "k": 10}},  # or a Retriever, a run file...
                "examples/arcd-sample/questions.jsonl",
                "examples/arcd-sample/corpus.jsonl",
                k=(1, 5),
            )
            print(report.means()["recall@5"])
    """
    from composer.data.inputs import as_corpus, as_question_set
    from composer.evaluation.gate import cutoffs_to_score, run_gate, stated_objective, with_objective
    from composer.evaluation.producers import score_system

    work = Path(workdir) if workdir is not None else DEFAULT_WORKDIR
    docs = as_corpus(corpus)
    question_set = _split(as_question_set(questions, docs), system, split)
    judging = _judging(judge, metrics, work)
    if baseline is None and (gate_metric != "composite" or margin):
        raise ConfigError("gate_metric= and margin= set the CI gate: give baseline=", field="baseline")
    stated = stated_objective(objective, system, baseline)
    k = cutoffs_to_score(k, stated[0] if stated else None, gate_metric if baseline is not None else None)
    report = score_system(system, question_set, docs, judging, k, work, concurrency)
    if stated is not None:
        report = with_objective(report, *stated)
    if baseline is not None:
        old = _baseline(baseline, question_set, docs, judging, k, work, concurrency)
        verdict = run_gate(report, question_set.source, old, metric=gate_metric, margin=margin)
        report = report.with_gate(verdict)
    if mlflow:
        _log_to_mlflow(report, mlflow, work)
    return report


def _split(questions: QuestionSet, system: Evaluable, split: Split) -> QuestionSet:
    """The study's ``split`` of the questions, which only an exported best.yaml (as ``system``) records."""
    from composer.evaluation.producers import is_config_file
    from composer.evaluation.splits import study_split

    if split not in ("all", "selection", "held_out"):
        raise ConfigError(f"expected all, selection or held_out, got {split!r}", field="split")
    if split != "all" and not is_config_file(system):
        raise ConfigError("the study's split is read from its exported best.yaml: give its path as system",
                          field="split")
    return study_split(questions, Path(str(system)), split)


def _baseline(
    baseline: Evaluable | EvaluationReport,
    question_set: QuestionSet,
    docs: Corpus | None,
    judging: Judging | None,
    k: Sequence[int],
    work: Path,
    concurrency: int,
) -> Scores:
    """What the gate compares against: an earlier report, an ``eval --out`` folder, or any system
    ``evaluate`` takes, scored here on the same questions."""
    from composer.evaluation.gate import Scores, check_baseline_file, read_scores
    from composer.evaluation.producers import is_config_file, score_system
    from composer.evaluation.report import EvaluationReport

    if isinstance(baseline, EvaluationReport):
        return Scores.of(baseline, "baseline=")
    if isinstance(baseline, str | Path) and Path(baseline).is_dir():
        return read_scores(Path(baseline))
    name = str(baseline) if isinstance(baseline, str | Path) else "baseline="
    if is_config_file(baseline):
        check_baseline_file(Path(baseline))
    return Scores.of(score_system(baseline, question_set, docs, judging, k, work, concurrency), name)


def _judging(
    judge: str | Mapping[str, object] | None, metrics: Sequence[str] | None, workdir: Path
) -> Judging | None:
    """The judge of an evaluation; metrics are checked by name whether or not a judge is given."""
    from composer.judges import JudgeConfig
    from composer.judges.panel import JUDGE_METRICS
    from composer.objective import known_metrics, unknown_metric

    wanted = list(metrics or ())
    for name in wanted:
        if unknown_metric(name):
            known = ", ".join(known_metrics())
            raise ConfigError(f"unknown metric {name!r}; known: {known}", field="metrics")
    judged = [m for m in wanted if m in JUDGE_METRICS]
    if judge is None:
        if judged:
            raise ConfigError(
                f"{', '.join(judged)} need an LLM judge: give judge='provider/model'", field="judge"
            )
        return None
    data: dict[str, Any] = {"model": judge} if isinstance(judge, str) else dict(judge)
    if judged:
        data["metrics"] = judged
    try:
        config = JudgeConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, "<judge>", under="judge") from None
    from composer.evaluation.judging import make_judging

    return make_judging(config, None, workdir)


def _log_to_mlflow(report: EvaluationReport, target: str | EvaluationMlflow | bool, workdir: Path) -> str:
    from composer.study.experiment import default_tracking_uri
    from composer.tracking.evaluation import log_evaluation

    settings: dict[str, Any] = (
        {}
        if isinstance(target, bool)
        else ({"tracking_uri": target} if isinstance(target, str) else dict(target))
    )
    unknown = set(settings) - {"tracking_uri", "experiment", "run_name"}
    if unknown:
        raise ConfigError("unknown key", field=f"mlflow.{sorted(unknown)[0]}")
    uri = settings.get("tracking_uri") or default_tracking_uri(workdir.resolve())
    return log_evaluation(
        report, uri, settings.get("experiment") or "composer-evaluate", run_name=settings.get("run_name")
    )


# -- load_pipeline ------------------------------------------------------------------------------------


def load_pipeline(
    config: str | Path | Mapping[str, object] | PipelineConfig,
    corpus: CorpusSource | None = None,
    *,
    workdir: str | Path | None = None,
    qdrant: str | None = None,
) -> Pipeline:
    """A Composer pipeline from a config: a pipeline YAML, ``composer export``'s file (its ``pipeline``
    section), a dict or a ``PipelineConfig``. With ``corpus`` it is indexed (built once, then reused from
    ``workdir``), ready for ``pipe.search(text)`` and ``pipe.ask(question)``. Without it, the index built
    before for this config is reopened from what its build saved in ``workdir`` (chunks, fitted BM25,
    vectors): the corpus file is neither needed nor read, so a deployed config starts without it.

    Args:
        config: A pipeline YAML or export file, a dict of either, or a ``PipelineConfig``.
        corpus: The documents to index (a file, folder, DataFrame, list of dicts or ``Corpus``); None
            reopens the index saved in ``workdir`` on first use (an error naming the work dir when none is
            saved for this config; ``pipe.index(corpus)`` builds one).
        workdir: Indexes, embeddings and LLM replies. Default: ``.composer`` beside a config file (the
            folder itself when it is one: an export written into a study's work dir reuses its caches), and
            for an in-memory config the user's cache folder (``$COMPOSER_CACHE_DIR``, else
            ``$XDG_CACHE_HOME/composer``, else ``~/.cache/composer``): never a folder of wherever the
            process happens to run.
        qdrant: A Qdrant server URL; None keeps the index in Qdrant Edge, on disk under ``workdir``.

    Returns:
        The pipeline, indexed when ``corpus`` is given.

    Raises:
        ConfigError: A bad config (naming the file and key).
        InputError: An unreadable or invalid config file or corpus.

    Example:
        ::

            pipe = composer.load_pipeline(
                {"retrieval": {"mode": "bm25", "k": 5}}, "examples/arcd-sample/corpus.jsonl"
            )  # or composer export's best.yaml
            for hit in pipe.search("متى ولد جمال خاشقجي؟", k=3):
                print(hit.id, hit.score)
    """
    from composer.data.inputs import as_corpus
    from composer.evaluation.producers import pipeline_config
    from composer.pipeline.pipeline import Pipeline

    work = Path(workdir) if workdir is not None else _pipeline_workdir(config)
    pipe = Pipeline.from_config(pipeline_config(config), workdir=work, qdrant=qdrant)
    docs = as_corpus(corpus)
    if docs is not None:
        pipe.index(docs)
    return pipe


def _pipeline_workdir(config: object) -> Path:
    """Where ``load_pipeline`` keeps its caches unless told (see its docstring)."""
    if isinstance(config, str | Path):
        folder = Path(config).resolve().parent
        return folder if folder.name == DEFAULT_WORKDIR.name else folder / DEFAULT_WORKDIR.name
    from composer.files import default_cache_dir

    return default_cache_dir()


# -- optimize -----------------------------------------------------------------------------------------


@overload
def optimize(
    target: str | Path | ExperimentConfig | Mapping[str, object] | SystemFactory,
    *,
    space: str | Path | Mapping[str, object] | None = None,
    questions: Questions | None = None,
    corpus: CorpusSource | None = None,
    objective: ObjectiveConfig | Mapping[str, object] | None = None,
    n_trials: int | None = None,
    sampler: SamplerName | Mapping[str, object] | None = None,
    pruner: PrunerName | Mapping[str, object] | None = None,
    storage: str | None = None,
    mlflow: str | Mapping[str, object] | None = None,
    workdir: str | Path | None = None,
    name: str | None = None,
    concurrency: int = 8,
    estimate: Literal[False] = False,
    **experiment: Unpack[ExperimentOptions],
) -> StudyResult: ...


@overload
def optimize(
    target: str | Path | ExperimentConfig | Mapping[str, object] | SystemFactory,
    *,
    space: str | Path | Mapping[str, object] | None = None,
    questions: Questions | None = None,
    corpus: CorpusSource | None = None,
    objective: ObjectiveConfig | Mapping[str, object] | None = None,
    n_trials: int | None = None,
    sampler: SamplerName | Mapping[str, object] | None = None,
    pruner: PrunerName | Mapping[str, object] | None = None,
    storage: str | None = None,
    mlflow: str | Mapping[str, object] | None = None,
    workdir: str | Path | None = None,
    name: str | None = None,
    concurrency: int = 8,
    estimate: Literal[True],
    **experiment: Unpack[ExperimentOptions],
) -> Estimate: ...


def optimize(
    target: str | Path | ExperimentConfig | Mapping[str, object] | SystemFactory,
    *,
    space: str | Path | Mapping[str, object] | None = None,
    questions: Questions | None = None,
    corpus: CorpusSource | None = None,
    objective: ObjectiveConfig | Mapping[str, object] | None = None,
    n_trials: int | None = None,
    sampler: SamplerName | Mapping[str, object] | None = None,
    pruner: PrunerName | Mapping[str, object] | None = None,
    storage: str | None = None,
    mlflow: str | Mapping[str, object] | None = None,
    workdir: str | Path | None = None,
    name: str | None = None,
    concurrency: int = 8,
    estimate: bool = False,
    **experiment: Unpack[ExperimentOptions],
) -> StudyResult | Estimate:
    """Run (or continue) a study and return its winner.

    Composer samples ``space`` with Optuna, scores each system in batches with pruning, logs every trial
    to MLflow under one parent run, resumes when called again with the same ``name`` and ``workdir``, and
    re-scores the winner on the held-out split (``split={"held_out": 0.3}``). In-memory questions, corpora
    and spaces are written once, content-addressed, under ``<workdir>/inputs`` so the study records files
    it can be re-run from.

    Args:
        target: An experiment file, dict or ``ExperimentConfig``, or a factory ``settings -> system``
            (``composer.protocols.SystemFactory``; any system ``evaluate`` accepts).
        space: The format of ``search_spaces/*.yaml``, a dict or a file; or a flat mapping of dimensions:
            ``{"k": [3, 5, 10], "b": {"low": 0.3, "high": 0.9}}``, a list being the choices and a range's
            type read from its bounds; for a factory its keys are the factory's own settings.
        questions: The question set (a file, DataFrame, list of dicts or ``QuestionSet``).
        corpus: The documents (a file, folder, DataFrame, list of dicts or ``Corpus``).
        objective: The experiment's ``objective`` block (``metrics``, ``k``, ``secondary``), or an
            ``ObjectiveConfig``.
        n_trials: Trials to run in this call.
        sampler: An Optuna sampler name or block.
        pruner: An Optuna pruner name or block.
        storage: An Optuna storage URL (default: SQLite under ``workdir``).
        mlflow: A tracking URI or the experiment's ``mlflow`` block.
        workdir: The study's folder (caches, storage, inputs); default ``.composer``.
        name: The study's name: the same name and ``workdir`` resume it.
        concurrency: Questions in flight at once for a factory's systems.
        estimate: Run nothing: return the LLM calls, tokens and dollars the study would take, per
            stage and in all (an ``Estimate``; no request is sent, no study created).
        **experiment: Further experiment keys (``split``, ``timeout``, ``batch_size``, ``judge``, ``llm``,
            ``stop``...), typed by ``composer.options.ExperimentOptions``: a type checker catches a
            misspelt key or a wrong type, and at run time each is checked as the experiment file's.

    Returns:
        The study's result: its best trial, settings and scores (``held_out``, a ``HeldOut``, for the
        held-out ones).

    Raises:
        ConfigError: A bad experiment key or search space (naming the argument or key).
        InputError: An unreadable or invalid question set or corpus.
        ComposerError: The study stopped (its trials kept failing) or a system returned something
            unreadable.

    Example:
        ::

            def make_rag(settings: dict[str, Any]) -> composer.protocols.Retriever:
                return MyRetriever(k=settings["k"])  # any class with retrieve(question)

            result = composer.optimize(
                make_rag,
                space={"k": [3, 5, 10]},
                questions="examples/arcd-sample/questions.jsonl",
                corpus="examples/arcd-sample/corpus.jsonl",
                n_trials=5,
            )
            print(result.best_value, result.best_params)
    """
    from composer.study.arguments import experiment_from_call
    from composer.study.experiment import ExperimentConfig
    from composer.study.study import estimate_study, run_study

    factory: SystemFactory | None = None
    source: str | Path | ExperimentConfig | Mapping[str, object] | None = None
    if isinstance(target, str | Path | Mapping | ExperimentConfig):
        source = target
    elif callable(target):
        factory = target
    keys = {"search_space": space, "questions": questions, "corpus": corpus, "objective": objective,
            "n_trials": n_trials, "sampler": sampler, "pruner": pruner, "storage": storage,
            "workdir": workdir, "name": name, **experiment}
    exp = experiment_from_call(source, keys, mlflow=mlflow, factory=factory,
                               space_argument="space" if space is not None else "search_space")
    if estimate:
        from composer.cluster.refusals import ray_config, shared_caches

        return estimate_study(shared_caches(exp, ray_config(exp)))  # the caches its workers would read
    if exp.executor is not None and exp.executor.ray is not None:
        from composer.cluster.driver import optimize_on_ray

        if factory is not None:
            raise ConfigError("executor: ray runs workers in other processes: name the factory in the "
                              "experiment's system: (module:function) instead of passing it",
                              field="executor")
        return optimize_on_ray(exp)
    return run_study(exp, system=factory, concurrency=concurrency)


# -- optimize_prompt ----------------------------------------------------------------------------------


def optimize_prompt(
    study: str,
    *,
    experiment: str | Path | ExperimentConfig,
    seed_prompt: UserPrompt | str | None = None,
    **overrides: Any,
) -> PromptOptimization:
    """Optimize a finished study winner's answer prompt, as ``composer tune-prompt`` does.

    GEPA proposes prompts after reading the winner's failures; each is scored with the study's objective
    on its selection split, and the best is judged against its seed on the held-out split (the study's
    paired bootstrap). Only a "better" verdict registers it as a new prompt version and moves the alias;
    otherwise the seed stays and ``reason`` says why. A rerun returns the stored result and sends nothing.

    Args:
        study: The study's name.
        experiment: Its experiment (file or ``ExperimentConfig``): data, split, objective, ``llm:`` and
            ``stop:`` budget.
        seed_prompt: Start from this prompt (a ``UserPrompt``, a prompt file or a registry URI) instead of
            the winner's own.
        **overrides: Keys of the experiment's ``prompt_tuning:`` block (``max_proposals``,
            ``reflection_model``...), over it.

    Returns:
        The optimization: its candidates, the best, the held-out ``verdict``, ``registered`` URI.

    Raises:
        ConfigError: The experiment keeps no held-out split, or a bad ``prompt_tuning`` key.

    Example:
        ::

            result = composer.optimize_prompt("arabic-demo", experiment="experiments/arabic-llm.yaml",
                                              max_proposals=4)
            print(result.verdict, result.registered or result.reason)
    """
    from composer.study import prompt_stage
    from composer.study.experiment import ExperimentConfig, load_experiment

    exp = experiment if isinstance(experiment, ExperimentConfig) else load_experiment(Path(experiment))
    return prompt_stage.run(prompt_stage.prepare(exp, study_name=study, seed_prompt=seed_prompt,
                                                 overrides=overrides))
