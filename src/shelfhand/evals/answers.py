"""The answer benchmark: are the answers a user reads right, grounded, cited and honest?

Each case is a question on the workspace's documents with the facts a right answer states,
or ``"not_found": true`` when the documents do not answer it. Every case runs through the
same path as ``shelfhand ask`` (:meth:`App.chat_agent <shelfhand.app.App.chat_agent>` with
the answer check, or the extractive answer without a model), so what is measured is what a
user gets.

Case file (JSONL, one object a line)::

    {"id": "warranty-zh", "lang": "zh", "question": "投影仪的保修期是多久？",
     "facts": ["24"], "sources": ["warranty-policy-v2.md"]}
    {"id": "weather-en", "lang": "en", "question": "What is the weather today?",
     "not_found": true}

A fact is one string or alternatives joined by ``|`` (``"overheat|过热"``); it is present when
the answer holds it, case-insensitive, thousands separators ignored. Measures:

- **right**: every fact present (for a ``not_found`` case: the answer says the documents do
  not cover it, and shows no passage's sentences);
- **grounded**: the grounding check found no unsupported sentence in the answer shown;
- **unflagged**: answers with an unsupported sentence the user was not told about (an
  answer with passages that was not checked, or one stating numbers, codes or citation marks
  with nothing searched: a guess, see :func:`~shelfhand.agent.answer_check.guessed`): must
  be 0;
- **cited right**: the answer's evidence includes a passage of one of the case's ``sources``;
- **not found right**: the ``not_found`` cases answered so;
- **extractive**: answers that are the passages' own sentences;
- **latency** per answer, and the grounding check's own time per answer.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from shelfhand.agent.answer_check import guessed, is_refusal, relevant_citations
from shelfhand.agent.fallbacks import says_not_covered
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError, ModelError
from shelfhand.core.results import RunResult

from .case_files import case_objects, states

__all__ = [
    "AnswerCase",
    "AnswerOutcome",
    "judge",
    "load_answer_cases",
    "run_answer_eval",
    "sample_answer_cases",
    "summarise_answers",
]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnswerCase:
    id: str
    question: str
    facts: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    not_found: bool = False
    lang: str = ""


@dataclass(slots=True, kw_only=True)
class AnswerOutcome:
    id: str
    question: str
    lang: str = ""
    not_found_case: bool = False
    answer: str = ""
    right: bool = False
    missing_facts: list[str] = field(default_factory=list)
    grounded: bool | None = None
    """``None``: the answer was not checked (no passages, or a "not covered" answer)."""
    unflagged: bool = False
    cited_right: bool | None = None
    extractive: bool = False
    fallback_reason: str = ""
    stop_reason: str = ""
    error: str | None = None
    latency_s: float = 0.0
    check_ms: float | None = None


def sample_answer_cases() -> Path:
    """The bundled answer cases over the sample documents (English and Chinese)."""
    from importlib.resources import files

    return Path(str(files("shelfhand") / "samples" / "answer-cases.jsonl"))


def _strings(value: object, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ConfigurationError(f'{where}: "{key}" must be a list of non-empty strings')
    return tuple(value)


def load_answer_cases(path: Path) -> list[AnswerCase]:
    """Read a case file; a bad line is a :class:`ConfigurationError` naming file and line."""
    cases: list[AnswerCase] = []
    for where, data in case_objects(path):
        question = data.get("question")
        if not isinstance(question, str) or not question.strip():
            raise ConfigurationError(f'{where}: "question" must be a non-empty string')
        facts = _strings(data.get("facts"), where, "facts")
        not_found = data.get("not_found") is True
        if not facts and not not_found:
            raise ConfigurationError(f'{where}: give "facts" or "not_found": true')
        cases.append(
            AnswerCase(
                id=str(data.get("id") or f"case-{len(cases) + 1}"),
                question=question,
                facts=facts,
                sources=_strings(data.get("sources"), where, "sources"),
                not_found=not_found,
                lang=str(data.get("lang") or ""),
            )
        )
    if not cases:
        raise ConfigurationError(f"{path} holds no cases")
    return cases


def says_not_found(answer: str) -> bool:
    """Whether ``answer`` tells the user the documents do not answer the question."""
    return says_not_covered(answer) or is_refusal(answer)


def judge(case: AnswerCase, result: RunResult, outcome: AnswerOutcome) -> None:
    """Fill ``outcome``'s judgement of ``result`` for ``case``."""
    answer = result.output
    outcome.answer = answer
    outcome.extractive = result.extractive
    outcome.fallback_reason = result.fallback_reason
    outcome.stop_reason = result.stop_reason
    if case.not_found:
        outcome.right = says_not_found(answer) and not result.extractive
    else:
        outcome.missing_facts = [f for f in case.facts if not states(answer, f)]
        outcome.right = not outcome.missing_facts and result.stop_reason == "final"
    grounding = result.grounding
    if grounding is not None:
        outcome.grounded = grounding.grounded
    # an answer with passages behind it that nobody checked could be wrong silently, and so
    # could one stating facts with nothing searched (the check has nothing to read it against)
    unchecked = bool(result.citations) and grounding is None
    unsearched = not result.citations and result.usage.retrievals == 0
    outcome.unflagged = not says_not_found(answer) and (
        unchecked or (unsearched and guessed(answer, case.question))
    )
    if case.sources:
        evidence = relevant_citations(result.citations, answer)
        outcome.cited_right = any(
            c.source.endswith(s) or c.source.endswith("/" + s)
            for c in evidence
            for s in case.sources
        )


