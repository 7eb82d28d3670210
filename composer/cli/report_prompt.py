"""The HTML report's section on the study's latest prompt optimization: the seed, the optimized prompt,
their line diff, the held-out verdict and the candidates' lineage (each with its parent and score)."""

from __future__ import annotations

import difflib
import html
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import optuna

    from composer.prompts import UserPrompt


def prompt_section(study: optuna.Study) -> str | None:
    """The section's HTML, every value escaped; None when the study's prompt was never optimized."""
    from composer.study.prompt_stage import latest, verdict_lines

    result = latest(study)
    if result is None:
        return None
    seed, best = _text(result.seed.prompt), _text(result.best.prompt)
    diff = "\n".join(difflib.unified_diff(seed.splitlines(), best.splitlines(), "seed", "optimized",
                                          lineterm="", n=2))
    lineage = "".join(
        f"<tr><td>#{c.index}</td><td>{'' if c.parent is None else f'#{c.parent}'}</td>"
        f"<td>{c.selection_score:.4f}</td><td>{c.scored_questions}</td>"
        f"<td>{'Pareto set' if c.index in result.pareto else ''}</td></tr>\n"
        for c in result.candidates
    )
    lines = "".join(f"<li>{html.escape(line)}</li>" for line in verdict_lines(result)[:3])
    return (
        f"<h2>The optimized prompt</h2><ul>{lines}</ul>"
        f"<h3>The seed</h3><pre>{html.escape(seed)}</pre>"
        f"<h3>The optimized prompt (candidate #{result.best.index})</h3><pre>{html.escape(best)}</pre>"
        f"<h3>Their diff</h3><pre>{html.escape(diff or '(the same text: the seed stays)')}</pre>"
        "<h3>Candidates</h3><table>\n<thead><tr><th>candidate</th><th>parent</th><th>selection score</th>"
        f"<th>questions scored</th><th></th></tr></thead>\n<tbody>\n{lineage}</tbody></table>"
    )


def _text(prompt: UserPrompt) -> str:
    """A prompt's variants as text, one block per variant and message."""
    return "\n\n".join(f"[{key}.{part}]\n{getattr(messages, part)}"
                       for key, messages in prompt.variants().items() for part in ("system", "user"))
