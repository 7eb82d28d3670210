"""`composer judges tune`: two scripted judge models of known agreement, one honest and one that only
agrees on the answers it is shown as examples. The search scores every candidate on held-out labels, so it
picks the honest one; no held-out answer is ever shown as an example; examples match the answer's
language; a rerun is served from the cache; the judge block it writes is what an experiment reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fake_llm_server import ChatRequest, FakeLLMServer
from typer.testing import CliRunner

from composer.calibration.check import check
from composer.calibration.tune import draw_examples, split_labels, tune
from composer.cli.app import app
from composer.errors import ConfigError
from composer.judges.agreement import cohen_kappa
from composer.judges.config import load_judge_file
from composer.judges.labels import load_labels
from composer.judges.trust import latest_check

MARK = {"ar": "خطأ", "en": "wrong"}
N = 12  # answers per language


def rows() -> list[dict[str, object]]:
    """Faithfulness labels in Arabic and English: an answer with the language's MARK is unsupported, but
    people disagree with that rule on every sixth answer."""
    out: list[dict[str, object]] = []
    for lang, question, context in (("ar", "ما عاصمة مصر؟", "القاهرة عاصمة مصر"),
                                     ("en", "What is the capital of Egypt?", "Cairo is the capital")):
        for i in range(N):
            bad = i % 2 == 1
            human_bad = bad != (i % 6 == 0)
            answer = f"{'القاهرة' if lang == 'ar' else 'Cairo'} {MARK[lang] if bad else 'ok'} {lang}{i:02d}"
            out.append({"id": f"{lang}{i:02d}", "question": question, "answer": answer, "contexts": [context],
                        "metric": "faithfulness", "label": 0 if human_bad else 1})
    return out


HUMAN = {str(r["answer"]): int(str(r["label"])) for r in rows()}
LANG = {str(r["answer"]): str(r["id"])[:2] for r in rows()}
ID = {str(r["answer"]): str(r["id"]) for r in rows()}


def parts(prompt: str) -> tuple[str, str]:
    """(the examples shown, the material judged) of a judge prompt."""
    shown, sep, judged = prompt.rpartition("\n---\n")
    return (shown, judged) if sep else ("", prompt)


def judge_route(req: ChatRequest) -> str:
    """``honest`` fails an answer with a MARK; ``parrot`` returns the human label of an answer it is shown
    as an example, and passes every other one."""
    shown, judged = parts(req.prompt)
    (statement,) = re.findall(r"^1\. (.+)$", judged, flags=re.MULTILINE)
    if req.model == "honest":
        verdict = int(not any(mark in statement for mark in MARK.values()))
    else:
        verdict = HUMAN[statement] if statement in shown else 1
    return json.dumps({"verdicts": [verdict], "reason": "r"})


SPACE = "models: [openai/parrot, openai/honest]\nshots: [0, 3]\nheld_out: 0.5\nseed: 1\nn_trials: 8\n"


@pytest.fixture
def labels_file(tmp_path: Path) -> Path:
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows()), encoding="utf-8")
    return path


def test_the_split_is_stratified_by_language_and_examples_come_from_its_train_side(labels_file: Path) -> None:
    labels = load_labels(labels_file)
    split = split_labels(labels, 0.5, seed=1)
    held = {lb.id for lb in split.held_out}
    assert held.isdisjoint(lb.id for lb in split.train)
    assert sum(i.startswith("ar") for i in held) == sum(i.startswith("en") for i in held) == N // 2
    examples = draw_examples(split.train, ["faithfulness"], 3, draw=0, seed=1)
    assert {e.lang for e in examples} == {"ar", "en"} and len(examples) == 6
    assert all(e.id not in held for e in examples)
    assert all({e.label for e in examples if e.lang == lang} == {0, 1} for lang in ("ar", "en"))
    assert draw_examples(split.train, ["faithfulness"], 3, draw=1, seed=1) != examples


def test_the_python_twin_takes_a_labels_file_and_a_space_mapping(labels_file: Path, tmp_path: Path) -> None:
    with FakeLLMServer(judge_route) as server:
        result = tune(labels_file, {"models": ["openai/honest"], "prompts": ["default", "lenient"],
                                    "held_out": 0.5, "seed": 1, "api_base": server.url},
                      workdir=tmp_path / "work", store=False)
    assert sorted(t.prompt for t in result.trials) == ["default", "lenient"]
    assert result.best.model == "openai/honest" and result.judge.prompt == "default"  # a tie: the plain one
    assert result.check.metrics["faithfulness"].overall.n == N
    assert latest_check(result.judge, None, tmp_path / "work") == {"faithfulness": None}  # store=False


def test_tune_picks_the_judge_that_agrees_on_held_out_labels_and_a_rerun_sends_nothing(
    labels_file: Path, tmp_path: Path
) -> None:
    work, out, space = tmp_path / "work", tmp_path / "judge.yaml", tmp_path / "judges.yaml"
    space.write_text(SPACE, encoding="utf-8")
    args = ["judges", "tune", str(labels_file), "--space", str(space), "--out", str(out),
            "--workdir", str(work)]
    with FakeLLMServer(judge_route) as server:
        first = CliRunner().invoke(app, [*args, "--llm-base", server.url])
        assert first.exit_code == 0, first.output
        sent = list(server.received)
        assert server.chat_requests > 0
        server.reset_counts()
        server_url = server.url
        again = CliRunner().invoke(app, [*args, "--llm-base", server.url, "--json"])
        assert again.exit_code == 0, again.output
        assert server.chat_requests == 0
        # Scored on the examples it shows, the parrot would win: the held-out split is what tells them apart.
        split = split_labels(load_labels(labels_file), 0.5, seed=1)
        examples = draw_examples(split.train, ["faithfulness"], 3, draw=0, seed=1)
        honest = load_judge_file(out).model_copy(update={"examples": examples})
        parrot = honest.model_copy(update={"model": "openai/parrot"})
        result = json.loads(again.stdout)
        shown = [lb for lb in split.train if lb.id in {e.id for e in examples}]
        on_shown = {j.model: check(shown, j, workdir=work, store=False).metrics["faithfulness"].overall.kappa
                    for j in (parrot, honest)}
    assert "Judges tried" in first.output and "honest" in first.output and "parrot" in first.output
    assert result["best"]["model"] == "openai/honest" and len(result["trials"]) == 4
    scores = {(t["model"], t["shots"]): t["score"] for t in result["trials"]}
    assert scores[("openai/parrot", 0)] == scores[("openai/parrot", 3)] == 0.0
    assert scores[("openai/honest", 3)] > 0.3
    assert on_shown["openai/parrot"] == 1.0 > on_shown["openai/honest"]  # shown-example scoring would err
    # Not one held-out answer was ever shown as an example, and examples match the question's language.
    held = {lb.id for lb in split.held_out}
    # The chosen judge's held-out agreement per language is the honest rule's, answer by answer.
    by_language = result["held_out_check"]["metrics"]["faithfulness"]["by_language"]
    for lang in ("ar", "en"):
        mine = [lb for lb in split.held_out if lb.id.startswith(lang)]
        expected = cohen_kappa([lb.label for lb in mine], [int(MARK[lang] not in lb.answer) for lb in mine])
        assert by_language[lang]["n"] == N // 2
        assert by_language[lang]["kappa"] == pytest.approx(expected, abs=1e-4)
    with_examples = [r for r in sent if parts(r.prompt)[0]]
    assert with_examples
    for request in with_examples:
        shown_part, judged = parts(request.prompt)
        seen = [a for a in HUMAN if a in shown_part]
        (statement,) = re.findall(r"^1\. (.+)$", judged, flags=re.MULTILINE)
        assert len(seen) == 3 and not {ID[a] for a in seen} & held
        assert {LANG[a] for a in seen} == {LANG[statement]}
    # The judge block: model, prompt variant and examples; its held-out agreement stored as its check.
    written = out.read_text(encoding="utf-8")
    assert written.startswith("# Judge chosen by `composer judges tune`") and "kappa" in written
    chosen = load_judge_file(out)
    assert chosen.model == "openai/honest" and chosen.prompt == "default"
    assert len(chosen.examples) == (6 if result["best"]["shots"] == 3 else 0)
    assert chosen.api_base == server_url
    stored = latest_check(chosen, None, work)["faithfulness"]
    assert stored is not None and stored["n"] == len(held) and "held out" in stored["labels"]
    assert stored["kappa"] == pytest.approx(result["held_out_check"]["metrics"]["faithfulness"]["kappa"])


def test_an_experiment_reads_the_judge_file_and_a_bad_one_names_file_and_key(tmp_path: Path) -> None:
    from composer.study.experiment import load_experiment

    judge = tmp_path / "judge.yaml"
    judge.write_text("judge:\n  model: openai/honest\n  prompt: strict\n  examples:\n"
                     "    - {metric: faithfulness, lang: en, question: q, answer: a, label: 1}\n",
                     encoding="utf-8")
    exp = tmp_path / "experiment.yaml"
    exp.write_text("name: t\ncorpus: c.jsonl\nquestions: q.jsonl\nsearch_space: s.yaml\njudge: judge.yaml\n",
                   encoding="utf-8")
    loaded = load_experiment(exp)
    assert loaded.judge is not None and loaded.judge.prompt == "strict"
    assert loaded.judge.examples[0].answer == "a"
    judge.write_text("judge:\n  model: openai/honest\n  prompt: harsh\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_experiment(exp)
    assert caught.value.path == str(judge) and caught.value.field == "judge.prompt"


def test_a_bad_space_file_is_one_line_with_exit_2(labels_file: Path, tmp_path: Path) -> None:
    space = tmp_path / "judges.yaml"
    space.write_text("models: [openai/honest]\nshots: [-1]\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["judges", "tune", str(labels_file), "--space", str(space),
                                      "--workdir", str(tmp_path / "work")])
    assert result.exit_code == 2
    assert str(space) in result.output and "shots" in result.output and "Traceback" not in result.output
