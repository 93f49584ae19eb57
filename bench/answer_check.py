"""What the grounding check costs per answer, on the bundled answer cases.

For each case of ``samples/answer-cases.jsonl`` the passages are retrieved once (as ``ask``
does), and three answers are checked against them: the extractive answer, a model-like
answer (the top passage's first two sentences, citing [1]) and the same with a number
changed (an unsupported one). Each check is timed cold (the passage analysis cache cleared
first: the cost for passages never seen before) and warm (passages seen before), interleaved
so machine noise hits both alike. ``whole`` times what an answer goes through: the
:class:`~shelfhand.agent.answer_check.AnswerCheck` as the app builds it (the check, the
tests of whether the answer answers the question, and the extractive answer that replaces
it when it does not).

Usage::

    shelfhand ingest --samples --workspace /tmp/ws
    PYTHONPATH=src python3 bench/answer_check.py --workspace /tmp/ws [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time

from shelfhand.agent import answer_topic, grounding_check
from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck
from shelfhand.agent.extractive import extractive_answer
from shelfhand.agent.grounding_check import check_grounding, split_sentences
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult
from shelfhand.evals.answers import load_answer_cases, sample_answer_cases


def _forget() -> None:
    """Clear the passage analysis caches: the cost for passages never seen before."""
    grounding_check._analysed.cache_clear()
    grounding_check.passage_words.cache_clear()
    if hasattr(grounding_check, "table"):  # (the tables' rows: a tree before them has none)
        grounding_check.table.cache_clear()
    answer_topic._numbers.cache_clear()
    for name in ("_measured_sentences", "_passage_share", "_passage_days"):  # (newer trees)
        cached = getattr(grounding_check, name, None)
        if cached is not None:
            cached.cache_clear()


def _answers(question: str, citations: tuple) -> list[str]:  # type: ignore[type-arg]
    out = []
    extract = extractive_answer(question, citations)
    if extract is not None:
        out.append(extract.text)
    first = " ".join(split_sentences(citations[0].text)[:2])
    out.append(f"{first} [1]")
    out.append(re.sub(r"\d+", lambda m: str(int(m.group()) + 7), first, count=1) + " [1]")
    return out


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "mean_ms": round(statistics.fmean(ordered), 3),
        "p50_ms": round(ordered[len(ordered) // 2], 3),
        "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3),
        "max_ms": round(ordered[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    app = App.from_settings(args.workspace)
    kb = app.open_knowledge()
    agent = app.knowledge_agent(kb)
    runs = []
    for case in load_answer_cases(sample_answer_cases()):
        result = agent.run_sync(case.question)
        if result.citations:
            runs.extend(
                (a, result.citations, case.question)
                for a in _answers(case.question, result.citations)
            )
    check_grounding("warm up the segmenter", runs[0][1])
    cold: list[float] = []
    warm: list[float] = []
    extract_cold: list[float] = []
    extract_warm: list[float] = []
    whole_cold: list[float] = []
    whole_warm: list[float] = []
    check = app.answer_check(None) or AnswerCheck(scaffolds=AGENT_SCAFFOLDS)
    questions = {question: citations for _, citations, question in runs}
    for _ in range(args.rounds):
        for answer, citations, question in runs:
            _forget()
            started = time.perf_counter()
            check_grounding(answer, citations, question=question)
            cold.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            check_grounding(answer, citations, question=question)
            warm.append((time.perf_counter() - started) * 1000)
            result = RunResult(
                output=answer,
                messages=(Message.user(question), Message.assistant(answer)),
                citations=citations,
            )
            _forget()
            started = time.perf_counter()
            check.apply(result, question)
            whole_cold.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            check.apply(result, question)
            whole_warm.append((time.perf_counter() - started) * 1000)
        # the extractive answer (what a replaced answer costs): passages new, then seen before
        for question, citations in questions.items():
            _forget()
            started = time.perf_counter()
            extractive_answer(question, citations)
            extract_cold.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            extractive_answer(question, citations)
            extract_warm.append((time.perf_counter() - started) * 1000)
    kb.close()
    print(
        json.dumps(
            {
                "answers": len(runs),
                "rounds": args.rounds,
                "cold": _summary(cold),
                "warm": _summary(warm),
                "whole_cold": _summary(whole_cold),
                "whole_warm": _summary(whole_warm),
                "extractive_cold": _summary(extract_cold),
                "extractive_warm": _summary(extract_warm),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
