"""Whether a judge was checked against human labels, and how well it agreed: the agreement travels with
the judge to every study, summary and report that uses it.

``composer judges check`` stores its result in ``<workdir>/cache/llm/judge_checks.json`` (beside the
LLM reply cache), keyed by ``judge_key``: the judge's model, endpoint and sampling settings, its
settings (a team's own verdict prompt by the hash of its text), and the prompts the metric sends.
Change the model or a prompt and the old agreement no longer applies: the judge is unchecked again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from composer.files import write_atomic
from composer.judges.config import MIN_KAPPA, JudgeConfig
from composer.judges.panel import JudgeSettings
from composer.judges.prompts import METRIC_PROMPTS
from composer.llm.config import LLMConfig
from composer.llm.usage import Usage
from composer.locks import FileLock
from composer.prompts.spec import UserPrompt
from composer.redact import scrub_url
from composer.summary import JudgeAgreement

logger = logging.getLogger(__name__)

CHECKS_FILE = Path("cache") / "llm" / "judge_checks.json"
"""Under the workdir, beside the LLM reply cache."""


def judge_key(llm: LLMConfig, settings: JudgeSettings, metric: str) -> str:
    """The identity a check result is stored under: what shapes the judge's verdicts on ``metric``."""
    prompts = [
        (lang, t.system, t.user) for localized in METRIC_PROMPTS[metric] for lang, t in localized.items()
    ]
    dumped = settings.model_dump(mode="json", exclude={"metrics", "max_failure_share", "fallback"})
    if not isinstance(settings.prompt, str):  # a team's own prompts by their text, wherever it was read
        dumped["prompt"] = {"variant": settings.prompt.variant, **{
            m: p.sha256 if isinstance(p, UserPrompt) else p for m, p in settings.prompt.own().items()}}
    payload = {
        "model": llm.model,
        "api_base": llm.api_base,
        "params": llm.call_params(),
        "metric": metric,
        "prompts": prompts,
        "settings": dumped,
    }
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def distrust(labels: int, left_out: int) -> str | None:
    """Why a check cannot vouch for its judge, None when it can: when most of the labels got no verdict
    of the judge's own (it failed and a fallback scored them, a rule scored them without a call, or they
    were left unscored), its agreement is measured on the few it did judge, and says nothing of the rest
    (12 labels, 8 unparseable replies: "accuracy 1.00" on the 4 left)."""
    if left_out * 2 <= labels:
        return None
    return (f"{left_out} of {labels} labels got no verdict of the judge's own (fallbacks, rules or "
            "missing): its agreement on the rest is no evidence that it can be trusted")


def parsed_calls(usage: Usage) -> tuple[int, int]:
    """(judge calls whose reply could be read, judge calls that got a reply at all): a reply unreadable
    even after the client's repair request is a ``bad_response``; a cached reply was read when stored."""
    lost = sum(n for kind, n in usage.failed_calls.items() if kind != "bad_response")
    replies = usage.calls - lost
    return replies - usage.failed_calls["bad_response"], replies


def checks_path(workdir: str | Path) -> Path:
    return Path(workdir) / CHECKS_FILE


def store_checks(workdir: str | Path, results: Mapping[str, Mapping[str, Any]]) -> None:
    """Add check results (judge key -> result) to the workdir's record; the newest per key wins."""
    path = checks_path(workdir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_suffix(".lock")):
        record = _read(path)
        record.update(results)
        write_atomic(path, json.dumps(record, ensure_ascii=False, indent=2, sort_keys=True) + "\n")


def _read(path: Path) -> dict[str, Any]:
    """The stored results; a file that is not such a record is warned about and read as empty (the next
    check rewrites it), never an error that stops a study."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        logger.warning("%s: unreadable judge check record (%s): read as none", path, exc)
        return {}
    return record if isinstance(record, dict) else {}


def latest_check(
    judge: JudgeConfig, llm: LLMConfig | None, workdir: str | Path, *, metrics: Sequence[str] = ()
) -> dict[str, dict[str, Any] | None]:
    """Each judged metric's latest check result for this judge (its model, settings and prompts), None
    for a metric never checked: what a study's summary, report and export show beside the judge."""
    config = judge.llm_config(llm)
    wanted = [m for m in (metrics or judge.metrics) if m in METRIC_PROMPTS]
    if config is None:
        return dict.fromkeys(wanted)
    return checks_of(config, judge.settings, workdir, wanted)


def checks_of(
    config: LLMConfig, settings: JudgeSettings, workdir: str | Path, metrics: Sequence[str]
) -> dict[str, dict[str, Any] | None]:
    """``latest_check`` for a judge already resolved to its LLM settings and judge settings."""
    record = _read(checks_path(workdir))
    found: dict[str, dict[str, Any] | None] = {}
    for metric in metrics:
        entry = record.get(judge_key(config, settings, metric))
        found[metric] = entry if isinstance(entry, dict) else None
    return found


def judge_agreement(
    config: LLMConfig,
    settings: JudgeSettings,
    workdir: str | Path,
    *,
    metrics: Sequence[str] = (),
    min_kappa: float = MIN_KAPPA,
) -> JudgeAgreement:
    """The judge's latest agreement per judged metric, with the command that checks it."""
    wanted = [m for m in (metrics or settings.metrics) if m in METRIC_PROMPTS]
    command = f"composer judges check LABELS --judge {config.model}"
    if config.api_base:
        command += f" --llm-base {scrub_url(config.api_base)}"
    if config.api_key_env:
        command += f" --llm-key-env {config.api_key_env}"
    command += f" --metrics {','.join(wanted)}"
    if settings.prompt != "default" or settings.examples:
        command = "composer judges tune LABELS --space judges.yaml (the judge has a tuned prompt or examples)"
    return JudgeAgreement(config.model, min_kappa, command, checks_of(config, settings, workdir, wanted))


def agreement_warning(
    judge: JudgeConfig,
    llm: LLMConfig | None,
    workdir: str | Path,
    *,
    metrics: Sequence[str] = (),
    min_kappa: float | None = None,
) -> str | None:
    """A warning when a judged metric's judge was never checked against human labels, or agreed with them
    below ``min_kappa`` (default: the judge's own ``min_kappa``); None when every one was checked and
    agreed. It names the command to run."""
    config = judge.llm_config(llm)
    floor = judge.min_kappa if min_kappa is None else min_kappa
    if config is None:
        return f"the judge has no model, so it was never checked against human labels (kappa {floor:g})"
    return judge_agreement(config, judge.settings, workdir, metrics=metrics, min_kappa=floor).warning()
