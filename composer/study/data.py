"""What every trial of a study shares (``StudyData``), and a configuration's identity (``config_hash``).

The data is made once per study and never changed after: what the study decides about its objective at its
first trial (``settle``) comes back as the data in force, and the data itself stays as it was made.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from composer.data.types import Corpus, QuestionSet
from composer.errors import ComposerError
from composer.evaluation.judging import Judging, make_judging
from composer.evaluation.scoring import (
    DEFAULT_KS,
    BatchHook,
    RankingPipeline,
    Scored,
    score_pipeline,
)
from composer.index.bm25 import Progress
from composer.judges import JudgeConfig
from composer.llm import LLMConfig
from composer.objective import Objective, ObjectiveConfig, available_metrics, needs_answers
from composer.pipeline.config import PipelineConfig
from composer.prompts import UserPrompt
from composer.protocols import SystemFactory
from composer.study.leaderboard import WEIGHTS_ATTR
from composer.study.space import SearchSpace

if TYPE_CHECKING:
    import optuna

    from composer.evaluation.system import SystemPipeline
    from composer.pipeline.pipeline import Pipeline

ANSWERS_ATTR = "system_answers"
"""Study user attribute: whether the study's (user's) systems answer, as its first built system showed."""
PINS_ATTR = "composer.prompt_pins"
"""Study user attribute: each registry prompt its space names (``prompts:/NAME@ALIAS``) -> the version it
resolved to when the study first ran (``prompts:/NAME/VERSION``): what a resumed study, its workers, its
held-out re-score and ``tune-prompt`` resolve it to, wherever the alias has moved since."""


Configured = PipelineConfig | dict[str, Any]
"""What a trial's parameters make: a pipeline config, or the settings a user's factory is called with."""


def config_dict(config: Configured) -> dict[str, Any]:
    return config.to_dict() if isinstance(config, PipelineConfig) else config


def config_hash(config: Configured) -> str:
    """Identity of a configuration: equal hashes mean equal pipelines, whatever parameters produced them.
    A team's prompt counts by its text (``UserPrompt.sha256``), not by where it was read from (its
    ``source`` and ``version`` stay in the trial's record): the same study from another checkout, or on
    workers that mount it elsewhere, finds its trials and rebuilds its winner."""
    data = config_dict(config)
    if isinstance(config, PipelineConfig) and isinstance(prompt := config.generation.prompt, UserPrompt):
        data = {**data, "generation": {**data["generation"], "prompt": prompt.sha256}}
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class StudyData:
    """What every trial of a study shares: the data, the space, the objective, where indexes live, and
    the LLM settings: ``llm`` (the experiment's ``llm:`` block: the default generator and how to call
    it) and ``judge`` (one judge for every trial, by default ``llm.model``)."""

    corpus: Corpus
    questions: QuestionSet
    space: SearchSpace
    objective_config: ObjectiveConfig
    workdir: Path
    qdrant: str | None = None
    batch_size: int = 50
    llm: LLMConfig | None = None
    judge: JudgeConfig | None = None
    system: SystemFactory | None = None
    """A user's factory: trials then build ``system(settings)`` from the (free) space, not a Pipeline."""
    concurrency: int = 8
    """Questions a user's system is asked at once."""
    prompt_pins: Mapping[str, str] = field(default_factory=dict)
    """The registry prompts the space names, pinned as they resolved (``PINS_ATTR``): ``settle`` keeps
    those the study has not pinned yet."""
    _warned_unheard: bool = field(default=False, init=False, repr=False, compare=False)
    """Whether a user's system that takes no history was warned of (once a study)."""

    def __post_init__(self) -> None:
        if (self.system is not None) != self.space.free:
            raise ComposerError("a factory's study needs a free search space, a pipeline's a pipeline one")
        if self.llm is not None and self.system is None:  # the space's own generation settings win
            self.space = self.space.under({"generation": generation_defaults(self.llm)})
        self.space.check_conditions()

    @property
    def ks(self) -> tuple[int, ...]:
        return tuple(sorted({*DEFAULT_KS, self.objective_config.k}))

    def configure(self, params: Mapping[str, Any]) -> tuple[Configured, str]:
        """A trial's parameters as what it runs: a pipeline config (with what the ``llm:`` block gives its
        generator written out, so its export answers alike), or its factory's settings; and its identity
        (``config_hash``) taken before the ``llm:`` block's settings are written in, as trials recorded
        before they were had it: a resumed study still finds its earlier trials and re-scores its winner."""
        if self.system is not None:
            settings = self.space.settings(params)
            return settings, config_hash(settings)
        built = self.space.build(params)
        return built.resolved(self.llm), config_hash(built)

    def pipeline(self, config: Configured) -> Pipeline | SystemPipeline:
        """What produces the trial's batches: Composer's pipeline, or the user's system."""
        if isinstance(config, PipelineConfig):
            from composer.pipeline.pipeline import Pipeline

            return Pipeline.from_config(config, workdir=self.workdir, qdrant=self.qdrant, llm=self.llm)
        from composer.evaluation.system import SystemPipeline

        assert self.system is not None
        built = SystemPipeline(self.system(copy.deepcopy(config)), corpus=self.corpus,
                               concurrency=self.concurrency)
        if not self._warned_unheard:  # once a study: every trial's system is built alike
            built.warn_unheard(self.questions)
            self._warned_unheard = True
        return built

    def rebuild(self, params: Mapping[str, Any], digest: str) -> Pipeline | SystemPipeline:
        """A finished trial's pipeline (or system) from its parameters, indexed: the stored config has its
        credentials masked, so the held-out re-score rebuilds it, and checks it is the one that ran."""
        config, identity = self.configure(params)
        if identity != digest:
            raise ComposerError("the search space or the llm: block changed since the trial ran")
        pipeline = self.pipeline(config)
        pipeline.index(self.corpus)
        return pipeline

    @cached_property
    def judging(self) -> Judging | None:
        """The study's one judge, built once, also judging the judge metrics the objective weighs; None
        without any LLM (deterministic metrics only)."""
        judge = self.judge if self.judge is not None else (JudgeConfig() if self.llm is not None else None)
        if judge is None:
            return None
        return make_judging(judge, self.llm, self.workdir, also=list(self.objective_config.metrics))

    @cached_property
    def objective(self) -> Objective:
        """The objective over the metrics this study can score: they depend on the data and the judge,
        never on a trial, so it is resolved (and its substitutions warned about) once."""
        judged = self.judging.settings.metrics if self.judging is not None else ()
        return Objective.resolve(self.objective_config, available_metrics(self.questions, self.ks, judged))

    def settle(self, study: optuna.Study, can_answer: bool | None = None) -> StudyData:
        """This data as ``study`` settled it, so that every trial's composite weighs the same metrics: a
        user's system without an answer method scores no answer metric, which then leaves the composite
        (``Objective.without_answers``) instead of counting 0. ``can_answer``: what a trial's system showed;
        the study's record of its first one wins. The registry prompts the space resolved are pinned on
        the study the first time (``PINS_ATTR``). The weights in force are kept on the study, for its tables
        to show the metrics that carry them. Nothing here changes: the data in force is this data, or its
        answerless twin."""
        attrs = study.user_attrs
        pins = attrs.get(PINS_ATTR) or {}
        if any(ref not in pins for ref in self.prompt_pins):
            study.set_user_attr(PINS_ATTR, {**self.prompt_pins, **pins})
        settled = self
        if self.system is not None:
            answers = attrs.get(ANSWERS_ATTR)
            if answers is None and can_answer is not None:
                study.set_user_attr(ANSWERS_ATTR, answers := can_answer)
            if answers is False:
                settled = self._answerless
        weights = dict(settled.objective.weights)
        if attrs.get(WEIGHTS_ATTR) != weights:
            study.set_user_attr(WEIGHTS_ATTR, weights)
        return settled

    @cached_property
    def _answerless(self) -> StudyData:
        """This data with its objective over the retrieval metrics alone, made once per study: the
        objective's warning is the study's, not each trial's; the judge and the space are shared."""
        twin = copy.copy(self)
        vars(twin)["objective"] = self.objective.without_answers()  # its cached objective, set before use
        return twin

    def llm_endpoints(self) -> list[LLMConfig]:
        """Every LLM a trial may call: each generator its space can pick, when trials answer, expand queries
        or rerank with it, and the judge."""
        from composer.generation.config import GenerationConfig

        if self.system is not None:  # a user's system calls its own LLMs: only the judge is ours
            return [self.judging.client.config] if self.judging is not None else []
        possible = self.space.possible
        generates = self.answers or "llm" in possible("rerank.method") or any(
            method != "none" for method in possible("query_expansion.method")
        )
        base = self.space.base()["generation"]
        sections = [base] if generates else []
        for dim in self.space.dimensions if generates else ():
            if dim.key == "generation" and dim.bundles:
                sections += [{**base, **bundle} for bundle in dim.bundles.values()]
            elif dim.key == "generation.model":
                sections += [{**base, "model": model} for model in dim.choices]
        out = [
            config
            for section in sections
            if (config := GenerationConfig.model_validate(section).llm_config(self.llm)) is not None
        ]
        if self.judging is not None:
            out.append(self.judging.client.config)
        return out

    @property
    def answers(self) -> bool:
        """Whether trials answer the questions: only when a judge or a weighted metric reads answers."""
        return self.judging is not None or needs_answers(self.objective)

    def score(
        self,
        pipeline: RankingPipeline,
        questions: QuestionSet,
        *,
        batch_size: int | None = None,
        on_batch: BatchHook | None = None,
        on_stage: Progress | None = None,
        on_failure: Callable[[Scored], None] | None = None,
    ) -> Scored:
        """Score an indexed pipeline on ``questions`` (the selection, or the held-out set) as trials do;
        ``on_failure`` gets the scores so far of a scoring that fails."""
        return score_pipeline(
            pipeline,
            questions,
            self.corpus,
            judging=self.judging,
            ks=self.ks,
            batch_size=batch_size or self.batch_size,
            answers=self.answers,
            on_batch=on_batch,
            on_stage=on_stage,
            on_failure=on_failure,
        )


def generation_defaults(llm: LLMConfig) -> dict[str, Any]:
    """The ``llm:`` block as pipeline defaults: the generator a trial uses unless its space picks one."""
    out: dict[str, Any] = {"model": llm.model, "temperature": llm.temperature}
    out.update({k: v for k in ("api_base", "api_key_env") if (v := getattr(llm, k)) is not None})
    return out
