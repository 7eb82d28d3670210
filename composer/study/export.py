"""Export a study's winner: a self-contained pipeline YAML with its scores and provenance, or a script.

The YAML's ``pipeline:`` section is a complete PipelineConfig, so ``composer eval --config best.yaml`` (or
``Pipeline.from_config("best.yaml")``) rebuilds exactly the trial's pipeline on any machine.
"""

from __future__ import annotations

import pprint
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from composer.errors import InputError
from composer.files import write_atomic
from composer.prompts import UserPrompt
from composer.record import TrialRecord
from composer.redact import scrub, scrub_url
from composer.study.finish import JUDGE_ATTR
from composer.study.leaderboard import STUDY_ATTR, ranked_trials
from composer.summary import JudgeAgreement
from composer.version import composer_version
from composer.yamlfile import dump_yaml

if TYPE_CHECKING:
    import optuna

ExportFormat = Literal["yaml", "python"]


def best_trial(study: optuna.Study, number: int | None = None) -> optuna.trial.FrozenTrial:
    """The trial with the best composite (or trial ``number``), which must have completed."""
    from optuna.trial import TrialState

    if number is None:
        ranked = ranked_trials(study)
        if not ranked:
            raise InputError(f"study '{study.study_name}' has no completed trial yet")
        return ranked[0]
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise InputError(f"study '{study.study_name}' has no trial #{number}", field="trial")
    trial = trials[number]
    record = TrialRecord.of(trial)
    if trial.state != TrialState.COMPLETE or record is None or record.composite is None:
        raise InputError(f"trial #{number} did not complete ({trial.state.name})", field="trial")
    return trial


def export_document(study: optuna.Study, trial: optuna.trial.FrozenTrial, storage: str) -> dict[str, Any]:
    """The exported record: ``pipeline`` (the config), ``scores``, ``objective`` and ``provenance``."""
    info = study.user_attrs.get(STUDY_ATTR, {})
    record = TrialRecord.of(trial)
    assert record is not None
    provenance = {
        "study": study.study_name,
        "trial": trial.number,
        "storage": scrub_url(storage),
        "corpus": info.get("corpus"),
        "corpus_fingerprint": info.get("corpus_fingerprint"),
        "questions": info.get("questions"),
        "questions_fingerprint": info.get("questions_fingerprint"),
        "selection_fingerprint": info.get("selection_fingerprint"),
        "split": info.get("split"),
        "max_questions": info.get("max_questions"),
        "index_key": record.index.key if record.index is not None else None,
        "factory": bool(info.get("factory")),
        "composer_version": composer_version(),
        "exported_at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
    }
    doc: dict[str, Any] = {
        "pipeline": dict(record.config),
        "scores": {k: _plain(v) for k, v in record.metrics.items()},
        "objective": {"k_eval": info.get("k_eval"), "weights": study.user_attrs.get("objective_weights")},
        "provenance": provenance,
    }
    held_out = study.user_attrs.get("held_out")
    if held_out:
        doc["held_out"] = held_out
    agreement = study.user_attrs.get(JUDGE_ATTR)
    if agreement:
        doc["judge_agreement"] = agreement
    return scrub(doc)


def write_export(doc: dict[str, Any], out: Path, fmt: ExportFormat = "yaml") -> Path:
    """Written atomically, with the permissions of any file the user makes (the umask's): an export holds
    no credential (they are scrubbed) and is made to be shared, where the temporary file's 0600 would keep
    it from a team or a container."""
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, render_yaml(doc) if fmt == "yaml" else render_python(doc))
    return out


def prompt_of(config: Mapping[str, Any]) -> UserPrompt | None:
    """The team's prompt a trial's pipeline config answers with, resolved as the trial recorded it (its
    text, and where it came from); None for a built-in template or no generation."""
    raw = (config.get("generation") or {}).get("prompt")
    if raw is None:
        return None
    if not isinstance(raw, Mapping):  # a trial resolves its prompt before it runs
        raise InputError(f"the trial's generation.prompt {raw!r} was never resolved to its text",
                         field="generation.prompt")
    return UserPrompt.model_validate(dict(raw))


