"""The judges of an evaluation or a study, set up once from its ``judge:`` settings and shared by every
batch and trial that it scores (``composer.evaluation.scoring``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from composer.errors import ConfigError
from composer.judges import JUDGE_METRICS, EmbedFn, JudgeConfig, JudgeSettings, LLMJudge, make_judges
from composer.llm import LLMClient, LLMConfig


@dataclass(frozen=True)
class Judging:
    """The judges of an evaluation or a study: one client (one model, temperature 0) shared by every batch
    and trial."""

    client: LLMClient
    settings: JudgeSettings
    embed: EmbedFn | None = None

    @property
    def model(self) -> str:
        return self.client.config.model

    @cached_property
    def judges(self) -> dict[str, LLMJudge]:
        return make_judges(self.client, self.settings, self.embed)


def make_judging(
    judge: JudgeConfig, llm: LLMConfig | None, workdir: Path, *, also: Sequence[str] = ()
) -> Judging:
    """The judge of an evaluation or a study from its ``judge:`` settings over the generator's ``llm``
    settings; ``also`` adds judge metrics (those an objective weighs). Replies are cached under
    ``<workdir>/cache/llm``."""
    from composer.embedding import CachedEmbedder
    from composer.pipeline.workspace import Workspace, shared_embedder

    config = judge.llm_config(llm)
    if config is None:
        raise ConfigError(
            "the judge needs a model: set judge.model or llm.model (or --judge / --llm)", field="judge.model"
        )
    extra = [m for m in also if m in JUDGE_METRICS and m not in judge.metrics]
    if extra:
        judge = judge.model_copy(update={"metrics": (*judge.metrics, *extra)})
    workspace = Workspace.get(workdir)
    embed: EmbedFn | None = None
    if judge.embedding is not None and judge.needs_embedding():
        embed = CachedEmbedder(shared_embedder(judge.embedding), workspace.embeddings).encode_queries
    return Judging(workspace.client(config), judge.settings, embed)
