"""An answer that points at the passages where it should say what they give: "What is the
security hotline?" answered "The security hotline is located at [1][2]." (Qwen2.5-Coder-0.5B,
an incident-reporting guide found). It names no extension, and it was kept; it is now an
empty answer, replaced by the passages' own sentences."""

from __future__ import annotations

import pytest

from shelfhand.agent.answer_check import AnswerCheck
from shelfhand.core.citations import points_only
from shelfhand.core.messages import Citation, Message
from shelfhand.core.results import RunResult

PHISHING = Citation(
    index=1,
    source="security.md",
    title="Security incident reporting",
    section="Security incident reporting > Phishing",
    text="Forward a suspicious email as an attachment to phishing@example.com. If you already "
    "entered your password on a suspicious page, change it at once and call the security "
    "hotline at extension 8110.",
)
HOTLINE = "What is the security hotline?"


@pytest.mark.parametrize(
    "answer",
    [
        "The security hotline is located at [1][2].",
        "The answer is in [1, 2]",
        "保修期是 [1]。",
        "热线电话在【1】",
    ],
)
def test_markers_where_the_answer_should_be(answer: str) -> None:
    assert points_only(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "The security hotline is extension 8110 [1].",
        "The hotline is 8110. Details are in [1].",  # said, then pointed for more
        "Rooms are booked in the calendar app [1].",
        "See [1].",
        "The security hotline is located at extension 8110.",  # no marker
        "[1][2]",  # marks only: another check's
    ],
)
def test_an_answer_that_says_it(answer: str) -> None:
    assert not points_only(answer)


def _checked(answer: str) -> RunResult:
    result = RunResult(
        output=answer,
        messages=(Message.user(HOTLINE), Message.assistant(answer)),
        citations=(PHISHING,),
    )
    return AnswerCheck().apply(result, HOTLINE)


def test_the_check_replaces_it_by_the_sentence_that_says_it() -> None:
    checked = _checked("The security hotline is located at [1][2].")
    assert checked.fallback_reason == "empty" and checked.extractive
    assert "extension 8110" in checked.output
    kept = _checked("The security hotline is extension 8110 [1].")
    assert (
        kept.fallback_reason == "" and kept.output == "The security hotline is extension 8110 [1]."
    )
