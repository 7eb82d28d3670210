"""The keyword arguments of ``composer.optimize`` and ``composer.evaluate`` as types, so that a type checker
catches a misspelt experiment key or a value of the wrong type before a study starts.

``ExperimentOptions`` mirrors ``ExperimentConfig``'s fields that ``optimize`` takes as ``**experiment``
(``tests/api/test_typed_front_door.py`` fails when the two drift apart); each block takes its pydantic model
or a mapping of its keys, which ``ExperimentConfig`` validates at run time, naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal, TypedDict

if TYPE_CHECKING:
    from composer.evaluation.splits import SplitConfig
    from composer.judges.config import JudgeConfig
    from composer.llm.config import LLMConfig
    from composer.prompt_tuning.config import PromptTuningConfig
    from composer.study.experiment import ExecutorConfig, StagesConfig, StopConfig
    from composer.synth.config import SynthConfig

SamplerName = Literal["auto", "tpe", "random", "grid", "nsga2"]
"""The samplers an experiment's ``sampler:`` may name (``SamplerConfig.name``)."""

PrunerName = Literal["median", "percentile", "hyperband", "successive_halving", "none"]
"""The pruners an experiment's ``pruner:`` may name (``PrunerConfig.name``)."""


class ExperimentOptions(TypedDict, total=False):
    """The experiment's keys ``composer.optimize`` takes as ``**experiment``: every ``ExperimentConfig``
    field it has no parameter of its own for (docs/reference/files.md describes each)."""

    system: str
    timeout: float | None
    batch_size: int
    split: SplitConfig | Mapping[str, object] | None
    max_questions: int | None
    heartbeat_interval: int
    stop: StopConfig | Mapping[str, object]
    strategy: Literal["joint", "staged"]
    stages: StagesConfig | Mapping[str, object]
    qdrant: str | None
    executor: ExecutorConfig | Mapping[str, object] | None
    caches: str | None
    prompt_tuning: PromptTuningConfig | Mapping[str, object] | None
    allow_env: list[str]
    llm: LLMConfig | Mapping[str, object] | None
    judge: JudgeConfig | Mapping[str, object] | None
    synth: SynthConfig | Mapping[str, object] | None


class EvaluationMlflow(TypedDict, total=False):
    """Where ``composer.evaluate(mlflow=...)`` logs its report: each key optional."""

    tracking_uri: str
    experiment: str
    run_name: str
