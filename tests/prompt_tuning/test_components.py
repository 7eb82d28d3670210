"""A prompt as GEPA's candidate: one component per message of each variant the seed has."""

from __future__ import annotations

import json

import pytest

from composer.errors import ConfigError
from composer.llm.config import LLMConfig
from composer.prompt_tuning.components import template_error, to_components, to_prompt
from composer.prompt_tuning.config import PromptTuningConfig
from composer.prompt_tuning.engine import reflection_config
from composer.prompt_tuning.result import Candidate, PromptOptimization, Verdict
from composer.prompts import UserPrompt

SEED = UserPrompt.model_validate({
    "ar": {"system": "أجب من المقاطع.", "user": "المقاطع:\n{contexts}\nالسؤال: {question}"},
    "default": {"user": "Passages: {contexts}\nQuestion: {question}"},
    "source": "prompts:/answers/3", "version": 3,
})


def test_each_message_of_each_variant_is_a_component() -> None:
    components = to_components(SEED)
    assert components == {
        "ar.system": "أجب من المقاطع.", "ar.user": "المقاطع:\n{contexts}\nالسؤال: {question}",
        "default.system": "", "default.user": "Passages: {contexts}\nQuestion: {question}",
    }
    edited = to_prompt({**components, "default.system": "Cite as [1]."}, SEED)
    assert edited.for_language("en").system == "Cite as [1]." and edited.ar == SEED.ar
    assert edited.source is None and edited.version is None  # nobody's registry version yet
    assert to_prompt(components, SEED).sha256 == SEED.sha256


def test_a_candidate_that_cannot_be_sent_is_named() -> None:
    assert template_error(SEED) is None
    broken = to_prompt({**to_components(SEED), "ar.user": "السؤال: {question}"}, SEED)
    assert "missing placeholder {contexts}" in (template_error(broken) or "")
    assert "unknown placeholder {bogus}" in (template_error(to_prompt(
        {**to_components(SEED), "default.system": "{bogus}"}, SEED)) or "")


def test_a_result_round_trips_through_json() -> None:
    seed = Candidate(0, SEED, None, 0.25, 4, {"correct": 0.25})
    best = Candidate(1, to_prompt({**to_components(SEED), "default.system": "Be brief."}, SEED), 0, 0.5, 4,
                     kept=True)
    verdict = Verdict("better", 0.2, 0.6, 0.4, (0.1, 0.7), 5)
    result = PromptOptimization("s", seed, best, (seed, best), (1,), verdict, "prompts:/answers/4", True,
                                "why", {"prompt_eval": 3}, 1.5, discarded=2, key="k")
    assert PromptOptimization.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_the_reflection_model_defaults_to_the_llm_block() -> None:
    llm = LLMConfig(model="openai/gen", api_base="http://127.0.0.1:9/v1", timeout=7.0)
    assert reflection_config(PromptTuningConfig(), llm).model_dump() == llm.model_dump()
    own = reflection_config(PromptTuningConfig(reflection_model="ollama/big", reflection_api_base="http://h:1",
                                               reflection_api_key_env="REFLECT_KEY"), llm)
    assert (own.model, own.api_base, own.api_key_env) == ("ollama/big", "http://h:1", "REFLECT_KEY")
    assert own.timeout == 7.0
    with pytest.raises(ConfigError, match=r"prompt_tuning\.reflection_model"):
        reflection_config(PromptTuningConfig(), None)


def test_gepa_s_random_seed_is_not_called_the_seed_which_is_the_prompt() -> None:
    assert PromptTuningConfig.model_validate({"random_seed": 3}).random_seed == 3
    with pytest.raises(ValueError, match="seed"):
        PromptTuningConfig.model_validate({"seed": 3})
