"""Whether a judge was checked against human labels, and how well it agreed: the agreement travels with
the judge to every study, summary and report that uses it.

``composer judges check`` stores its result in ``<workdir>/cache/llm/judge_checks.json`` (beside the
LLM reply cache), keyed by ``judge_key``: the judge's model, endpoint and sampling settings, its
settings, and the hash of the prompts the metric sends. Change the model or a prompt and the old
agreement no longer applies: the judge is unchecked again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from composer.files import write_atomic
from composer.judges.config import JudgeConfig
from composer.judges.panel import JudgeSettings
from composer.judges.prompts import METRIC_PROMPTS
from composer.llm.config import LLMConfig
from composer.locks import FileLock

logger = logging.getLogger(__name__)

MIN_KAPPA = 0.4
"""Below this kappa a judge's verdicts are read with a warning: the conventional edge of "moderate"
agreement (Landis & Koch 1977); under it the judge disagrees with people too often to rank trials by."""
CHECKS_FILE = Path("cache") / "llm" / "judge_checks.json"
"""Under the workdir, beside the LLM reply cache."""


def judge_key(llm: LLMConfig, settings: JudgeSettings, metric: str) -> str:
    """The identity a check result is stored under: what shapes the judge's verdicts on ``metric``."""
    prompts = [
        (lang, t.system, t.user) for localized in METRIC_PROMPTS[metric] for lang, t in localized.items()
    ]
    payload = {
        "model": llm.model,
        "api_base": llm.api_base,
        "params": llm.call_params(),
        "metric": metric,
        "prompts": prompts,
        "settings": settings.model_dump(mode="json", exclude={"metrics", "max_failure_share", "fallback"}),
    }
    text = json.dumps(payload, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


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
    record = _read(checks_path(workdir))
    found: dict[str, dict[str, Any] | None] = {}
    for metric in wanted:
        entry = record.get(judge_key(config, judge.settings, metric))
        found[metric] = entry if isinstance(entry, dict) else None
    return found


def agreement_warning(
    judge: JudgeConfig,
    llm: LLMConfig | None,
    workdir: str | Path,
    *,
    metrics: Sequence[str] = (),
    min_kappa: float = MIN_KAPPA,
) -> str | None:
    """A warning when a judged metric's judge was never checked against human labels, or agreed with them
    below ``min_kappa``; None when every one was checked and agreed. It names the command to run."""
    found = latest_check(judge, llm, workdir, metrics=metrics)
    unchecked = [m for m, entry in found.items() if entry is None]
    weak = [
        f"{m} (kappa {entry['kappa']:.2f} on {entry['n']} labels)"
        for m, entry in found.items()
        if entry is not None and not _agrees(entry.get("kappa"), min_kappa)
    ]
    if not unchecked and not weak:
        return None
    model = judge.llm_config(llm)
    parts = []
    if unchecked:
        parts.append(f"the judge was never checked against human labels for {', '.join(unchecked)}")
    if weak:
        parts.append(
            f"the judge agrees poorly with human labels (kappa below {min_kappa:g}) for {', '.join(weak)}"
        )
    name = model.model if model is not None else "MODEL"
    return (
        "; ".join(parts)
        + ": its scores may not be what people would say. Check it: "
        + f"`composer judges check LABELS --judge {name}`"
    )


def _agrees(kappa: object, min_kappa: float) -> bool:
    return isinstance(kappa, int | float) and math.isfinite(kappa) and kappa >= min_kappa
