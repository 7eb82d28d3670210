"""``composer judges tune``: choose the judge by its agreement with human labels.

A small Optuna search over the judge's model, prompt variant (``composer.judges.guidance``) and few-shot
examples. The labels are split once, by answer and stratified by language, into a part the examples are
drawn from and a held-out part every candidate is scored on (Cohen's kappa, averaged over the metrics):
a judge that only agrees on the answers it was shown gains nothing. Each candidate is judged as
``composer judges check`` judges (its replies cached: a rerun sends nothing), and the chosen judge's
held-out agreement is stored as its check, so a study using it starts checked.

Its own small Optuna loop, not a study's storage, fates and MLflow writer, which would add nothing here:
each candidate is one ``check`` whose replies are cached in the work dir, so a search killed and run again
re-asks nothing, with no storage to resume from; a candidate cannot be pruned, lost with a worker, surplus
or invalid (an equal one is scored once); and the search leaves one judge block and its stored check, its
trials being the table it prints (``--json``), not MLflow runs.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from composer.calibration.check import DEFAULT_THRESHOLD, CheckResult, check, figure
from composer.errors import ConfigError, InputError, config_error
from composer.files import write_atomic
from composer.judges.config import JudgeConfig
from composer.judges.guidance import JudgeExample, PromptVariant
from composer.judges.labels import Label, load_labels
from composer.judges.own_prompts import JudgePrompts, sent_prompt
from composer.judges.trust import judge_key, store_checks
from composer.llm.config import check_env_name
from composer.llm.prompt import PromptLanguage, prompt_language
from composer.llm.usage import track_usage
from composer.prompts.spec import UserPrompt, is_registry_uri
from composer.redact import scrub_url
from composer.yamlfile import dump_yaml, read_yaml

if TYPE_CHECKING:
    import optuna
    from rich.console import RenderableType


class TuneSpace(BaseModel):
    """The judges to choose among (``judges.yaml``): models, prompt variants, few-shot counts (examples
    per metric and language), example draws per count; the held-out share, seed and trial budget; the
    judges' endpoint."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    models: tuple[str, ...] = Field(min_length=1)
    prompts: tuple[PromptVariant, ...] = Field(default=("default",), min_length=1)
    shots: tuple[int, ...] = Field(default=(0,), min_length=1)
    draws: int = Field(default=1, ge=1, description="different example draws tried per shot count")
    metrics: tuple[str, ...] = ()
    held_out: float = Field(default=0.4, gt=0.0, lt=1.0, description="share of answers held out")
    seed: int = 0
    n_trials: int = Field(default=12, ge=1)
    threshold: float = Field(default=DEFAULT_THRESHOLD, gt=0.0, le=1.0)
    api_base: str | None = None
    api_key_env: str | None = None
    timeout: float | None = Field(default=None, gt=0)

    @field_validator("shots")
    @classmethod
    def _counts(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if any(n < 0 for n in value):
            raise ValueError("few-shot counts are 0 or more")
        return tuple(dict.fromkeys(value))

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        return check_env_name(value)

    def grid_size(self) -> int:
        return len(set(self.models)) * len(set(self.prompts)) * len(self.shots) * self.draws


def load_space(path: str | Path) -> TuneSpace:
    """The search space file; a bad one is a ConfigError naming the file and key."""
    data = read_yaml(path, what="judge search space")
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (models, prompts, shots...)", path=path)
    try:
        return TuneSpace.model_validate(data)
    except ValidationError as exc:
        raise config_error(exc, path) from None


@dataclass(frozen=True)
class LabelSplit:
    """The labels the examples come from, and the held-out ones every candidate is scored on."""

    train: list[Label]
    held_out: list[Label]


def split_labels(labels: Sequence[Label], held_out: float, seed: int) -> LabelSplit:
    """By answer (every label of one answer on one side), within each language by a seeded hash of the
    id: each language held out in the same share, whatever the file's order. A language with a single
    answer stays on the example side."""
    langs: dict[str, str] = {}
    for lb in labels:
        langs.setdefault(lb.id, prompt_language(lb.question))
    held: set[str] = set()
    for lang in sorted(set(langs.values())):
        ids = sorted((i for i, lg in langs.items() if lg == lang), key=lambda i: _hash(f"{seed}:{i}"))
        n = min(max(round(len(ids) * held_out), 1), len(ids) - 1) if len(ids) > 1 else 0
        held.update(ids[:n])
    if not held:
        raise InputError("too few labelled answers to hold any out: label at least two", field="labels")
    return LabelSplit([lb for lb in labels if lb.id not in held], [lb for lb in labels if lb.id in held])


def draw_examples(
    train: Sequence[Label], metrics: Sequence[str], shots: int, draw: int, seed: int
) -> tuple[JudgeExample, ...]:
    """Up to ``shots`` examples per metric and language from ``train``, taken in turn from each label value
    (a pass and a fail, or ratings spread over the scale), in an order seeded by ``draw``."""
    if shots == 0:
        return ()
    out: list[JudgeExample] = []
    for metric in metrics:
        pool = [(prompt_language(lb.question), lb) for lb in train if lb.metric == metric]
        for lang in sorted({lang for lang, _ in pool}):
            queues = [
                sorted((lb for lg, lb in pool if lg == lang and lb.label == value),
                       key=lambda lb: _hash(f"{seed}:{draw}:{lb.id}"))
                for value in sorted({lb.label for _, lb in pool})
            ]
            taken: list[Label] = []
            while len(taken) < shots and any(queues):
                taken += [queue.pop(0) for queue in queues if queue][: shots - len(taken)]
            out += [_example(lb, lang) for lb in taken]
    return tuple(out)


def _example(lb: Label, lang: PromptLanguage) -> JudgeExample:
    return JudgeExample(
        metric=lb.metric,
        lang=lang,
        question=lb.question,
        answer=lb.answer,
        contexts=lb.contexts,
        reference_answer=lb.reference_answer,
        label=lb.label,
        rationale=lb.rationale,
        id=lb.id,
    )


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class TuneTrial:
    """One candidate judge and its held-out agreement: kappa per metric, their mean (``score``). Read from
    Optuna's trial (its parameters, value and ``kappa`` attribute), typed for the table, the JSON and the
    tie-break."""

    number: int
    model: str
    prompt: str
    shots: int
    draw: int
    score: float
    kappa: dict[str, float | None]

    @classmethod
    def of(cls, trial: optuna.trial.FrozenTrial) -> TuneTrial:
        value, p = trial.value, trial.params
        assert value is not None  # every trial completes: a failed check raises out of the search
        return cls(trial.number, str(p["model"]), str(p["prompt"]), int(p["shots"]), int(p["draw"]), value,
                   dict(trial.user_attrs["kappa"]))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TuneResult:
    """The search: its trials, the chosen judge, and that judge's check on the held-out labels."""

    trials: list[TuneTrial]
    best: TuneTrial
    judge: JudgeConfig
    check: CheckResult
    split: LabelSplit
    labels: str
    usage: dict[str, Any] = field(default_factory=dict)
    """What the whole search cost in LLM calls (``llm_calls``, ``llm_cached_calls``...)."""

    def judge_block(self) -> dict[str, Any]:
        """The experiment's ``judge:`` block for the chosen judge (what ``save`` writes)."""
        dumped = self.judge.model_dump(mode="json", exclude_none=True)
        keys = ("model", "api_base", "api_key_env", "timeout", "metrics", "prompt", "examples")
        block = {k: dumped[k] for k in keys if k in dumped}
        if isinstance(self.judge.prompt, JudgePrompts):  # registered prompts: referenced, not copied
            own = self.judge.prompt.own()
            named = {m: p.source if isinstance(p, UserPrompt) and p.source else dumped["prompt"][m]
                     for m, p in own.items()}
            block["prompt"] = {**named,
                               **({"variant": self.judge.prompt.variant}
                                  if self.judge.prompt.variant != "default" else {})}
        if block.get("api_base"):
            block["api_base"] = scrub_url(block["api_base"])
        block["examples"] = [{k: v for k, v in e.items() if v not in (None, [])} for e in block["examples"]]
        return block

    def registered(self) -> dict[str, str]:
        """Metric -> the registry version its verdict prompt was registered as (``register_judge``)."""
        prompt = self.judge.prompt
        if isinstance(prompt, str):
            return {}
        return {m: p.source for m, p in prompt.own().items()
                if isinstance(p, UserPrompt) and p.source and is_registry_uri(p.source)}

    def to_dict(self) -> dict[str, Any]:
        return {
            "registered": self.registered(),
            "labels": self.labels,
            "train_answers": len({lb.id for lb in self.split.train}),
            "held_out_answers": len({lb.id for lb in self.split.held_out}),
            "trials": [t.to_dict() for t in self.trials],
            "best": self.best.to_dict(),
            "judge": self.judge_block(),
            "held_out_check": self.check.to_dict(),
            "usage": self.usage,
        }

    def save(self, out: str | Path) -> Path:
        """The judge block as YAML (atomically), under a comment with its held-out agreement."""
        path = Path(out)
        lines = [f"# Judge chosen by `composer judges tune` over {len(self.trials)} trials on {self.labels},",
                 f"# scored on {len({lb.id for lb in self.split.held_out})} held-out answers it was never "
                 "shown:"]
        for metric, c in self.check.metrics.items():
            low, high = c.overall.ci["kappa"]
            lines.append(f"#   {metric}: kappa {figure(c.overall.kappa)} [{figure(low)}, {figure(high)}], "
                         f"accuracy {figure(c.overall.accuracy)}, n {c.overall.n}")
        lines.append(f"# Use it: `judge: {path.name}` in the experiment, or paste the block under judge:.")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, "\n".join(lines) + "\n" + dump_yaml({"judge": self.judge_block()}))
        return path

    def render(self) -> RenderableType:
        """The trials as a Rich table, best first, then the chosen judge's held-out check."""
        from rich.console import Group
        from rich.table import Table

        table = Table(title=f"Judges tried on {self.labels} (held-out kappa)")
        metrics = list(self.best.kappa)
        for name in ("trial", "model", "prompt", "shots", "draw", *metrics, "score"):
            table.add_column(name, justify="left" if name in ("model", "prompt") else "right")
        for t in sorted(self.trials, key=lambda t: -t.score):
            mark = " *" if t.number == self.best.number else ""
            table.add_row(f"{t.number}{mark}", t.model, t.prompt, str(t.shots), str(t.draw),
                          *(figure(t.kappa[m]) for m in metrics), figure(t.score))
        return Group(table, self.check.render())


