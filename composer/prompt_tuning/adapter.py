"""GEPA's view of a study: a candidate scored by the study's own ``PromptScorer`` (counted under
``prompt_eval``), the failures it reads, and proposals written by the reflection LLM through Composer's
client (counted under ``prompt_proposal``), each checked as a template before it may be scored.

Every candidate the reflection writes is booked here (its parent, the questions it was scored on), not
only those GEPA keeps in its pool: the MLflow runs show how the prompt evolved, dead ends included.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gepa.core.adapter import EvaluationBatch
from gepa.strategies.instruction_proposal import InstructionProposalSignature

from composer.data.types import QuestionSet
from composer.llm.client import LLMClient
from composer.llm.spend import purpose
from composer.prompt_tuning.components import template_error, to_components, to_prompt
from composer.prompt_tuning.result import Candidate
from composer.prompt_tuning.scorer import PromptScorer
from composer.prompts import UserPrompt

log = logging.getLogger(__name__)

REFLECTION_TEMPLATE = """I gave an assistant that answers questions from retrieved passages the following \
message of its prompt template:
```
<curr_param>
```

Here are questions it answered with that prompt, its answers, and how each answer was scored:
```
<side_info>
```

Write a better version of this message, so that the answers score higher. It is a template: keep \
every {placeholder} it has exactly as written ({question}, {contexts}, {history}), add none of your own, and \
write a literal brace as {{ or }}. Keep the language the message is written in.

Give the new message within ``` blocks."""
"""What the reflection model reads (GEPA's ``<curr_param>``/``<side_info>`` form): the message to rewrite,
the failures, and the template rules a proposal is checked against."""


@dataclass
class _Scores:
    """What one candidate's scoring found, per question id."""

    composite: dict[str, float] = field(default_factory=dict)
    feedback: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)


class ComposerAdapter:
    """The ``GEPAAdapter`` (a data instance is a selection question's id; a candidate, ``to_components``'s
    dict)."""

    propose_new_texts: Callable[..., dict[str, str]] | None

    def __init__(
        self, seed: UserPrompt, scorer: PromptScorer, selection: QuestionSet, reflection: LLMClient,
        *, max_proposals: int,
    ) -> None:
        self.seed = seed
        self.scorer = scorer
        self.selection = selection
        self.reflection = reflection
        self.max_proposals = max_proposals
        self.proposals = 0
        """Reflection requests made: each one candidate."""
        self.discarded = 0
        self.keys: dict[tuple[tuple[str, str], ...], int] = {}
        self.parents: list[int | None] = []
        self.prompts: list[UserPrompt] = []
        self.scores: list[_Scores] = []
        self.propose_new_texts = self._propose
        self.book(to_components(seed), None)

    # -- the book of candidates --

    def book(self, components: Mapping[str, str], parent: int | None) -> int:
        """The index of a candidate, booked with ``parent`` when new (the first booked is the seed)."""
        key = tuple(sorted(components.items()))
        if (known := self.keys.get(key)) is not None:
            return known
        self.keys[key] = len(self.prompts)
        self.prompts.append(to_prompt(dict(components), self.seed) if self.prompts else self.seed)
        self.parents.append(parent)
        self.scores.append(_Scores())
        return len(self.prompts) - 1

    def candidate(self, index: int, *, kept: bool) -> Candidate:
        """What is known of candidate ``index``: its selection score is the mean over the questions it was
        scored on."""
        scores = self.scores[index]
        values = list(scores.composite.values())
        rows = list(scores.metrics.values())
        metrics = {name: float(np.mean([row[name] for row in rows if name in row]))
                   for name in sorted({name for row in rows for name in row})}
        return Candidate(index, self.prompts[index], self.parents[index],
                         float(np.mean(values)) if values else 0.0, len(values), metrics, kept)

    # -- GEPAAdapter --

    def evaluate(
        self, batch: list[str], candidate: dict[str, str], capture_traces: bool = False
    ) -> EvaluationBatch[str, str]:
        """Score ``candidate`` on the questions ``batch`` names (each question once per candidate: a
        question GEPA asks again is read from the book)."""
        index = self.book(candidate, None)  # booked already: GEPA scores the seed and what we proposed
        scores = self.scores[index]
        missing = [qid for qid in dict.fromkeys(batch) if qid not in scores.composite]
        if missing:
            with purpose("prompt_eval"):
                scored = self.scorer(self.prompts[index], self.selection.subset(missing))
            table = scored.report.table
            for row, qid in enumerate(table.question_ids):
                scores.metrics[qid] = {name: float(col[row]) for name, col in table.metrics.items()
                                       if not np.isnan(col[row])}
            for qid in missing:
                scores.composite[qid] = float(scored.per_question.get(qid, 0.0))
                scores.feedback[qid] = scored.feedback.get(qid, "")
        values = [scores.composite[qid] for qid in batch]
        return EvaluationBatch(
            outputs=[scores.feedback[qid] for qid in batch], scores=values,
            trajectories=[scores.feedback[qid] for qid in batch] if capture_traces else None,
        )

    def make_reflective_dataset(
        self, candidate: dict[str, str], eval_batch: EvaluationBatch[str, str],
        components_to_update: list[str],
    ) -> Mapping[str, Sequence[Mapping[str, Any]]]:
        """The failures the reflection reads: the batch's questions below its best score, worst first
        (all of them when every one scored alike)."""
        traces = eval_batch.trajectories or eval_batch.outputs
        pairs = sorted(zip(eval_batch.scores, traces, strict=True), key=lambda p: p[0])
        best = max(eval_batch.scores, default=0.0)
        failing = [p for p in pairs if p[0] < best] or pairs
        records = [{"Feedback": text, "Score": round(score, 4)} for score, text in failing]
        return {name: records for name in components_to_update}

    def _propose(
        self, candidate: dict[str, str], reflective_dataset: Mapping[str, Sequence[Mapping[str, Any]]],
        components_to_update: list[str],
    ) -> dict[str, str]:
        """One reflection request per component; a proposal that fails the template check is discarded
        (counted, never scored: GEPA skips an empty proposal)."""
        parent = self.book(candidate, None)
        texts: dict[str, str] = {}
        for name in components_to_update:
            if self.proposals >= self.max_proposals:
                break
            self.proposals += 1
            prompt = InstructionProposalSignature.prompt_renderer({
                "current_instruction_doc": candidate[name],
                "dataset_with_feedback": list(reflective_dataset.get(name, ())),
                "prompt_template": REFLECTION_TEMPLATE,
            })
            with purpose("prompt_proposal"):
                reply = self.reflection.complete([{"role": "user", "content": prompt}])
            if not reply.ok or reply.text is None:
                log.warning("the reflection model failed (%s): no proposal this round", reply.error_kind)
                continue
            texts[name] = InstructionProposalSignature.output_extractor(reply.text)["new_instruction"]
        if not texts:
            return {}
        proposed = {**candidate, **texts}
        if (reason := template_error(to_prompt(proposed, self.seed))) is not None:
            self.discarded += 1
            log.info("proposal discarded: %s", reason)
            return {}
        self.book(proposed, parent)
        return texts
