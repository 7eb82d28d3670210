"""Pipeline configuration and the pipeline that runs it (imported lazily: it pulls in every stage)."""

from composer.pipeline.config import PipelineConfig, load_pipeline_config

__all__ = ["PipelineConfig", "load_pipeline_config"]
