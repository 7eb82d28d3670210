"""Composer as a library: ``evaluate`` a system, ``optimize`` one (Composer's pipeline or a user's factory),
``load_pipeline`` an exported winner. The CLI is a layer over these same paths.

Every entry point takes paths or objects alike (a question set as a file, a DataFrame, a list of dicts or a
``QuestionSet``) and raises ``ComposerError`` subclasses with the messages the CLI prints: a bad key in an
in-memory config names the key, never a raw pydantic ``ValidationError``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from pydantic import ValidationError

from composer.errors import ConfigError, config_error
from composer.protocols import CorpusSource, Evaluable, Questions, Split, SystemFactory

if TYPE_CHECKING:
    from composer.cost.estimate import Estimate
    from composer.data.types import Corpus, QuestionSet
    from composer.evaluation.gate import Scores
    from composer.evaluation.report import EvaluationReport
    from composer.evaluation.scoring import Judging, RankingPipeline
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import Pipeline
    from composer.study.experiment import ExperimentConfig
    from composer.study.study import StudyResult

DEFAULT_WORKDIR = Path(".composer")
PIPELINE_SUFFIXES = (".yaml", ".yml")


# -- evaluate -----------------------------------------------------------------------------------------


def evaluate(
    system: Evaluable,
    questions: Questions,
    corpus: CorpusSource | None = None,
    *,
    k: Sequence[int] = (1, 3, 5, 10),
    metrics: Sequence[str] | None = None,
    judge: str | Mapping[str, Any] | None = None,
    concurrency: int = 8,
    workdir: str | Path | None = None,
    mlflow: str | Mapping[str, Any] | bool | None = None,
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
    from composer.evaluation.gate import cutoffs_to_score, run_gate, stated_objective, with_objective

    work = Path(workdir) if workdir is not None else DEFAULT_WORKDIR
    docs = _corpus(corpus)
    question_set = _split(_questions(questions, docs), system, split)
    judging = _judging(judge, metrics, work)
    if baseline is None and (gate_metric != "composite" or margin):
        raise ConfigError("gate_metric= and margin= set the CI gate: give baseline=", field="baseline")
    stated = stated_objective(objective, system, baseline)
    k = cutoffs_to_score(k, stated[0] if stated else None, gate_metric if baseline is not None else None)
    report = _score(system, question_set, docs, judging, k, work, concurrency)
    if stated is not None:
        report = with_objective(report, *stated)
    if baseline is not None:
        old = _baseline(baseline, question_set, docs, judging, k, work, concurrency)
        verdict = run_gate(report, question_set.source, old, metric=gate_metric, margin=margin)
        report = report.with_gate(verdict)
    if mlflow:
        _log_to_mlflow(report, mlflow, work)
    return report


def _score(
    system: Any,
    question_set: QuestionSet,
    docs: Corpus | None,
    judging: Judging | None,
    k: Sequence[int],
    work: Path,
    concurrency: int,
) -> EvaluationReport:
    """``system``'s report on the questions (indexing ``docs`` first when it indexes)."""
    from composer.data.types import Corpus
    from composer.evaluation.scoring import score_pipeline

    producer = _producer(system, docs, work, concurrency)
    if judging is not None and not producer.can_answer:
        raise ConfigError(
            "the system has no answer(question, contexts) method, so there is no answer "
            "to judge: drop judge=, or give the system an answer method",
            field="judge",
        )
    meta: dict[str, Any] = {"system": producer.answerer}
    index = getattr(producer, "index", None)
    if docs is not None and index is not None:
        info = index(docs)
        if info is not None:
            meta["index"] = {"key": info.key, "chunks": info.n_chunks, "reused": info.reused}
    scored = score_pipeline(
        producer,
        question_set,
        docs if docs is not None else Corpus([], "<none>"),
        judging=judging,
        ks=k,
        batch_size=max(len(question_set), 1) if not producer.batched(True) else 100,
    )
    return scored.report.with_meta(meta)


def _split(questions: QuestionSet, system: Any, split: Split) -> QuestionSet:
    """The study's ``split`` of the questions, which only an exported best.yaml (as ``system``) records."""
    from composer.evaluation.splits import study_split

    if split not in ("all", "selection", "held_out"):
        raise ConfigError(f"expected all, selection or held_out, got {split!r}", field="split")
    exported = isinstance(system, str | Path) and Path(system).suffix.lower() in PIPELINE_SUFFIXES
    if split != "all" and not exported:
        raise ConfigError("the study's split is read from its exported best.yaml: give its path as system",
                          field="split")
    return study_split(questions, Path(str(system)), split)


