"""Dates read whole for the grounding check (:mod:`shelfhand.agent.dates`): an answer's date is
read strictly, its evidence's leniently, both as the day of the year (``--MM-DD``)."""

from __future__ import annotations

import pytest

from shelfhand.agent.dates import held_dates, stated_dates
from shelfhand.agent.grounding_check import check_grounding
from shelfhand.core.messages import Citation


@pytest.mark.parametrize(
    "text",
    [
        "2025-03-12",
        "2025/3/12",
        "2025.03.12",
        "2025-03-12T08:00:00+08:00",
        "2025 年 3 月 12 日",
        "3月12日",
        "3 月 12 号",
        "March 12, 2025",
        "Mar. 12th",
        "12 March 2025",
        "the 12th of March",
        "２０２５－０３－１２",  # full-width
    ],
)
def test_each_way_of_writing_the_12th_of_march_is_read_as_it(text: str) -> None:
    assert stated_dates(text) == {"--03-12"}
    assert held_dates(text) == {"--03-12"}


@pytest.mark.parametrize(
    "text",
    [
        "March 2025",  # a month, no day
        "SKU2025-03-12",  # inside an identifier
        "version 1.2.3",
        "2025-13-40",  # no such day
        "we may 12 times",  # a verb, not the month
        "3.5 months",
    ],
)
def test_what_is_not_a_day_of_the_year(text: str) -> None:
    assert stated_dates(text) == set() and held_dates(text) == set()


def test_a_date_that_may_put_the_day_or_the_month_first_is_held_both_ways_never_stated() -> None:
    assert stated_dates("03/12/2025") == set()
    assert held_dates("03/12/2025") == {"--03-12", "--12-03"}
    assert held_dates("25.12.2025") == {"--12-25"}  # no 25th month


def test_a_passage_holding_the_date_another_way_supports_it() -> None:
    passage = Citation(
        index=1, source="p.md", text="自 2025 年 1 月 1 日起，整机保修期为 24 个月。"
    )
    held = check_grounding("From January 1, 2025 the warranty is 24 months [1].", [passage])
    moved = check_grounding("From 2025-01-02 the warranty is 24 months [1].", [passage])
    assert held.grounded
    assert not moved.grounded and "--01-02" in moved.sentences[0].missing


def test_an_ordinal_is_a_number_not_a_code() -> None:
    passage = Citation(index=1, source="p.md", text="Orders placed by the 20th ship on the 21st.")
    assert check_grounding("Orders placed by the 20th ship on the 21st [1].", [passage]).grounded