def exported_prompt(doc: Mapping[str, Any]) -> UserPrompt | None:
    """The team's prompt an exported winner answers with (``prompt_of``); None for a factory's study,
    whose settings mean what the factory makes of them, a ``generation.prompt`` key included."""
    return None if (doc.get("provenance") or {}).get("factory") else prompt_of(doc["pipeline"])


def describe_prompt(prompt: UserPrompt) -> str:
    """Which prompt a winner answers with: where its text came from, and its hash."""
    where = prompt.source or "written inline"
    return f"{where} (sha256 {prompt.sha256[:12]}), its text in generation.prompt"


def render_yaml(doc: dict[str, Any]) -> str:
    prov = doc["provenance"]
    header = (f"# Best pipeline of Composer study '{prov['study']}' (trial #{prov['trial']}).\n"
              "# Reproduce its scores: composer eval QUESTIONS --corpus CORPUS --config <this file> "
              "--split selection\n")
    if (prompt := exported_prompt(doc)) is not None:
        header += f"# Prompt: {describe_prompt(prompt)}\n"
    agreement = JudgeAgreement.from_dict(doc.get("judge_agreement"))
    if agreement is not None:
        header += f"# Judge {agreement.judge_model}, agreement with human labels:\n"
        header += "".join(f"#   {line}\n" for line in agreement.lines())
        warning = agreement.warning()
        if warning is not None:
            header += f"# Warning: {warning}\n"
    return header + dump_yaml(doc)


def render_python(doc: dict[str, Any]) -> str:
    """A runnable script: index a corpus with the winning pipeline, answer questions given as arguments."""
    prov = doc["provenance"]
    composite = doc["scores"].get("composite")
    score = f", composite {composite:.4f}" if isinstance(composite, float) else ""
    config = pprint.pformat(doc["pipeline"], sort_dicts=False, width=100)
    user = exported_prompt(doc)
    prompt = "" if user is None else f"\nPrompt: {describe_prompt(user)} of CONFIG, sent as it is.\n"
    return f'''"""Best RAG pipeline of Composer study {prov["study"]!r} (trial #{prov["trial"]}{score}).
{prompt}
Exported by Composer {prov["composer_version"]} on {prov["exported_at"]}. Usage:

    python {{script}} CORPUS "question" ["another question" ...]

CORPUS is a JSONL/JSON/CSV/Parquet file or a folder of documents; indexes and embeddings are cached
under ./.composer, so the second run starts at once. With an LLM in the pipeline (generation.model) its
server must be reachable, and the key read from the variable named by generation.api_key_env.
"""

from __future__ import annotations

import sys

from composer.data import Question, load_corpus
from composer.pipeline.config import PipelineConfig
from composer.pipeline.pipeline import Pipeline

CONFIG = {config}


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.replace("{{script}}", sys.argv[0]), file=sys.stderr)
        return 2
    pipeline = Pipeline.from_config(PipelineConfig.from_dict(CONFIG))
    pipeline.index(load_corpus(argv[0]))
    questions = [Question(id=str(i), question=text) for i, text in enumerate(argv[1:])]
    ranking, _ = pipeline.rank(questions)
    answers = pipeline.answer(questions, ranking)
    for row, q in enumerate(questions):
        hits, answer = ranking.hits(row), answers[q.id]
        print(f"? {{q.question}}")
        if answer.failed:
            print(f"  answer failed: {{answer.result.error if answer.result else 'no reply'}}")
        else:
            print(f"  answer: {{answer.text}}")
        for rank, hit in enumerate(hits, start=1):
            snippet = " ".join((hit.text or "").split())[:160]
            print(f"  {{rank:>2}}. {{hit.score:8.4f}}  {{hit.doc_id}}  {{snippet}}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
'''


def _plain(value: Any) -> Any:
    """Plain floats for YAML (numpy scalars would be dumped as Python objects)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