def _baseline(
    baseline: Any,
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
    from composer.evaluation.report import EvaluationReport

    if isinstance(baseline, EvaluationReport):
        return Scores.of(baseline, "baseline=")
    if isinstance(baseline, str | Path) and Path(baseline).is_dir():
        return read_scores(Path(baseline))
    name = str(baseline) if isinstance(baseline, str | Path) else "baseline="
    if isinstance(baseline, str | Path) and Path(baseline).suffix.lower() in PIPELINE_SUFFIXES:
        check_baseline_file(Path(baseline))
    return Scores.of(_score(baseline, question_set, docs, judging, k, work, concurrency), name)


def _corpus(corpus: Any) -> Corpus | None:
    from composer.data import load_corpus
    from composer.data.types import Corpus

    if corpus is None or isinstance(corpus, Corpus):
        return corpus
    return load_corpus(corpus)


def _questions(questions: Any, corpus: Corpus | None) -> QuestionSet:
    from composer.data import load_questions
    from composer.data.types import QuestionSet

    if isinstance(questions, QuestionSet):
        return questions
    return load_questions(questions, corpus=corpus)


def _judging(
    judge: str | Mapping[str, Any] | None, metrics: Sequence[str] | None, workdir: Path
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
    from composer.evaluation.scoring import make_judging

    return make_judging(config, None, workdir)


def _producer(system: Any, corpus: Corpus | None, workdir: Path, concurrency: int) -> RankingPipeline:
    """Whatever ``system`` is, as the thing scoring asks to rank and answer batches."""
    from composer.evaluation.system import SystemPipeline, is_system, not_a_system
    from composer.pipeline.config import PipelineConfig
    from composer.pipeline.pipeline import Pipeline

    if isinstance(system, Pipeline):
        return _indexable(system, corpus)
    if (
        isinstance(system, PipelineConfig)
        or (isinstance(system, Mapping) and not _is_run(system))
        or (isinstance(system, str | Path) and Path(system).suffix.lower() in PIPELINE_SUFFIXES)
    ):
        return _indexable(load_pipeline(system, workdir=workdir), corpus)
    if isinstance(system, str | Path):
        from composer.data.runs import read_run

        run_file = read_run(system)
        return _given(run_file.hits, run_file.answers, corpus)
    if isinstance(system, Mapping):
        return _given(_run_of(system), {}, corpus)
    if is_system(system):
        return SystemPipeline(system, corpus=corpus, concurrency=concurrency)
    raise not_a_system(
        system,
        also="a pipeline config (path, dict, PipelineConfig), a Pipeline, a run (file or mapping question "
        "id -> ranked ids)",
    )


def _indexable(pipeline: Pipeline, corpus: Corpus | None) -> Pipeline:
    if corpus is None:
        raise ConfigError("a Composer pipeline indexes a corpus: give corpus=", field="corpus")
    return pipeline


def _is_run(mapping: Mapping[Any, Any]) -> bool:
    """A run maps question ids to lists; a pipeline config maps sections to mappings."""
    return bool(mapping) and all(isinstance(v, list | tuple) for v in mapping.values())


def _run_of(mapping: Mapping[Any, Any]) -> dict[str, Any]:
    from composer.data.fields import normal_id
    from composer.evaluation.system import as_hits

    return {normal_id(str(qid)): as_hits(items, str(qid)) for qid, items in mapping.items()}


def _given(run: dict[str, Any], answers: dict[str, str], corpus: Corpus | None) -> RankingPipeline:
    """A run (with the answers its file gives, if any) as a pipeline that has ranked and answered."""
    from composer.evaluation.runs import GivenRun, run_table

    return GivenRun(run, answers, run_table(run, corpus), can_answer=bool(answers))


def _log_to_mlflow(report: EvaluationReport, target: str | Mapping[str, Any] | bool, workdir: Path) -> str:
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
    config: str | Path | Mapping[str, Any] | PipelineConfig,
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
    from composer.pipeline.config import PipelineConfig, load_pipeline_config
    from composer.pipeline.pipeline import Pipeline

    work = Path(workdir) if workdir is not None else _pipeline_workdir(config)
    if isinstance(config, str | Path):
        config = load_pipeline_config(config)
    elif not isinstance(config, PipelineConfig):
        data = dict(config)
        if isinstance(data.get("pipeline"), Mapping):  # an export document
            data = dict(data["pipeline"])
        config = PipelineConfig.from_dict(data)
    pipe = Pipeline.from_config(config, workdir=work, qdrant=qdrant)
    docs = _corpus(corpus)
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
    target: str | Path | Mapping[str, Any] | SystemFactory,
    *,
    space: str | Path | Mapping[str, Any] | None = None,
    questions: Questions | None = None,
    corpus: CorpusSource | None = None,
    objective: Mapping[str, Any] | None = None,
    n_trials: int | None = None,
    sampler: str | Mapping[str, Any] | None = None,
    pruner: str | Mapping[str, Any] | None = None,
    storage: str | None = None,
    mlflow: str | Mapping[str, Any] | None = None,
    workdir: str | Path | None = None,
    name: str | None = None,
    concurrency: int = 8,
    estimate: Literal[False] = False,
    **experiment: Any,
) -> StudyResult: ...


@overload
def optimize(
    target: str | Path | Mapping[str, Any] | SystemFactory,
    *,
    space: str | Path | Mapping[str, Any] | None = None,
    questions: Questions | None = None,
    corpus: CorpusSource | None = None,
    objective: Mapping[str, Any] | None = None,
    n_trials: int | None = None,
    sampler: str | Mapping[str, Any] | None = None,
    pruner: str | Mapping[str, Any] | None = None,
    storage: str | None = None,
    mlflow: str | Mapping[str, Any] | None = None,
    workdir: str | Path | None = None,
    name: str | None = None,
    concurrency: int = 8,
    estimate: Literal[True],
    **experiment: Any,
) -> Estimate: ...


def optimize(
    target: str | Path | Mapping[str, Any] | SystemFactory,
    *,
    space: str | Path | Mapping[str, Any] | None = None,
    questions: Questions | None = None,
    corpus: CorpusSource | None = None,
    objective: Mapping[str, Any] | None = None,
    n_trials: int | None = None,
    sampler: str | Mapping[str, Any] | None = None,
    pruner: str | Mapping[str, Any] | None = None,
    storage: str | None = None,
    mlflow: str | Mapping[str, Any] | None = None,
    workdir: str | Path | None = None,
    name: str | None = None,
    concurrency: int = 8,
    estimate: bool = False,
    **experiment: Any,
) -> StudyResult | Estimate:
    """Run (or continue) a study and return its winner.

    Composer samples ``space`` with Optuna, scores each system in batches with pruning, logs every trial
    to MLflow under one parent run, resumes when called again with the same ``name`` and ``workdir``, and
    re-scores the winner on the held-out split (``split={"held_out": 0.3}``). In-memory questions, corpora
    and spaces are written once, content-addressed, under ``<workdir>/inputs`` so the study records files
    it can be re-run from.

    Args:
        target: An experiment file or dict, or a factory ``settings -> system``
            (``composer.protocols.SystemFactory``; any system ``evaluate`` accepts).
        space: The format of ``search_spaces/*.yaml``, a dict or a file; or a flat mapping of dimensions:
            ``{"k": [3, 5, 10], "b": {"low": 0.3, "high": 0.9}}``, a list being the choices and a range's
            type read from its bounds; for a factory its keys are the factory's own settings.
        questions: The question set (a file, DataFrame, list of dicts or ``QuestionSet``).
        corpus: The documents (a file, folder, DataFrame, list of dicts or ``Corpus``).
        objective: The experiment's ``objective`` block (``metric``, ``direction``...).
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
            ``stop``...).

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
    from composer.study.study import run_study

    factory: SystemFactory | None = None
    source: str | Path | Mapping[str, Any] | None = None
    if isinstance(target, str | Path | Mapping):
        source = target
    elif callable(target):
        factory = target
    exp = _experiment(
        source,
        space=space,
        questions=questions,
        corpus=corpus,
        objective=objective,
        n_trials=n_trials,
        sampler=sampler,
        pruner=pruner,
        storage=storage,
        mlflow=mlflow,
        workdir=workdir,
        name=name,
        factory=factory,
        extra=experiment,
    )
    if estimate:
        from composer.study.study import estimate_study

        return estimate_study(exp)
    return run_study(exp, system=factory, concurrency=concurrency)


def _experiment(
    target: str | Path | Mapping[str, Any] | None,
    *,
    space: str | Path | Mapping[str, Any] | None,
    questions: Any,
    corpus: Any,
    objective: Mapping[str, Any] | None,
    n_trials: int | None,
    sampler: str | Mapping[str, Any] | None,
    pruner: str | Mapping[str, Any] | None,
    storage: str | None,
    mlflow: str | Mapping[str, Any] | None,
    workdir: str | Path | None,
    name: str | None,
    factory: Callable[..., Any] | None,
    extra: Mapping[str, Any],
) -> ExperimentConfig:
    """The experiment a call describes: the file or dict given, overridden by the keyword arguments."""
    from composer.study.experiment import ExperimentConfig, load_experiment

    base: dict[str, Any] = {}
    source = "<optimize>"
    if isinstance(target, str | Path):
        base = load_experiment(target).model_dump(exclude_unset=True)
        source = str(target)
    elif isinstance(target, Mapping):
        base = dict(target)
    overrides = {
        "search_space": space,
        "questions": questions,
        "corpus": corpus,
        "objective": objective,
        "n_trials": n_trials,
        "sampler": sampler,
        "pruner": pruner,
        "storage": storage,
        "workdir": workdir,
        "name": name,
        **extra,
    }
    data = {**base, **{key: value for key, value in overrides.items() if value is not None}}
    if isinstance(mlflow, str):
        data["mlflow"] = {**dict(data.get("mlflow") or {}), "tracking_uri": mlflow}
    elif mlflow is not None:
        data["mlflow"] = dict(mlflow)
    data.setdefault("name", "composer-study")
    work = Path(data.get("workdir") or DEFAULT_WORKDIR).resolve()
    data["workdir"] = work
    inputs = work / "inputs"
    if "corpus" in data:
        data["corpus"] = _as_file(data["corpus"], inputs, "corpus")
    if "questions" in data:
        data["questions"] = _as_file(data["questions"], inputs, "questions")
    if isinstance(data.get("search_space"), Mapping):  # checked as given: errors name the argument's keys
        from composer.study.space import parse_search_space

        argument = "space" if space is not None else "search_space"
        parse_search_space(dict(data["search_space"]), free=factory is not None, argument=argument)
    if "search_space" in data:
        data["search_space"] = _as_file(data["search_space"], inputs, "space")
    if factory is not None:
        data["system"] = _factory_name(factory)
        data.setdefault("corpus", None)
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, source) from None


def _factory_name(factory: Callable[..., Any]) -> str:
    """How a study names its factory (``module:qualname``): recorded, never imported back from here."""
    module = getattr(factory, "__module__", None) or "<unknown>"
    return f"{module}:{getattr(factory, '__qualname__', type(factory).__name__)}"


def _as_file(value: Any, inputs: Path, kind: str) -> Path:
    """A path as given; an in-memory corpus, question set or space written once under ``inputs``, named by
    its content, so the study's provenance names a file and a changed input is a new file."""
    from composer.data.types import Corpus, QuestionSet
    from composer.yamlfile import dump_yaml

    if isinstance(value, str | Path):
        return Path(value).resolve()
    if kind == "space":
        if not isinstance(value, Mapping):
            raise ConfigError("expected a search space file or mapping", field="space")
        return _write_once(inputs, "space", ".yaml", dump_yaml(dict(value)))
    if kind == "corpus":
        docs = value if isinstance(value, Corpus) else _corpus(value)
        assert docs is not None
        rows = [
            {
                "id": d.id,
                "title": d.title,
                "text": d.text,
                **({"metadata": dict(d.metadata)} if d.metadata else {}),
            }
            for d in docs
        ]
    else:
        items = value if isinstance(value, QuestionSet) else _questions(value, None)
        rows = [
            {
                "id": q.id,
                "question": q.question,
                "relevant_ids": list(q.relevant_ids),
                "answers": list(q.answers),
                "context": list(q.context),
                **({"reference_answer": q.reference_answer} if q.reference_answer else {}),
            }
            for q in items
        ]
    text = "".join(json.dumps(row, ensure_ascii=False, default=str) + "\n" for row in rows)
    return _write_once(inputs, kind, ".jsonl", text)


def _write_once(folder: Path, kind: str, suffix: str, text: str) -> Path:
    from composer.files import write_atomic

    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
    path = folder / f"{kind}-{digest}{suffix}"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    return path
