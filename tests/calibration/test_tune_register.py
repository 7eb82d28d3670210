"""`composer judges tune --register`: the chosen judge's verdict prompt, its variant's sentence and its
examples written in, becomes a registry version tagged with its kappa and the labels file's hash; the
judge block written names that version, reads back to the same text, and starts checked."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from fake_llm_server import ChatRequest, FakeLLMServer
from typer.testing import CliRunner

from composer.cli.app import app
from composer.judges.config import load_judge_file, resolve_judge
from composer.judges.trust import latest_check
from composer.prompts.registry import load_registered


def rows() -> list[dict[str, object]]:
    """Faithfulness labels in English and Arabic: an answer saying "wrong" (خطأ) is unsupported."""
    out: list[dict[str, object]] = []
    for lang, question, mark in (("en", "What is the capital of Egypt?", "wrong"),
                                 ("ar", "ما عاصمة مصر؟", "خطأ")):
        for i in range(8):
            bad = i % 2 == 1
            out.append({"id": f"{lang}{i}", "question": question, "contexts": ["Cairo is the capital"],
                        "answer": f"Cairo {mark if bad else 'ok'} {i}", "metric": "faithfulness",
                        "label": int(not bad)})
    return out


def honest(req: ChatRequest) -> str:
    judged = req.prompt.rpartition("\n---\n")[2]
    (statement,) = re.findall(r"^1\. (.+)$", judged, flags=re.MULTILINE)
    return json.dumps({"verdicts": [int("wrong" not in statement and "خطأ" not in statement)]})


def test_tune_registers_the_winning_prompt_and_the_judge_block_names_it(tmp_path: Path) -> None:
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows()), encoding="utf-8")
    space = tmp_path / "judges.yaml"
    space.write_text("models: [openai/honest]\nprompts: [lenient]\nshots: [1]\nheld_out: 0.5\nseed: 1\n",
                     encoding="utf-8")
    out, work, store = tmp_path / "judge.yaml", tmp_path / "work", f"sqlite:///{tmp_path}/registry.db"
    with FakeLLMServer(honest) as server:
        result = CliRunner().invoke(app, ["judges", "tune", str(labels), "--space", str(space),
                                          "--out", str(out), "--workdir", str(work), "--llm-base", server.url,
                                          "--register", "team-judge", "--tracking-uri", store])
    assert result.exit_code == 0, result.output
    uri = "prompts:/team-judge.faithfulness/1"
    assert f"faithfulness: prompt registered as {uri}" in result.output
    block = load_judge_file(out)
    assert not isinstance(block.prompt, str) and block.prompt.faithfulness == uri
    assert block.examples == ()  # written into the registered prompt, never added twice
    registered = load_registered(uri, store)
    assert registered.source == uri and registered.version == 1
    assert registered.en is not None and "Be lenient" in registered.en.system
    assert "Verdicts people gave on other answers" in registered.en.user  # the examples, as sent
    assert registered.ar is not None and "كن متساهلًا" in registered.ar.system
    import mlflow

    tags = mlflow.MlflowClient(store).get_prompt_version("team-judge.faithfulness", 1).tags
    assert tags["composer.labels_sha256"] == hashlib.sha256(labels.read_bytes()).hexdigest()
    assert float(tags["composer.kappa"]) == 1.0
    resolved = resolve_judge(block, path=out, tracking_uri=store)
    assert latest_check(resolved, None, work)["faithfulness"] is not None  # the block starts checked


def test_a_judge_naming_its_registered_prompt_sends_what_the_tuned_judge_sent(tmp_path: Path) -> None:
    """The check is carried over to the registered judge's key, so its requests must be the tuned judge's."""
    from composer.data.types import Question
    from composer.judges import JudgeSettings, make_judges
    from composer.judges.guidance import JudgeExample
    from composer.judges.own_prompts import sent_prompt
    from composer.llm.client import LLMClient
    from composer.llm.config import LLMConfig

    examples = tuple(JudgeExample(metric="faithfulness", lang=lang, question=q, answer="Cairo {x} $5",
                                  contexts=("Cairo is the capital",), label=1, rationale="stated {so}")
                     for lang, q in (("en", "Capital?"), ("ar", "ما عاصمة مصر؟")))
    tuned = JudgeSettings(metrics=("faithfulness",), prompt="lenient", examples=examples)
    sent = sent_prompt("faithfulness", "lenient", examples)
    registered = JudgeSettings.model_validate({"metrics": ["faithfulness"], "prompt": {"faithfulness": sent}})
    bodies: list[list[dict[str, object]]] = []
    for settings in (tuned, registered):
        with FakeLLMServer(lambda req: json.dumps({"verdicts": [1]})) as server:
            config = LLMConfig(model="openai/judge", api_base=server.url, max_retries=0)
            client = LLMClient(config, cache_dir=tmp_path / str(len(bodies)))
            judge = make_judges(client, settings)["faithfulness"]
            for text in ("What is the capital of Egypt?", "ما عاصمة مصر؟"):
                judge.score(Question("q", text), "Cairo.", ["Cairo is the capital {y} $z"], None)
            bodies.append([m for req in server.received for m in req.messages])
    assert len(bodies[0]) == 4 and "Be lenient" in str(bodies[0][0]["content"])
    assert bodies[1] == bodies[0]