def register_judge(
    result: TuneResult, name: str, *, tracking_uri: str | None, labels_sha256: str, workdir: str | Path,
    store: bool = True,
) -> TuneResult:
    """The chosen judge's verdict prompts, with its variant's sentence and its examples written in as it
    sends them (``sent_prompt``), registered as new versions of ``NAME.<metric>`` in the MLflow store
    ``tracking_uri``, tagged with the held-out kappa and the labels file's hash; the result's judge then
    names those versions (its block references the URIs, and has no examples left to add), and its check
    is stored under that judge too, so a study using the block starts checked."""
    from composer.prompts.registry import register_prompt

    prompts: dict[str, UserPrompt] = {}
    for metric in result.judge.metrics:
        sent = sent_prompt(metric, result.judge.settings.variant, result.judge.examples)
        kappa = result.check.metrics[metric].overall.kappa if metric in result.check.metrics else math.nan
        tags = {"composer.kind": "judge", "composer.metric": metric,
                "composer.judge_model": result.best.model,
                "composer.kappa": figure(kappa), "composer.labels": Path(result.labels).name,
                "composer.labels_sha256": labels_sha256}
        uri = register_prompt(f"{name}.{metric}", sent, tags=tags, tracking_uri=tracking_uri,
                              commit_message=f"composer judges tune: held-out kappa {figure(kappa)}")
        prompts[metric] = sent.model_copy(update={"source": uri, "version": int(uri.rsplit("/", 1)[1])})
    judge = result.judge.model_copy(update={"prompt": JudgePrompts.model_validate(prompts), "examples": ()})
    llm = judge.llm_config(None)
    if store and llm is not None:
        keys = {m: judge_key(llm, result.judge.settings, m) for m in prompts}
        records = result.check.records()
        store_checks(workdir, {judge_key(llm, judge.settings, m): records[keys[m]] for m in prompts
                               if keys[m] in records})
    return replace(result, judge=judge)


