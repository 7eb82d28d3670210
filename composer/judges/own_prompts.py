"""A team's own verdict prompts for the judges: ``judge.prompt: {faithfulness: ..., variant: strict}``.

Each judged metric's verdict prompt (the call that gives the verdict; splitting an answer into statements
is no judgment and keeps Composer's template) may be the team's, in any form ``generation.prompt`` takes:
inline ``{system, user}``, per-language variants, a file, a registry URI. It is checked when loaded for
what the judge fills in (the metric's placeholders) and for the reply its parser reads (the JSON keys): a
template that drops either would turn every verdict into a failure at trial 40. Its text is sent as the
team wrote it, without the variant's sentence or the few-shot examples (``composer judges tune`` writes
those into the prompt it registers); a variant name still guides the metrics left to the built-in
templates. The fields the judge fills are fenced as data whatever the template says.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from string import Template
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from composer.errors import ConfigError
from composer.judges.guidance import JudgeExample, PromptVariant, guide
from composer.judges.prompts import METRIC_PROMPTS
from composer.llm.prompt import PROMPT_LANGUAGES, Localized, PromptLanguage
from composer.prompts.spec import PromptMessages, PromptRef, UserPrompt, is_registry_uri
from composer.prompts.template import brace_form, check_prompt, literal_braces, prompt_template

VERDICT_TEMPLATES: dict[str, Localized] = {metric: prompts[-1] for metric, prompts in METRIC_PROMPTS.items()}
"""Each judged metric's built-in verdict template: the one a team's own prompt replaces."""

REQUIRED: dict[str, frozenset[str]] = {
    "answer_correctness": frozenset({"answer_statements", "reference_statements"}),
    "faithfulness": frozenset({"contexts", "statements"}),
    "llm_judge_rating": frozenset({"reference", "answer"}),
    "answer_relevancy": frozenset({"answer"}),
    "context_precision": frozenset({"reference", "contexts"}),
    "context_recall": frozenset({"contexts", "sentences"}),
}
"""The placeholders a metric's own prompt must show: what its verdict is about."""

REPLY_KEYS: dict[str, tuple[str, ...]] = {
    "answer_correctness": ("answer", "reference"),
    "faithfulness": ("verdicts",),
    "llm_judge_rating": ("rating",),
    "answer_relevancy": ("questions", "noncommittal"),
    "context_precision": ("verdicts",),
    "context_recall": ("verdicts",),
}
"""The JSON keys of the reply each metric's parser reads (``composer.llm.parse``), which its prompt must
name, quoted, as the built-in templates do."""


def placeholders_of(metric: str) -> frozenset[str]:
    """The fields the judge of ``metric`` fills in: its built-in verdict template's placeholders."""
    template = VERDICT_TEMPLATES[metric]["en"]
    return frozenset(Template(f"{template.system}\n{template.user}").get_identifiers())


class JudgePrompts(BaseModel):
    """``judge.prompt`` as a mapping: a team's own verdict prompt per judged metric (resolved, or a file
    path or registry URI still to resolve), and the variant that guides the other metrics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: PromptVariant = Field(default="default", description="how strict the built-in templates are")
    answer_correctness: PromptRef | None = Field(default=None, exclude_if=lambda v: v is None)
    faithfulness: PromptRef | None = Field(default=None, exclude_if=lambda v: v is None)
    llm_judge_rating: PromptRef | None = Field(default=None, exclude_if=lambda v: v is None)
    answer_relevancy: PromptRef | None = Field(default=None, exclude_if=lambda v: v is None)
    context_precision: PromptRef | None = Field(default=None, exclude_if=lambda v: v is None)
    context_recall: PromptRef | None = Field(default=None, exclude_if=lambda v: v is None)

    def own(self) -> dict[str, PromptRef]:
        """The metrics given a prompt of their own, and that prompt."""
        return {m: ref for m in VERDICT_TEMPLATES if (ref := getattr(self, m)) is not None}


JudgePrompt = Annotated[
    Annotated[PromptVariant, Tag("variant")] | Annotated[JudgePrompts, Tag("own")],
    Discriminator(lambda value: "variant" if isinstance(value, str) else "own"),
]
"""``judge.prompt``: a variant's name, or a mapping of metrics to their own prompts (and the variant)."""


