"""The study side of prompt optimization, without a study run: the built-in template as a seed, the
estimate's bound, the staged prompt stage refused without a held-out split."""

from __future__ import annotations

import pytest

from composer.cost.calls import question_calls
from composer.cost.passages import StandInPassages
from composer.cost.prompt_tuning import estimate_tuning
from composer.errors import ConfigError
from composer.generation.generator import answer_messages
from composer.llm.config import LLMConfig
from composer.pipeline.config import PipelineConfig
from composer.prompts import prompt_template
from composer.study.experiment import ExperimentConfig
from composer.study.prompt_stage import builtin_prompt
from composer.study.space import Dimension, SearchSpace
from composer.study.staged import plan_of


def test_the_builtin_seed_sends_the_builtin_templates_text() -> None:
    seed = builtin_prompt("grounded", ["ar", "en"])
    assert set(seed.variants()) == {"ar", "en"}
    question = "من هو جمال خاشقجي؟"
    sent = prompt_template(seed.for_language("ar"), "ar", ("contexts", "history", "question"))
    assert sent.messages(contexts="[1] مقطع", question=question) == answer_messages("grounded", question,
                                                                                     ["مقطع"])


def test_the_estimate_grows_with_the_scored_questions_and_proposals() -> None:
    corpus_q = _questions()
    config = PipelineConfig.from_dict({"retrieval": {"mode": "bm25", "k": 3},
                                       "generation": {"model": "openai/gpt-4o-mini"}})
    llm = LLMConfig(model="openai/gpt-4o-mini")
    seed = builtin_prompt("grounded", ["ar"])

    def priced(proposals: int, calls: int) -> float:
        return estimate_tuning(study="s", seed=seed, config=config, questions=corpus_q[0],
                               passages=StandInPassages(corpus_q[1]), llm=llm, judge=None, reflection=llm,
                               proposals=proposals, max_metric_calls=calls, minibatch=4, held_out=5,
                               instruction="rewrite").requests

    per_question = len(question_calls(corpus_q[0][0], ["p"], config, llm, None, answers=True))
    assert per_question == 1  # the generator alone, without a judge
    assert priced(3, 40) - priced(1, 40) == 2  # one request a proposal
    assert priced(1, 50) - priced(1, 40) == 10  # one request a scored question
    assert priced(1, 40) >= 1 + 40 + 2 * 5  # and the held-out re-score of the seed and the best


def test_the_staged_prompt_stage_needs_a_held_out_split() -> None:
    space = SearchSpace((Dimension("retrieval.k", "categorical", (3, 5)),
                         Dimension("generation.temperature", "categorical", (0.0, 0.5))), {}, "s")
    exp = ExperimentConfig.model_validate({"name": "s", "corpus": "c.jsonl", "questions": "q.jsonl",
                                           "search_space": "s.yaml", "strategy": "staged", "n_trials": 4,
                                           "stages": {"prompt": True},
                                           "objective": {"metrics": {"recall": 1}}})
    with pytest.raises(ConfigError, match="split:") as raised:
        plan_of(exp, space, None)
    assert raised.value.field == "stages.prompt"
    with_llm = {"split": {"held_out": 0.3}, "llm": {"model": "openai/x"}}
    assert plan_of(ExperimentConfig.model_validate({**exp.model_dump(), **with_llm}), space, None) is not None


def _questions():  # type: ignore[no-untyped-def]
    from sample_study import sample_corpus, sample_questions

    corpus = sample_corpus()
    return sample_questions(corpus, 8).questions, corpus