def tune(
    labels: Sequence[Label] | str | Path,
    space: TuneSpace | Mapping[str, Any] | str | Path,
    *,
    workdir: str | Path = ".composer",
    source: str | None = None,
    store: bool = True,
) -> TuneResult:
    """Search ``space`` (a ``TuneSpace``, its mapping or its YAML file) for the judge that agrees best
    with the held-out ``labels`` (``Label``s or a labels file); see the module docstring. The chosen
    judge's held-out check is stored for ``latest_check`` unless ``store`` is false.

    Example:
        ::

            result = tune("labels.jsonl", {"models": ["openai/gpt-4o-mini", "openai/gpt-4o"]})
            result.save("judge.yaml")
    """
    import optuna

    if isinstance(labels, str | Path):
        source = source or str(labels)
        labels = load_labels(labels)
    space = _space(space)
    where = source or (labels[0].source if labels else "<labels>")
    metrics = list(space.metrics) or sorted({lb.metric for lb in labels})
    split = split_labels(labels, space.held_out, space.seed)
    scored: dict[str, tuple[float, dict[str, float | None], CheckResult]] = {}

    def score_candidate(trial: optuna.Trial) -> float:
        model = str(trial.suggest_categorical("model", list(dict.fromkeys(space.models))))
        prompt = str(trial.suggest_categorical("prompt", list(dict.fromkeys(space.prompts))))
        shots = int(trial.suggest_categorical("shots", list(space.shots)))
        draw = int(trial.suggest_categorical("draw", list(range(space.draws))))
        judge = _judge(space, metrics, model, prompt, draw_examples(split.train, metrics, shots, draw,
                                                                    space.seed))
        key = judge.model_dump_json()
        if key not in scored:  # an equal candidate (0 shots in another draw) is not judged twice
            result = check(split.held_out, judge, workdir=workdir, threshold=space.threshold,
                           source=where, store=False)
            kappa = {m: _finite(c.overall.kappa) for m, c in result.metrics.items()}
            scored[key] = (_mean(kappa), kappa, result)
        score, kappa, _ = scored[key]
        trial.set_user_attr("kappa", kappa)
        return score

    study = optuna.create_study(direction="maximize", sampler=_sampler(space))
    with track_usage() as usage:
        study.optimize(score_candidate, n_trials=min(space.n_trials, space.grid_size()))
    trials = [TuneTrial.of(t) for t in study.trials]
    # At equal agreement the cheaper judge: fewer examples to send, the plain prompt, the earlier trial.
    best = max(trials, key=lambda t: (t.score, -t.shots, t.prompt == "default", -t.number))
    judge = _judge(space, metrics, best.model, best.prompt,
                   draw_examples(split.train, metrics, best.shots, best.draw, space.seed))
    held = f"{where} (held out: {len({lb.id for lb in split.held_out})} answers)"
    result = scored[judge.model_dump_json()][2]
    result = CheckResult(result.judge_model, held, result.metrics, result.usage, time.time())
    if store:
        store_checks(workdir, result.records())
    return TuneResult(trials, best, judge, result, split, where, usage.to_dict())


