"""Reading LLM replies that were asked for JSON and came back as something close to it.

Models wrap JSON in code fences, talk before and after it, use single quotes, trailing commas, Python
literals, unquoted keys, Arabic-Indic or Persian digits and Arabic commas, and give numbers outside the
asked range. Every reader here either returns a value in range or raises ParseError (a ValueError), which
the LLM client treats as an unusable reply: retried, never cached.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from composer.text.normalize import fold_digits


class ParseError(ValueError):
    """The reply holds no usable answer to what was asked."""


_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_BARE_KEY = re.compile(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:")
_SMART_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "«": '"', "»": '"', "‘": "'", "’": "'"})
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?")


def normalize_digits(text: str) -> str:
    """Arabic-Indic and Persian digits (and the Arabic decimal point) as ASCII."""
    return fold_digits(text).replace("٫", ".")


def extract_json(text: str) -> Any:
    """The first JSON value found in ``text``: fenced, bare, or embedded in prose, repaired if needed."""
    for candidate in _candidates(text):
        value = _loads(candidate)
        if value is not None:
            return value
    raise ParseError(f"no JSON in reply: {_preview(text)}")


def _candidates(text: str) -> Iterator[str]:
    for block in _FENCE.findall(text):
        yield block.strip()
    yield text.strip()
    yield from _bracketed(text)
    if "```" in text:  # an unclosed fence: a reply cut off by max_tokens after the opening line
        yield text.split("```", 1)[1].partition("\n")[2]


def _bracketed(text: str) -> Iterator[str]:
    """Each balanced {...} or [...] span, outermost first, skipping brackets inside strings."""
    start, depth, quote, escaped = -1, 0, "", False
    for i, ch in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
            continue
        if ch == '"' and depth > 0:
            quote = ch
        elif ch in "{[":
            if depth == 0:
                start = i
            depth += 1
        elif ch in "}]" and depth > 0:
            depth -= 1
            if depth == 0:
                yield text[start : i + 1]


def _loads(candidate: str) -> Any:
    """``json.loads``, then with repairs; None when nothing parses (JSON null is no answer either)."""
    if not candidate or candidate[0] not in "{[":
        return None
    try:
        return json.loads(candidate)
    except json.JSONDecodeError:
        pass
    repaired = normalize_digits(candidate).translate(_SMART_QUOTES).replace("،", ",")
    repaired = _TRAILING_COMMA.sub(r"\1", repaired)
    try:
        return json.loads(repaired)
    except json.JSONDecodeError:
        pass
    try:
        return json.loads(_BARE_KEY.sub(r'\1"\2":', repaired))
    except json.JSONDecodeError:
        pass
    python = re.sub(r"\btrue\b", "True", re.sub(r"\bfalse\b", "False", re.sub(r"\bnull\b", "None", repaired)))
    try:
        value = ast.literal_eval(python)  # single quotes, Python literals
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, (dict, list)) else None


def _preview(text: str) -> str:
    flat = " ".join(text.split())
    return flat[:120] + ("..." if len(flat) > 120 else "")


# -- values --

_YES = frozenset(
    {
        "1",
        "yes",
        "y",
        "true",
        "supported",
        "correct",
        "relevant",
        "useful",
        "tp",
        "نعم",
        "صحيح",
        "بله",
        "آری",
        "درست",
    }
)
_NO = frozenset(
    {
        "0",
        "no",
        "n",
        "false",
        "unsupported",
        "not supported",
        "incorrect",
        "irrelevant",
        "fp",
        "fn",
        "لا",
        "خطأ",
        "خیر",
        "نه",
        "نادرست",
    }
)


def as_number(value: Any, low: float, high: float) -> float:
    """A number from an int, float or text ("4", "٤", "4/5", "4 out of 5"), clamped to [low, high]."""
    if isinstance(value, (bool, int, float)):
        number = float(value)
    elif isinstance(value, str):
        match = _NUMBER.search(normalize_digits(value))
        if match is None:
            raise ParseError(f"not a number: {value!r}")
        number = float(match.group())
    else:
        raise ParseError(f"not a number: {value!r}")
    if number != number:  # NaN
        raise ParseError("NaN is not a score")
    return min(high, max(low, number))


def as_verdict(value: Any) -> int:
    """1 or 0 from 1/0, booleans, yes/no (in English, Arabic or Persian) or {"verdict": ...}."""
    if isinstance(value, Mapping):
        for key in ("verdict", "supported", "useful", "attributed", "relevant", "value", "score"):
            if key in value:
                return as_verdict(value[key])
        raise ParseError(f"no verdict in {value!r}")
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return 1 if value >= 0.5 else 0
    if isinstance(value, str):
        text = normalize_digits(value).strip().lower()
        for word in (text.strip(".!\"'"), text.split()[0].strip(".,:;!\"'") if text else ""):
            if word in _YES:
                return 1
            if word in _NO:
                return 0
    raise ParseError(f"not a verdict: {value!r}")


def _field(data: Any, keys: Sequence[str]) -> Any:
    """The first of ``keys`` present in a JSON object (case-insensitive), else KeyError."""
    if isinstance(data, Mapping):
        lowered = {str(k).strip().lower(): v for k, v in data.items()}
        for key in keys:
            if key in lowered:
                return lowered[key]
    raise KeyError(keys[0])


def _list_field(data: Any, keys: Sequence[str]) -> list[Any]:
    """A list given bare or under one of ``keys``."""
    if isinstance(data, list):
        return data
    try:
        value = _field(data, keys)
    except KeyError:
        raise ParseError(f"expected a list under {keys[0]!r}") from None
    if not isinstance(value, list):
        raise ParseError(f"{keys[0]!r} is not a list")
    return value


# -- reply schemas --

_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\[\d+\])\s+(.+?)\s*$")


def parse_statements(reply: str) -> list[str]:
    """{"statements": [...]} (or a bare list, or a bulleted list when there is no JSON)."""
    try:
        items = _list_field(extract_json(reply), ("statements", "claims", "sentences"))
    except ParseError:
        bullets = [m.group(1) for line in reply.splitlines() if (m := _BULLET.match(normalize_digits(line)))]
        if not bullets:
            raise
        return bullets
    statements = [_text(item, ("statement", "claim", "text")) for item in items]
    return [s for s in statements if s]


def _text(item: Any, keys: Sequence[str]) -> str:
    if isinstance(item, Mapping):
        try:
            item = _field(item, keys)
        except KeyError:
            raise ParseError(f"no text in {item!r}") from None
    if not isinstance(item, (str, int, float)):
        raise ParseError(f"not a text: {item!r}")
    return " ".join(str(item).split())


def parse_verdicts(reply: str, expected: int) -> list[int]:
    """{"verdicts": [1, 0, ...]} with one verdict per numbered item; extra verdicts are dropped."""
    items = _list_field(extract_json(reply), ("verdicts", "verdict", "results", "labels"))
    if len(items) < expected:
        raise ParseError(f"{len(items)} verdicts for {expected} items")
    return [as_verdict(v) for v in items[:expected]]


def parse_classification(reply: str, answer_count: int, reference_count: int) -> tuple[list[int], list[int]]:
    """{"answer": [...], "reference": [...]}: answer statements backed by the reference, reference covered."""
    data = extract_json(reply)
    try:
        answer = _field(data, ("answer", "answer_statements", "tp_fp"))
        reference = _field(data, ("reference", "reference_statements", "ground_truth", "fn"))
    except KeyError as missing:
        raise ParseError(f"classification without {missing}") from None
    if not isinstance(answer, list) or not isinstance(reference, list):
        raise ParseError("classification lists expected")
    if len(answer) < answer_count or len(reference) < reference_count:
        raise ParseError("fewer verdicts than statements")
    return [as_verdict(v) for v in answer[:answer_count]], [
        as_verdict(v) for v in reference[:reference_count]
    ]


_RATING_WORDS = re.compile(
    r"(?:rating|score|grade|التقييم|الدرجة|امتیاز|نمره)\W{0,3}\s*([-+]?\d+(?:\.\d+)?)", re.I
)


def parse_rating(reply: str, low: float = 1, high: float = 5) -> tuple[float, str]:
    """{"rating": n, "reason": "..."} clamped to [low, high]; "Rating: 4/5" or a bare number also do."""
    try:
        data = extract_json(reply)
    except ParseError:
        text = normalize_digits(reply)
        match = _RATING_WORDS.search(text) or re.fullmatch(
            r"\s*([-+]?\d+(?:\.\d+)?)\s*(?:/\s*\d+)?\s*\.?\s*", text
        )
        if match is None:
            raise
        return as_number(match.group(1), low, high), _preview(reply)
    try:
        value = _field(data, ("rating", "score", "grade"))
    except KeyError:
        raise ParseError("no rating in reply") from None
    try:
        reason = str(_field(data, ("reason", "explanation", "justification")))
    except KeyError:
        reason = ""
    return as_number(value, low, high), reason


def parse_questions(reply: str) -> tuple[list[str], bool]:
    """{"questions": [...], "noncommittal": 0|1} for answer relevancy."""
    data = extract_json(reply)
    questions = [_text(q, ("question", "text")) for q in _list_field(data, ("questions", "question"))]
    try:
        noncommittal = as_verdict(_field(data, ("noncommittal", "non_committal", "evasive")))
    except KeyError:
        noncommittal = 0
    questions = [q for q in questions if q]
    if not questions:
        raise ParseError("no questions in reply")
    return questions, bool(noncommittal)


def parse_queries(reply: str) -> list[str]:
    """{"queries": [...]} (multi-query expansion); a bulleted list also does."""
    try:
        items = _list_field(extract_json(reply), ("queries", "questions", "rephrasings", "paraphrases"))
        queries = [_text(q, ("query", "question", "text")) for q in items]
    except ParseError:
        queries = [m.group(1) for line in reply.splitlines() if (m := _BULLET.match(normalize_digits(line)))]
    queries = [q for q in queries if q]
    if not queries:
        raise ParseError("no queries in reply")
    return queries


def parse_step_back(reply: str) -> str:
    """{"question": "..."} (step-back expansion): the one more general question."""
    question = _text(extract_json(reply), ("question", "step_back_question", "step_back", "query"))
    if not question:
        raise ParseError("no question in reply")
    return question


_CHAIN = re.compile(r"\[\d+\]\s*(?:>|,|>>)\s*\[\d+\]")


def parse_ranking(reply: str, count: int) -> list[int]:
    """Zero-based passage order from {"ranking": [3, 1, 2]} (1-based) or "[3] > [1] > [2]".

    Unknown numbers and repeats are dropped; passages the model left out keep their order at the end.
    """
    text = normalize_digits(reply)
    if _CHAIN.search(text):  # "[2] > [3] > [1]": each "[n]" alone would parse as a JSON list
        numbers = [int(n) for n in re.findall(r"\[(\d+)\]", text)]
    else:
        try:
            items = _list_field(extract_json(text), ("ranking", "order", "ranked", "passages"))
            numbers = [int(as_number(i, -1, count + 1)) for i in items]
        except ParseError:
            numbers = [int(n) for n in re.findall(r"\d+", text)]
            if not numbers:
                raise
    order: list[int] = []
    for n in numbers:
        if 1 <= n <= count and n - 1 not in order:
            order.append(n - 1)
    if not order:
        raise ParseError("ranking names no passage")
    return order + [i for i in range(count) if i not in order]


def parse_score(reply: str, low: float, high: float) -> float:
    """{"score": n} or a bare number, clamped to [low, high] (pointwise reranking)."""
    try:
        return as_number(_field(extract_json(reply), ("score", "rating", "relevance")), low, high)
    except (ParseError, KeyError):
        match = _NUMBER.search(normalize_digits(reply))
        if match is None:
            raise ParseError(f"no score in reply: {_preview(reply)}") from None
        return as_number(match.group(), low, high)
