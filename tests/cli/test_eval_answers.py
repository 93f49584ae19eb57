"""``shelfhand eval-answers``: the answer benchmark's cases, judgements and command."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from shelfhand.agent.fallbacks import NOT_COVERED
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.results import RunResult, Usage
from shelfhand.evals.answers import (
    AnswerCase,
    AnswerOutcome,
    judge,
    load_answer_cases,
    sample_answer_cases,
)
from shelfhand.knowledge.base import sample_corpus
from support.cli import run_cli


def test_the_bundled_cases_are_forty_or_more_in_both_languages_with_not_found_ones() -> None:
    cases = load_answer_cases(sample_answer_cases())

    assert len(cases) >= 40
    assert {c.lang for c in cases} == {"en", "zh"}
    assert sum(c.not_found for c in cases) >= 4
    assert all(c.facts for c in cases if not c.not_found)


def test_a_case_without_facts_or_not_found_is_refused_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "cases.jsonl"
    bad.write_text('{"question": "E-203?", "facts": ["过热"]}\n{"question": "x"}\n', "utf-8")

    with pytest.raises(ConfigurationError, match="line 2"):
        load_answer_cases(bad)


def outcome(case: AnswerCase, result: RunResult) -> AnswerOutcome:
    out = AnswerOutcome(id=case.id, question=case.question, not_found_case=case.not_found)
    judge(case, result, out)
    return out


def test_facts_match_alternatives_and_ignore_thousands_separators() -> None:
    case = AnswerCase(id="p", question="price?", facts=("3,999|3999", "Lumen X1"))

    assert outcome(case, RunResult(output="Lumen X1 costs 3999 CNY.", messages=())).right
    missing = outcome(case, RunResult(output="It costs 4,599 CNY.", messages=()))
    assert not missing.right and missing.missing_facts == ["3,999|3999", "Lumen X1"]


@pytest.mark.parametrize(
    ("answer", "stated"),
    [
        ("库存还有 12 台。", True),
        ("共12台", True),
        ("SKU2024-012 | Lumen X1 Pro | 3,600", False),  # the end of a code is no stock count
        ("保修 112 个月", False),
        ("1.2x optical zoom", False),
        ("12.5 kg", False),
        ("E-12 故障", True),
    ],
)
def test_a_number_fact_is_stated_on_its_own_not_inside_another_number_or_code(
    answer: str, stated: bool
) -> None:
    case = AnswerCase(id="stock", question="还剩多少台？", facts=("12",))
    assert outcome(case, RunResult(output=answer, messages=())).right is stated


def test_a_not_found_case_is_right_only_when_the_answer_says_so() -> None:
    case = AnswerCase(id="w", question="Weather?", not_found=True)

    assert outcome(case, RunResult(output=NOT_COVERED, messages=())).right
    assert not outcome(case, RunResult(output="It is sunny.", messages=())).right
    quoted = RunResult(output="From the documents:\n- x [1]", messages=(), extractive=True)
    assert not outcome(case, quoted).right


def test_facts_stated_with_nothing_searched_are_unflagged() -> None:
    # a guess in `tool` mode: no search, no passage, a number from nowhere
    case = AnswerCase(id="w", question="How long is the warranty?", facts=("24",))
    guess = RunResult(output="The warranty is 10 years.", messages=())
    assert outcome(case, guess).unflagged
    assert outcome(case, RunResult(output="See [1].", messages=())).unflagged
    searched = RunResult(output="The warranty is 10 years.", messages=(), usage=Usage(retrievals=1))
    assert not outcome(case, searched).unflagged  # searched: the check's to flag
    assert not outcome(case, RunResult(output="Hello! How can I help?", messages=())).unflagged
    assert not outcome(case, RunResult(output=NOT_COVERED, messages=())).unflagged


def test_eval_answers_without_a_model_reports_the_extractive_path(tmp_path: Path) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(list(args), tmp_path)

    assert cli("ingest", str(sample_corpus())).returncode == 0
    out = cli("eval-answers", "--no-model", "--json", "--only", "e203-zh,weather-en")

    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["cases"] == 2 and report["model"] is None
    assert report["right"] == 1.0 and report["not_found_right"] == 1.0
    assert report["unflagged"] == 0 and report["extractive"] == 0.5


def test_a_case_file_that_is_not_utf8_or_a_pipe_is_refused_with_the_reason(
    tmp_path: Path,
) -> None:
    # GBK text: it ended in a UnicodeDecodeError traceback; a pipe: the command waited forever
    gbk = tmp_path / "cases.jsonl"
    gbk.write_bytes('{"id": "a", "question": "保修多久？", "facts": ["24"]}\n'.encode("gbk"))
    with pytest.raises(ConfigurationError, match=r"is not UTF-8 .*save it as UTF-8"):
        load_answer_cases(gbk)
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    with pytest.raises(ConfigurationError, match="not a regular file"):
        load_answer_cases(pipe)