def _space(space: TuneSpace | Mapping[str, Any] | str | Path) -> TuneSpace:
    if isinstance(space, TuneSpace):
        return space
    if isinstance(space, str | Path):
        return load_space(space)
    try:
        return TuneSpace.model_validate(dict(space))
    except ValidationError as exc:
        raise config_error(exc, "<space>") from None


def _judge(
    space: TuneSpace, metrics: Sequence[str], model: str, prompt: str, examples: tuple[JudgeExample, ...]
) -> JudgeConfig:
    fields: dict[str, Any] = {
        "model": model,
        "metrics": tuple(metrics),
        "prompt": prompt,
        "examples": examples,
        "api_base": space.api_base,
        "api_key_env": space.api_key_env,
        "timeout": space.timeout,
    }
    return JudgeConfig.model_validate({k: v for k, v in fields.items() if v is not None})


def _sampler(space: TuneSpace) -> optuna.samplers.BaseSampler:
    """Every candidate once (a seeded grid) when the budget covers the grid, else seeded TPE."""
    import optuna

    if space.grid_size() <= space.n_trials:
        grid: dict[str, Sequence[Any]] = {
            "model": list(dict.fromkeys(space.models)),
            "prompt": list(dict.fromkeys(space.prompts)),
            "shots": list(space.shots),
            "draw": list(range(space.draws)),
        }
        return optuna.samplers.GridSampler(grid, seed=space.seed)
    return optuna.samplers.TPESampler(seed=space.seed)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _mean(kappa: dict[str, float | None]) -> float:
    """The candidate's score: its mean kappa over the metrics; an undefined kappa (one label value only
    among the held-out answers) counts 0, as a judge that tells nothing apart."""
    values = [0.0 if k is None else k for k in kappa.values()]
    return sum(values) / len(values) if values else 0.0
