"""Experiment files (``experiments/*.yaml``): what to optimize, on which data, and where results live.

Paths inside the file (corpus, questions, search space, workdir) are relative to the file, so an
experiment runs the same from any directory; so is the default workdir, ``.composer`` beside the file (the
shipped experiments name ``../.composer``, the repository's, which the other ``composer`` commands use from
its root, so a study shares their embedding cache and indexes).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from composer.errors import ConfigError, config_error
from composer.evaluation.splits import SplitConfig
from composer.judges.config import JudgeConfig, load_judge_file, resolve_judge
from composer.llm.config import LLMConfig
from composer.objective import SECONDARY_DIRECTIONS, ObjectiveConfig
from composer.prompt_tuning.config import PromptTuningConfig
from composer.secrets import allowed_list
from composer.settings import Strict
from composer.synth.config import SynthConfig
from composer.yamlfile import read_yaml

DEFAULT_WORKDIR = Path(".composer")

class _Named(Strict):
    """``name`` plus keyword options for the Optuna class; a bare string is the name alone."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class SamplerConfig(_Named):
    name: Literal["auto", "tpe", "random", "grid", "nsga2"] = "auto"
    seed: int | None = 0


class PrunerConfig(_Named):
    name: Literal["median", "percentile", "hyperband", "successive_halving", "none"] = "median"


class StopConfig(Strict):
    """When failing trials end a study. A fault (a dead endpoint, a broken store, a bad key) fails every
    trial alike, and failed trials hold none of the ``n_trials``: without a limit the study would loop,
    and bill a paid LLM that answers 429, without end. Counted over the study's trials in number order,
    leaving out what says nothing about the pipeline: repeats, invalid sampled combinations, trials whose
    process died (retried) and surplus trials of racing workers."""

    consecutive_failures: int | None = Field(
        default=3, ge=1, description="Stop after this many failed trials in a row (null: never)."
    )
    failed_share: float | None = Field(
        default=0.5, gt=0.0, le=1.0,
        description="Stop when more than this share of the trials failed, from the 10th trial on "
        "(null: never).",
    )
    max_cost_usd: float | None = Field(
        default=None, gt=0,
        description="LLM budget in dollars for the study's trials, summed over every worker through the "
        "storage and checked after each batch of questions (null: none).",
    )
    max_llm_calls: int | None = Field(
        default=None, ge=1,
        description="LLM requests (what reached the endpoint; cached replies are free) for the study's "
        "trials, checked like max_cost_usd (null: none).",
    )


class StagesConfig(Strict):
    """How ``strategy: staged`` splits ``n_trials``: stage 1 searches the retrieval dimensions on the
    objective's retrieval metrics (no LLM call), stage 2 the generation dimensions over stage 1's best."""

    retrieval_trials: int | None = Field(
        default=None, ge=1,
        description="Trials of stage 1 (retrieval dimensions, retrieval metrics, no LLM call); default "
        "half of n_trials. Stage 2 runs the rest.",
    )
    top_n: int = Field(
        default=3, ge=1,
        description="Distinct best stage-1 retrieval configurations that stage 2 crosses with the "
        "generation dimensions.",
    )
    prompt: bool = Field(
        default=False,
        description="After stage 2, optimize the winner's answer prompt (the prompt stage: GEPA, settings "
        "from prompt_tuning:); it needs a held-out split.",
    )


class EncodersConfig(Strict):
    """The actors that encode a study's missing chunks on Ray (``executor.ray.encoders``); what is unset
    is decided from the cluster, so that the workers are always placed first."""

    actors: int | None = Field(
        default=None, ge=0,
        description="Encoding actors (0: each worker encodes itself). Default: one per worker, fewer when "
        "the CPUs (GPUs, for an embedding on cuda) the workers leave free are fewer.",
    )
    resources: dict[str, float] | None = Field(
        default=None,
        description="Ray resources each actor reserves, e.g. {CPU: 2} or {CPU: 1, GPU: 0.5}; an actor "
        "encodes with as many threads as its whole CPUs. Default: an equal share of what the workers "
        "leave free.",
    )


RAY_RESERVED = ("memory", "object_store_memory", "bundle")
"""Resource names Ray keeps for itself: a task that asks for them fails when it is submitted."""


