"""The cost estimate counts the request a team's prompt sends, built by the one answering path."""

from __future__ import annotations

from composer.cost.calls import question_calls
from composer.data import Question
from composer.generation.generator import answer_messages
from composer.llm import LLMConfig
from composer.pipeline.config import PipelineConfig
from composer.prompts import UserPrompt


def test_the_estimate_counts_the_team_s_prompt() -> None:
    prompt = {"system": "Team voice, a long instruction.", "user": "Docs:\n{contexts}\nQ: {question}"}
    config = PipelineConfig.from_dict({"retrieval": {"mode": "bm25", "k": 2},
                                       "generation": {"model": "openai/fake", "prompt": prompt}})
    question = Question("q", "Who founded the paper?")
    calls = question_calls(question, ["p1", "p2"], config, LLMConfig(model="openai/fake"), None, answers=True)
    generation = [c for c in calls if c.stage == "generation"]
    assert generation[0].messages == answer_messages(UserPrompt.model_validate(prompt), question.question,
                                                     ["p1", "p2"])
    assert generation[0].messages[0]["content"].startswith("Team voice, a long instruction.")
