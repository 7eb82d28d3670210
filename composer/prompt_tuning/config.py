"""How a prompt is optimized: the reflection LLM and its budget, the minibatches, where the winner goes."""

from __future__ import annotations

from pydantic import Field

from composer.settings import Strict


class PromptTuningConfig(Strict):
    """The experiment's ``prompt_tuning:`` block (and ``composer tune-prompt``'s options).

    The reflection model is not the generator: it reads failures and writes candidate prompts, with its
    own endpoint and its own request budget, counted under ``prompt_proposal``; scoring a candidate sends
    the generator's and the judges' requests, counted under ``prompt_eval``.
    """

    reflection_model: str | None = Field(
        default=None, description="litellm model that proposes prompts; default the llm: block's model."
    )
    reflection_api_base: str | None = None
    reflection_api_key_env: str | None = None
    max_proposals: int = Field(
        default=8, ge=1, description="Reflection requests at most (each one candidate)."
    )
    max_metric_calls: int = Field(
        default=400, ge=1, description="Questions scored at most over all candidates (GEPA's rollout budget)."
    )
    minibatch: int = Field(default=8, ge=1, description="Selection questions a candidate is first tried on.")
    random_seed: int = Field(
        default=0, description="GEPA's random seed (which candidate it mutates, which minibatch it draws); "
        "the prompt it starts from is the seed prompt."
    )
    registry_name: str | None = Field(
        default=None,
        description="Prompt Registry name the winner is registered under as a new version (default: the "
        "seed's registry name, else <study>.answer, as export names a model's prompt).",
    )
    alias: str = Field(default="champion", description="Alias moved to the new version when it is better.")