def ray_resources(resources: dict[str, float]) -> dict[str, float]:
    """Ray resources as the experiment is read (a validator): Ray refuses a negative amount or one of its
    reserved names only once the study and its MLflow run are open."""
    for name, amount in resources.items():
        if amount < 0:
            raise ValueError(f"{name}: {amount:g} is negative: a worker reserves 0 or more")
        if name in RAY_RESERVED:
            raise ValueError(f"{name} is reserved by Ray: ask for CPU, GPU or a custom resource")
    return resources


class RayConfig(Strict):
    """Where a study's workers run on Ray (``executor: {ray: ...}``, ``composer optimize --ray``)."""

    address: str = Field(
        default="local",
        description="local (start Ray on this machine), auto (the cluster this machine belongs to) or "
        "ray://HOST:10001 (a remote cluster's client port).",
    )
    workers: int = Field(default=2, ge=1, description="Composer workers, each a Ray task on the study.")
    resources: Annotated[dict[str, float], AfterValidator(ray_resources)] = Field(
        default_factory=lambda: {"CPU": 1.0},
        description="Ray resources each worker reserves, e.g. {CPU: 2, GPU: 0.5}.",
    )
    encoders: EncodersConfig = Field(
        default_factory=EncodersConfig,
        description="The study's encoding actors, when its configurations encode with a model.",
    )


class ExecutorConfig(Strict):
    """Which processes run a study's trials: this one (no ``executor:``) or Ray workers."""

    ray: RayConfig | None = None


class MlflowConfig(Strict):
    tracking_uri: str | None = Field(default=None, description="Default: sqlite:///<workdir>/mlflow.db")
    experiment: str | None = Field(default=None, description="MLflow experiment; default the study name.")
    traces: int | None = Field(
        default=25, ge=0,
        description="Per-question MLflow traces per trial, the first N questions (null = all, 0 = none). "
        "Each costs ~0.1 s to store; every question is in the trial's traces.jsonl artifact anyway.",
    )


SYNTH_SPLIT = {"held_out": 0.3, "seed": 0}


def check_study_name(name: str) -> str:
    """``name`` if it can name a study: it names files and folders in the work dir (``spool/<name>``,
    ``<name>-report.html``) and is printed in the live view, so it holds no path separator, is not only
    dots, and has no markup brackets. The one check of the experiment's ``name:``, the API's ``name=`` and
    the CLI's ``--study-name`` and STUDY."""
    if not _STUDY_NAME.fullmatch(name) or not name.strip("."):
        raise ValueError(f"not a study name: {name!r}; use letters, digits, '_', '.' and '-' (not only "
                         "dots), e.g. my-study.v2")
    return name


_STUDY_NAME = re.compile(r"[\w.\-]+")


