"""The built-in seed speaks every language the optimization is judged in: a held-out question in a
language the selection lacks still gets its own variant, not ``default``'s."""

from __future__ import annotations

from composer.data.types import Question, QuestionSet
from composer.pipeline.config import PipelineConfig
from composer.study.experiment import ExperimentConfig
from composer.study.prompt_stage import seed_of


def test_the_builtin_seed_has_a_variant_for_each_language_of_selection_and_held_out() -> None:
    selection = QuestionSet([Question(id="a", question="من هو جمال خاشقجي؟", relevant_ids=("d",))], "<s>")
    held_out = QuestionSet([Question(id="f", question="پایتخت ایران کجاست و چرا؟", relevant_ids=("d",))],
                           "<h>")
    exp = ExperimentConfig.model_validate({"name": "s", "corpus": "c.jsonl", "questions": "q.jsonl",
                                           "search_space": "s.yaml"})
    config = PipelineConfig.from_dict({"generation": {"model": "openai/x"}})
    seed = seed_of(exp, config, selection, held_out, None)
    assert set(seed.variants()) == {"ar", "fa"}
