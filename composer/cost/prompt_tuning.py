"""What a prompt optimization will cost before it runs (``composer tune-prompt --estimate``): the
reflection requests (``prompt_proposal``: one per proposal) and the evaluation requests (``prompt_eval``:
the generator's and the judges' requests for each question a candidate is scored on), as requests, tokens
and dollars. No request is sent.

The count is a bound, not a forecast: every scored question is taken to miss the LLM cache, GEPA may
finish the iteration it is in after its budget of scored questions is spent (a minibatch for the parent
and one for the child, and the selection set when the child is kept), and the best candidate and the
seed are each re-scored on the held-out questions.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import Any

from composer.cost.calls import Judge, question_calls
from composer.cost.estimate import SAMPLE_QUESTIONS
from composer.data.types import Question
from composer.llm.config import LLMConfig
from composer.llm.pricing import count_text_tokens, count_tokens, request_cost
from composer.pipeline.config import PipelineConfig
from composer.prompt_tuning.scorer import FEEDBACK_PASSAGES, PASSAGE_CHARS
from composer.prompts import UserPrompt


@dataclass(frozen=True)
class PurposeCost:
    """One purpose's requests, tokens and dollars (None: a model without a price)."""

    purpose: str
    model: str
    requests: float
    input_tokens: float
    output_tokens: float
    usd: float | None


@dataclass(frozen=True)
class TuningEstimate:
    """An optimization's LLM spending before it runs: ``scored_questions`` bounds the questions scored
    (GEPA's ``max_metric_calls``, its last iteration and the held-out re-score); ``requests_per_question``
    what one scored question sends (generator and judges)."""

    study: str
    proposals: int
    scored_questions: int
    requests_per_question: float
    purposes: tuple[PurposeCost, ...]

    @property
    def requests(self) -> float:
        return sum(p.requests for p in self.purposes)

    @property
    def usd(self) -> float | None:
        costs = [p.usd for p in self.purposes]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "requests": self.requests, "usd": self.usd}

    def lines(self) -> list[str]:
        """The estimate on the terminal, a line per purpose and the total."""
        out = [f"prompt optimization of study {self.study}: at most {self.proposals} proposals and "
               f"{self.scored_questions} scored questions ({self.requests_per_question:.1f} requests each)"]
        for p in self.purposes:
            out.append(f"  {p.purpose.replace('_', '-')} ({p.model}): {p.requests:,.0f} requests, "
                       f"{p.input_tokens:,.0f} input + {p.output_tokens:,.0f} output tokens, {_usd(p.usd)}")
        out.append(f"  in all: at most {self.requests:,.0f} requests, {_usd(self.usd)}; nothing was sent")
        return out


def estimate_tuning(
    *,
    study: str,
    seed: UserPrompt,
    config: PipelineConfig,
    questions: Sequence[Question],
    passages: Callable[[Question, PipelineConfig], list[str]],
    llm: LLMConfig | None,
    judge: Judge | None,
    reflection: LLMConfig,
    proposals: int,
    max_metric_calls: int,
    minibatch: int,
    held_out: int,
    instruction: str,
) -> TuningEstimate:
    """Price an optimization of ``config``'s answer prompt, starting at ``seed``: each question of a
    sample of ``questions`` (the selection) priced with the requests a trial sends for it, scaled to the
    questions scored; each proposal priced as a request that reads the longest message of the seed and a
    minibatch's feedback (around ``instruction``, the reflection's own text) and writes a message as
    long."""
    seeded = config.model_copy(update={"generation": config.generation.model_copy(update={"prompt": seed})})
    sample = list(questions[:SAMPLE_QUESTIONS])
    per_question = [question_calls(q, passages(q, seeded), seeded, llm, judge, answers=True) for q in sample]
    scored = max_metric_calls + 2 * min(minibatch, len(questions)) + len(questions) + 2 * held_out
    mean_calls = fmean(len(c) for c in per_question) if per_question else 0.0
    calls = [c for batch in per_question for c in batch]
    share = scored / max(len(sample), 1)
    tokens = [(count_tokens(c.llm.model, c.messages), count_text_tokens(c.llm.model, c.reply)) for c in calls]
    eval_in, eval_out = sum(t[0] for t in tokens), sum(t[1] for t in tokens)
    prices = [request_cost(c.llm, *t) for c, t in zip(calls, tokens, strict=True)]
    eval_usd = None if any(p is None for p in prices) else share * sum(p for p in prices if p is not None)
    models = sorted({c.llm.model for c in calls})
    longest = max((m for v in seed.variants().values() for m in (v.system, v.user)), key=len)
    prompt = [{"role": "user", "content": _reflection_text(instruction, longest, sample[:minibatch], seeded,
                                                                  passages)}]
    reflect_in = count_tokens(reflection.model, prompt)
    reflect_out = count_text_tokens(reflection.model, longest)
    reflect_usd = request_cost(reflection, reflect_in, reflect_out)
    purposes = (
        PurposeCost("prompt_proposal", reflection.model, float(proposals), proposals * reflect_in,
                    proposals * reflect_out, None if reflect_usd is None else proposals * reflect_usd),
        PurposeCost("prompt_eval", ", ".join(models) or "none", mean_calls * scored, share * eval_in,
                    share * eval_out, eval_usd),
    )
    return TuningEstimate(study, proposals, scored, mean_calls, purposes)


def _reflection_text(
    instruction: str, current: str, questions: Sequence[Question], config: PipelineConfig,
    passages: Callable[[Question, PipelineConfig], list[str]],
) -> str:
    """A stand-in for a reflection request: its instruction around the current message and a minibatch's
    feedback (each question, its reference as the answer, its passages cut short)."""
    feedback = "\n\n".join(
        "\n".join([q.question, *q.gold_answers, *q.gold_answers,
                   *(p[:PASSAGE_CHARS] for p in passages(q, config)[:FEEDBACK_PASSAGES])])
        for q in questions
    )
    return f"{instruction}\n{current}\n{feedback}"


def _usd(value: float | None) -> str:
    return "unpriced" if value is None else f"${value:.4f}"