class ExperimentConfig(Strict):
    """An experiment file (``experiments/*.yaml``) as a model: what a study optimizes, on which data, and
    where its results live. ``composer.optimize`` takes one as its target, and its keys as keyword
    arguments (typed by ``composer.options.ExperimentOptions``); docs/reference/experiment.md lists every key.

    Attributes:
        name: The study's name: the same name and work dir resume it.
        corpus: The corpus (optional with ``system``, which searches its own).
        questions: The question set (or ``synth``, which generates one).
        search_space: The search-space file.
        objective: What the study maximizes (an ``ObjectiveConfig``).
        n_trials: Trials to run (with ``timeout``, whichever ends first).
        workdir: Caches, storage and inputs; default ``.composer``.

    Example:
        ::

            experiment = composer.ExperimentConfig(
                name="demo",
                corpus="examples/arcd-sample/corpus.jsonl",
                questions="examples/arcd-sample/questions.jsonl",
                search_space="search_spaces/arabic-offline.yaml",
                n_trials=3,
            )
            result = composer.optimize(experiment, batch_size=20)
    """

    name: Annotated[str, AfterValidator(check_study_name)]
    corpus: Path | None = Field(
        default=None, description="The corpus; optional with system: (the system searches its own)."
    )
    system: str | None = Field(
        default=None,
        pattern=r"^[\w.<>]+:[\w.<>]+$",
        description="A factory `package.module:function` called with each trial's settings and returning a "
        "RAG system (an object with retrieve(question) and optionally answer(question, contexts)); the "
        "search space's keys are then the factory's own settings.",
    )
    questions: Path | None = Field(default=None, description="The question set; or generate one (synth).")
    search_space: Path
    objective: ObjectiveConfig = ObjectiveConfig()
    sampler: SamplerConfig = SamplerConfig()
    pruner: PrunerConfig = PrunerConfig()
    n_trials: int | None = Field(default=20, ge=1)
    timeout: float | None = Field(default=None, gt=0, description="Seconds for the whole study.")
    batch_size: int = Field(default=50, ge=1, description="Questions per pruning step.")
    split: SplitConfig | None = None
    max_questions: int | None = Field(
        default=None, ge=1,
        description="Use only this many of the questions (a smoke study), picked before the split with "
        "each stratum (answerable or not, language) keeping its share, the same ones for the same split "
        "seed (0 without split:) (null: all).",
    )
    storage: str | None = Field(default=None, description="Optuna RDB URL; default sqlite:///<workdir>/optuna.db")
    heartbeat_interval: int = Field(default=60, ge=1, description="Seconds; a trial silent for 2x is failed.")
    stop: StopConfig = StopConfig()
    strategy: Literal["joint", "staged"] = Field(
        default="joint",
        description="joint: one search over every dimension; staged: the retrieval dimensions first, on "
        "the retrieval metrics alone (no LLM call, a study of its own, <name>.retrieval), then LLM calls "
        "only for stages.top_n best retrieval configurations crossed with the generation dimensions.",
    )
    stages: StagesConfig = StagesConfig()
    prompt_tuning: PromptTuningConfig | None = Field(
        default=None,
        description="How `composer tune-prompt` and the staged prompt stage (stages.prompt) optimize the "
        "winner's answer prompt: reflection model, proposals, scored questions, registry name and alias.",
    )
    mlflow: MlflowConfig = MlflowConfig()
    qdrant: str | None = Field(default=None, description="Qdrant url or ':memory:'; default Qdrant Edge.")
    executor: ExecutorConfig | None = Field(
        default=None, description="Run the study's workers on Ray: {ray: {address, workers, resources}}."
    )
    caches: str | None = Field(
        default=None,
        description="Where the embedding and LLM reply caches live: unset, SQLite files in the work dir "
        "(one machine); a PostgreSQL URL, tables every worker of a cluster shares.",
    )
    workdir: Path | None = None
    allow_env: Annotated[list[str], AfterValidator(allowed_list)] = Field(
        default_factory=list, description="Environment variables the study's configs may read keys from "
        "(api_key_env), besides COMPOSER_* ones and $COMPOSER_ALLOW_ENV's (docs/security.md).")
    llm: LLMConfig | None = Field(
        default=None,
        description="The generator: its model answers every trial whose search space picks no "
        "generation.model; endpoint, key variable (api_key_env), timeout, concurrency, retries and prices "
        "apply to every LLM call of the study. Without it (and no generation.model) answers are extractive.",
    )
    judge: JudgeConfig | None = Field(
        default=None,
        description="The judge (model defaults to llm.model, temperature 0), its metrics, correctness "
        "weights, blend/fallback, max_failure_share, prompt variant, examples and min_kappa; or a judge "
        "file as `composer judges tune --out` writes one.",
    )
    synth: SynthConfig | None = Field(
        default=None,
        description="A corpus without questions: generate the set (`composer synth`'s settings; llm "
        "defaults to the llm: block), once per corpus and settings, held out 30% unless split says "
        "otherwise.",
    )

    @model_validator(mode="before")
    @classmethod
    def _synth_defaults(cls, data: Any) -> Any:
        """``synth:`` borrows the ``llm:`` block's model and holds questions out by default: a generated
        set is what the winner was chosen on, so it is re-scored on questions it was not."""
        if not isinstance(data, dict) or not isinstance(data.get("synth"), dict):
            return data
        synth = dict(data["synth"])
        if "llm" not in synth and data.get("llm") is not None:
            synth["llm"] = data["llm"]
        return {**data, "synth": synth, "split": data.get("split", SYNTH_SPLIT)}

    @model_validator(mode="after")
    def _bounded(self) -> ExperimentConfig:
        if self.n_trials is None and self.timeout is None:
            raise ValueError("give n_trials, timeout or both: a study needs an end")
        if (self.questions is None) == (self.synth is None):
            raise ValueError("give questions (a file) or synth (generate them), one of the two")
        if self.corpus is None and (self.system is None or self.synth is not None):
            raise ValueError("give the corpus (only a system: that searches its own may go without one)")
        if "stages" in self.model_fields_set and self.strategy != "staged":
            raise ValueError("stages: applies to strategy: staged only (add strategy: staged, or remove "
                             "stages:)")
        return self

    # Resolved locations --------------------------------------------------------------------------
    @property
    def work_dir(self) -> Path:
        """The work dir, resolved (``.composer`` when none is given)."""
        return (self.workdir if self.workdir is not None else DEFAULT_WORKDIR).resolve()

    @property
    def storage_url(self) -> str:
        """The Optuna storage (default: ``optuna.db`` in the work dir)."""
        return self.storage or default_storage(self.work_dir)

    @property
    def tracking_uri(self) -> str:
        """The MLflow store (default: ``mlflow.db`` in the work dir)."""
        return self.mlflow.tracking_uri or default_tracking_uri(self.work_dir)

    @property
    def mlflow_experiment(self) -> str:
        """The MLflow experiment (default: the study's name)."""
        return self.mlflow.experiment or self.name

    def secondary_directions(self) -> list[Literal["minimize", "maximize"]]:
        """Optuna's direction for each secondary objective, in order."""
        return [SECONDARY_DIRECTIONS[m] for m in self.objective.secondary]

    @property
    def multi_objective(self) -> bool:
        """True with secondary objectives: the study is then multi-objective (NSGA-II)."""
        return bool(self.objective.secondary)