def _share(values: Sequence[bool]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


def summarise_answers(outcomes: Sequence[AnswerOutcome]) -> dict[str, Any]:
    """The measures of the module docstring over ``outcomes``."""
    answerable = [o for o in outcomes if not o.not_found_case]
    absent = [o for o in outcomes if o.not_found_case]
    checked = [o.grounded for o in outcomes if o.grounded is not None]
    cited = [o.cited_right for o in answerable if o.cited_right is not None]
    latencies = sorted(o.latency_s for o in outcomes)
    checks = sorted(o.check_ms for o in outcomes if o.check_ms is not None)
    return {
        "cases": len(outcomes),
        "right": _share([o.right for o in answerable]),
        "right_count": sum(o.right for o in answerable),
        "answerable": len(answerable),
        "grounded": _share([bool(g) for g in checked]),
        "unflagged": sum(o.unflagged for o in outcomes),
        "cited_right": _share([bool(c) for c in cited]),
        "not_found_right": _share([o.right for o in absent]),
        "not_found_count": f"{sum(o.right for o in absent)}/{len(absent)}",
        "extractive": _share([o.extractive for o in outcomes]),
        "errors": sum(o.error is not None for o in outcomes),
        "latency_s_mean": round(statistics.fmean(latencies), 3) if latencies else None,
        "latency_s_p95": round(latencies[int(0.95 * (len(latencies) - 1))], 3)
        if latencies
        else None,
        "check_ms_mean": round(statistics.fmean(checks), 3) if checks else None,
        "check_ms_p95": round(checks[int(0.95 * (len(checks) - 1))], 3) if checks else None,
    }


def run_answer_eval(
    app: Any,
    cases: Sequence[AnswerCase],
    *,
    model: Any = None,
    on_case: Callable[[AnswerOutcome], Any] | None = None,
) -> dict[str, Any]:
    """Ask every case through ``app`` (the ``ask`` path) and return the summary with
    ``results``.

    Args:
        app: A :class:`~shelfhand.app.App` whose workspace holds the documents.
        cases: From :func:`load_answer_cases`.
        model: The chat model (``None``: the extractive answer without a model).
        on_case: Called with each outcome as it completes (progress output).
    """
    kb = app.open_knowledge()
    try:
        app.warm_up(kb)
        # one event loop for every case: the model's HTTP client belongs to the loop
        outcomes = asyncio.run(_run_all(app, kb, cases, model, on_case))
    finally:
        kb.close()
    return {**summarise_answers(outcomes), "results": [asdict(o) for o in outcomes]}


async def _run_all(
    app: Any,
    kb: Any,
    cases: Sequence[AnswerCase],
    model: Any,
    on_case: Callable[[AnswerOutcome], Any] | None,
) -> list[AnswerOutcome]:
    user = UserContext(tenant_id="default", user_id="eval", roles=["user"])
    outcomes: list[AnswerOutcome] = []
    for case in cases:
        outcome = AnswerOutcome(
            id=case.id, question=case.question, lang=case.lang, not_found_case=case.not_found
        )
        started = time.perf_counter()
        try:
            if model is None:
                result = await app.knowledge_agent(kb).run(case.question, context=user)
            else:
                result = await app.chat_agent(model, kb).run(case.question, context=user)
        except ModelError as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        else:
            outcome.latency_s = time.perf_counter() - started
            judge(case, result, outcome)
            if result.citations:
                timed = time.perf_counter()
                check_grounding(result.output, result.citations, question=case.question)
                outcome.check_ms = (time.perf_counter() - timed) * 1000
        outcomes.append(outcome)
        if on_case is not None:
            on_case(outcome)
    return outcomes
