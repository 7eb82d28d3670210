"""The ``judge:`` block of an experiment (and ``composer eval --judge``): which model judges, and how."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from composer.embedding.config import EmbeddingConfig
from composer.errors import ConfigError, config_error
from composer.judges.own_prompts import resolve_judge_prompts
from composer.judges.panel import JudgeSettings
from composer.llm.config import EndpointChecks, LLMConfig, TokenPrice, helper_config
from composer.yamlfile import read_yaml

_LLM_FIELDS = ("api_base", "api_key_env", "timeout", "max_concurrency", "max_retries", "price")

MIN_KAPPA = 0.4
"""Below this kappa a judge's verdicts are read with a warning: the conventional edge of "moderate"
agreement (Landis & Koch 1977); under it the judge disagrees with people too often to rank trials by."""


class JudgeConfig(EndpointChecks, JudgeSettings):
    """JudgeSettings plus the judge's model and endpoint. Unset fields inherit the generator's settings
    (the experiment's ``llm:``); the judge always runs at temperature 0.

    One judge for a whole study: ``model`` defaults to ``llm.model``, never to a trial's sampled
    generator, or trials would be graded by different judges. ``embedding`` feeds answer_correctness'
    similarity term and answer_relevancy (null drops the similarity term, as the reason then says).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    model: str | None = None
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = Field(default=None, gt=0, description="seconds per request")
    max_concurrency: int | None = Field(default=None, ge=1)
    max_retries: int | None = Field(default=None, ge=0)
    price: TokenPrice | None = None
    embedding: EmbeddingConfig | None = EmbeddingConfig()
    min_kappa: float = Field(
        default=MIN_KAPPA,
        ge=-1.0,
        le=1.0,
        description="a study warns before its first trial when the judge's checked agreement with human "
        "labels is below this Cohen's kappa (or was never checked)",
    )

    @model_validator(mode="before")
    @classmethod
    def _contexts_come_from_the_pipeline(cls, data: Any) -> Any:
        if isinstance(data, dict) and "max_contexts" in data:
            raise ValueError(
                "the judges read the passages the answer was generated from: set generation.max_contexts "
                "in the pipeline (or the search space) instead of judge.max_contexts"
            )
        return data

    def llm_config(self, llm: LLMConfig | None) -> LLMConfig | None:
        """The judge's LLMConfig on top of the generator's ``llm``; None when there is no model at all."""
        base = helper_config(llm, self.model)
        if base is None:
            return None
        update: dict[str, Any] = {k: v for k in _LLM_FIELDS if (v := getattr(self, k)) is not None}
        return LLMConfig.model_validate({**base.model_dump(), **update}) if update else base

    @property
    def settings(self) -> JudgeSettings:
        """The plain JudgeSettings the judges take."""
        return JudgeSettings.model_validate(self.model_dump(include=set(JudgeSettings.model_fields)))

    def needs_embedding(self) -> bool:
        """Whether a configured metric uses the embedding function."""
        return "answer_relevancy" in self.metrics or (
            "answer_correctness" in self.metrics and self.correctness_weights.similarity > 0
        )


def resolve_judge(
    judge: JudgeConfig, *, path: str | Path, tracking_uri: str | None, files_only: bool = False
) -> JudgeConfig:
    """``judge`` with its own verdict prompts (``judge.prompt.<metric>``) resolved and checked: file paths
    relative to ``path`` (the file the block was written in), registry URIs (unless ``files_only``) with
    ``tracking_uri``. A failure is one ConfigError naming the field, and the file it came from (``path``
    for a prompt written in the block)."""
    where = Path(path)
    try:
        prompt = resolve_judge_prompts(judge.prompt, base=where.resolve().parent, tracking_uri=tracking_uri,
                                       files_only=files_only)
    except ConfigError as exc:
        if exc.path is None:
            raise ConfigError(exc.raw_message, path=where, field=exc.field) from None
        raise
    return judge if prompt is judge.prompt else judge.model_copy(update={"prompt": prompt})


def load_judge_file(path: str | Path) -> JudgeConfig:
    """The judge block of a YAML file (``composer judges tune --out``): its ``judge:`` mapping, or the
    whole file when it is the block itself; what an experiment's ``judge: FILE`` reads, its own prompts'
    files read relative to it (registry URIs are the experiment's to resolve, in its store). A bad block
    is a ConfigError naming this file and the key."""
    data = read_yaml(path, what="judge file")
    block = data.get("judge", data) if isinstance(data, dict) else None
    if not isinstance(block, dict):
        raise ConfigError("expected a judge block (model, metrics, prompt, examples...)", path=path)
    try:
        judge = JudgeConfig.model_validate(block)
    except ValidationError as exc:
        raise config_error(exc, path, under="judge" if "judge" in data else None) from None
    return resolve_judge(judge, path=path, tracking_uri=None, files_only=True)