def default_storage(workdir: Path) -> str:
    """The Optuna storage `composer optimize` uses when the experiment names none."""
    from composer.store import sqlite_url

    return sqlite_url(workdir.resolve() / "optuna.db")


def default_tracking_uri(workdir: Path) -> str:
    """The MLflow store `composer optimize` uses when the experiment names none."""
    from composer.store import sqlite_url

    return sqlite_url(workdir.resolve() / "mlflow.db", mlflow=True)


def import_factory(ref: str) -> Callable[[dict[str, Any]], Any]:
    """The factory ``package.module:function`` names (the experiment's ``system:``), imported from
    ``PYTHONPATH`` or, as ``python -m`` would, the current directory."""
    import importlib
    import sys

    module_name, _, attr = ref.partition(":")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.append(str(Path.cwd()))
    try:
        found: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot import the system factory {ref!r}: {exc}", field="system") from None
    if not callable(found):
        raise ConfigError(f"{ref!r} is not callable: name a function settings -> system", field="system")
    return found


def load_experiment(path: str | Path) -> ExperimentConfig:
    p = Path(path)
    data = read_yaml(p, what="experiment file")
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (name, corpus, questions, search_space...)", path=p)
    base = p.resolve().parent
    if data.get("workdir") is None:  # beside the file, like every other path: the same from any directory
        data["workdir"] = str(DEFAULT_WORKDIR)
    for key in ("corpus", "questions", "search_space", "workdir"):
        if isinstance(data.get(key), str):
            data[key] = (base / data[key]).resolve()
    if isinstance(data.get("judge"), str):  # a judge file, as `composer judges tune --out` writes one
        judge_file = base / data["judge"]
        if not judge_file.is_file():  # the experiment's line is what to fix, not the file it names
            raise ConfigError(f"judge file {judge_file} not found (a judge block, or the path of a YAML "
                              "file holding one)", path=p, field="judge")
        data["judge"] = load_judge_file(judge_file)
    try:
        exp = ExperimentConfig.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, p) from None
    if exp.judge is None:  # the judge's own prompts read (files, registry URIs) and checked before anything
        return exp
    return exp.model_copy(update={"judge": resolve_judge(exp.judge, path=p, tracking_uri=exp.tracking_uri)})


def locate_study(
    study: str | None, experiment: Path | None, storage: str | None
) -> tuple[str, str, ExperimentConfig | None]:
    """(study name, Optuna storage URL, experiment) for commands that read a finished or running study.

    The storage is ``--storage`` if given, else the experiment file's, else the default workdir's
    (``sqlite:///./.composer/optuna.db``); the study name defaults to the experiment's name.
    """
    exp = load_experiment(experiment) if experiment is not None else None
    name = study or (exp.name if exp is not None else None)
    if name is None:
        raise ConfigError("name the study, or give --experiment EXPERIMENT.yaml", field="study")
    url = storage or (exp.storage_url if exp is not None else default_storage(DEFAULT_WORKDIR))
    looked = exp.work_dir / "optuna.db" if exp is not None and exp.storage is None else None
    if storage is None and looked is not None and not looked.exists():
        raise ConfigError(
            f"no study storage at {looked}: the work dir of {experiment} is {looked.parent} (its workdir:, "
            "else .composer beside the file); run `composer optimize` on it first, or give --storage URL",
            field="workdir",
        )
    return name, url, exp