def check_judge_prompt(metric: str, prompt: UserPrompt, *, field: str) -> UserPrompt:
    """``prompt`` checked as ``metric``'s verdict prompt: its placeholders (``check_prompt``) and the reply
    keys its parser reads; each failure one ConfigError naming ``field.<variant>`` (and the file)."""
    check_prompt(prompt, allowed=placeholders_of(metric), required=REQUIRED[metric], field=field)
    path = prompt.source if prompt.source and not is_registry_uri(prompt.source) else None
    for key, messages in prompt.variants().items():
        text = f"{messages.system}\n{messages.user}"
        for reply_key in REPLY_KEYS[metric]:
            if f'"{reply_key}"' not in text:
                keys = ", ".join(f'"{k}"' for k in REPLY_KEYS[metric])
                raise ConfigError(
                    f'the reply format lost the key "{reply_key}": {metric}\'s judge reads a JSON reply with '
                    f"{keys}, which the prompt must ask for (write {{{{ }}}} for a literal brace)",
                    path=path, field=f"{field}.{key}")
    return prompt


def verdict_template(metric: str, prompt: PromptRef, *, field: str) -> Localized:
    """A metric's own prompt as the templates sent per prompt language, its data fenced as the built-in
    verdict prompt's are; an unresolved reference is a ConfigError (resolve it first:
    ``resolve_judge_prompts``)."""
    if not isinstance(prompt, UserPrompt):
        raise ConfigError(f"{prompt!r} is not resolved: load the judge with its experiment or judge file, "
                          "or pass the prompt's text", field=field)
    check_judge_prompt(metric, prompt, field=field)
    data = VERDICT_TEMPLATES[metric]["en"].data
    return {lang: prompt_template(prompt.for_language(lang), lang, data) for lang in PROMPT_LANGUAGES}


def verdict_messages(
    metric: str,
    lang: PromptLanguage,
    template: Localized,
    own: Localized | None,
    variant: PromptVariant,
    examples: Sequence[JudgeExample],
    **fields: str,
) -> list[dict[str, str]]:
    """The messages of ``metric``'s verdict call: the team's own prompt as written, else the built-in
    ``template`` guided by the variant and the examples. What the judges send and the cost estimate
    counts."""
    if own is not None:
        return own[lang].messages(**fields)
    return guide(template[lang].messages(**fields), metric, lang, variant, examples)


def resolve_judge_prompts(
    prompt: PromptVariant | JudgePrompts, *, base: Path | None, tracking_uri: str | None,
    files_only: bool = False,
) -> PromptVariant | JudgePrompts:
    """``judge.prompt`` with its file paths (relative to ``base``) and, unless ``files_only``, its
    registry URIs resolved to their text, each checked for its metric; a failure is one located
    ConfigError naming ``judge.prompt.<metric>``."""
    from composer.prompts.resolve import resolve_prompt

    if isinstance(prompt, str):
        return prompt
    update: dict[str, Any] = {}
    for metric, ref in prompt.own().items():
        field = f"judge.prompt.{metric}"
        if isinstance(ref, str) and not (files_only and is_registry_uri(ref)):
            ref = resolve_prompt(ref, base=base, tracking_uri=tracking_uri, field=field,
                                 allowed=placeholders_of(metric), required=REQUIRED[metric])
        if isinstance(ref, UserPrompt):
            update[metric] = check_judge_prompt(metric, ref, field=field)
    return prompt.model_copy(update=update) if update else prompt


def sent_prompt(metric: str, variant: PromptVariant, examples: Sequence[JudgeExample]) -> UserPrompt:
    """The built-in verdict template of ``metric`` as a team's prompt, per language, with the variant's
    sentence and the examples written in as the judge sends them: what ``composer judges tune``
    registers, so that a judge naming it sends the very text it was tuned with."""
    variants: dict[str, PromptMessages] = {}
    for lang in PROMPT_LANGUAGES:
        template = VERDICT_TEMPLATES[metric][lang]
        system = brace_form(template.system)  # its word on fenced data kept where the judge sends it
        user = brace_form(template.user)
        guided = guide([{"role": "system", "content": system}, {"role": "user", "content": user}],
                       metric, lang, variant, [_escaped(e) for e in examples])
        variants[lang] = PromptMessages(system=guided[0]["content"], user=guided[1]["content"])
    return UserPrompt.model_validate(variants)


def _escaped(example: JudgeExample) -> JudgeExample:
    """An example whose text is written into a ``{name}`` template: its braces doubled."""
    reference, rationale = example.reference_answer, example.rationale
    update = {"question": literal_braces(example.question), "answer": literal_braces(example.answer),
              "contexts": tuple(literal_braces(c) for c in example.contexts),
              "reference_answer": None if reference is None else literal_braces(reference),
              "rationale": None if rationale is None else literal_braces(rationale)}
    return example.model_copy(update=update)
