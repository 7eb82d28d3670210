"""Whatever ``composer.evaluate`` is given as a system (a pipeline config, a ``Pipeline``, a run, a user's
system) as what scoring asks for batches, and its report: the one place that tells them apart."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from composer.data.fields import normal_id
from composer.data.ranking_file import read_ranking_file
from composer.data.types import Corpus, QuestionSet
from composer.errors import ConfigError
from composer.evaluation.given import GivenRanking, hits_table
from composer.evaluation.judging import Judging
from composer.evaluation.report import EvaluationReport
from composer.evaluation.scoring import RankingPipeline, score_pipeline
from composer.evaluation.system import SystemPipeline, as_hits, is_system, not_a_system
from composer.pipeline.config import PipelineConfig, load_pipeline_config
from composer.pipeline.pipeline import Pipeline

PIPELINE_SUFFIXES = (".yaml", ".yml")


def is_config_file(system: object) -> TypeGuard[str | Path]:
    """A path naming a pipeline YAML (or ``composer export``'s best.yaml), not a run file."""
    return isinstance(system, str | Path) and Path(system).suffix.lower() in PIPELINE_SUFFIXES


def pipeline_config(config: str | Path | Mapping[str, object] | PipelineConfig) -> PipelineConfig:
    """A pipeline YAML or export file, a dict of either, or a ``PipelineConfig``, as a ``PipelineConfig``."""
    if isinstance(config, str | Path):
        return load_pipeline_config(config)
    if isinstance(config, PipelineConfig):
        return config
    data = dict(config)
    exported = data.get("pipeline")
    if isinstance(exported, Mapping):  # an export document
        data = dict(exported)
    return PipelineConfig.from_dict(data)


def score_system(
    system: object,
    question_set: QuestionSet,
    docs: Corpus | None,
    judging: Judging | None,
    k: Sequence[int],
    work: Path,
    concurrency: int,
) -> EvaluationReport:
    """``system``'s report on the questions (indexing ``docs`` first when it indexes)."""
    producer = producer_of(system, docs, work, concurrency)
    if isinstance(producer, SystemPipeline):
        producer.warn_unheard(question_set)
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


def producer_of(system: object, corpus: Corpus | None, workdir: Path, concurrency: int) -> RankingPipeline:
    """Whatever ``system`` is, as the thing scoring asks to rank and answer batches."""
    if isinstance(system, Pipeline):
        return _indexable(system, corpus)
    if isinstance(system, PipelineConfig) or is_config_file(system) or (
        isinstance(system, Mapping) and not _is_hit_lists(system)
    ):
        return _indexable(Pipeline.from_config(pipeline_config(system), workdir=workdir), corpus)
    if isinstance(system, str | Path):
        ranking_file = read_ranking_file(system)
        return _given(ranking_file.hits, ranking_file.answers, corpus)
    if isinstance(system, Mapping):
        return _given(_hit_lists_of(system), {}, corpus)
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


def _is_hit_lists(mapping: Mapping[Any, Any]) -> bool:
    """A run maps question ids to lists; a pipeline config maps sections to mappings."""
    return bool(mapping) and all(isinstance(v, list | tuple) for v in mapping.values())


def _hit_lists_of(mapping: Mapping[Any, Any]) -> dict[str, Any]:
    return {normal_id(str(qid)): as_hits(items, str(qid)) for qid, items in mapping.items()}


def _given(hits: dict[str, Any], answers: dict[str, str], corpus: Corpus | None) -> RankingPipeline:
    """Hit lists (with the answers their file gives, if any) as a pipeline that has ranked and answered."""
    return GivenRanking(hits, answers, hits_table(hits, corpus), can_answer=bool(answers))
