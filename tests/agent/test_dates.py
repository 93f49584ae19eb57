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


RELEASE = Citation(
    index=1,
    source="ops/release.md",
    text="常规发布窗口为周二和周四的 14:00 至 17:00。周五、节假日前一天和节假日期间禁止发布。",
)


@pytest.mark.parametrize(
    ("text", "days"),
    [
        ("周二和周四发布", {"Tuesday", "Thursday"}),
        ("星期二、礼拜四", {"Tuesday", "Thursday"}),
        ("每周一上午 10 点交接班", {"Monday"}),
        ("We release on Tuesdays and Thursday.", {"Tuesday", "Thursday"}),
        ("周日休息，周天也可以", {"Sunday"}),
        ("每周一次例会", set()),  # once a week: no day named
        ("每周五天工作制，一周二十小时", set()),  # five days, twenty hours a week
        ("周末和工作日", set()),  # spans, not days an answer states
    ],
)
def test_the_days_of_the_week_a_text_names(text: str, days: set[str]) -> None:
    assert {d for d in stated_dates(text) if not d.startswith("--")} == days


def test_the_days_a_passage_spans_are_held() -> None:
    workdays = {"Monday", "Tuesday", "Wednesday", "Thursday", "Friday"}
    assert held_dates("营业时间：周一至周五 9:00-18:00") >= workdays
    assert held_dates("Open Monday through Friday.") >= workdays
    assert held_dates("工作日加班按 1.5 倍工资计算") >= workdays
    assert {"Saturday", "Sunday"} <= held_dates("Weekend access requires a badge request.")
    assert held_dates("周五至周一封网") == frozenset({"Friday", "Saturday", "Sunday", "Monday"})
    assert "Wednesday" not in held_dates("周二和周四发布")


def test_a_day_of_the_week_no_passage_holds_is_missing() -> None:
    """Qwen2.5-Coder-0.5B over the release rule (ops handbook): "周一和周四" where it says
    "周二和周四"; every number of the sentence held, so it was kept."""
    wrong = "发布窗口是一个常规的发布窗口，周一和周四的 14:00 至 17:00。"
    (sentence,) = check_grounding(wrong, [RELEASE]).sentences
    assert not sentence.supported and sentence.missing == ("Monday",)
    right = "常规发布窗口为周二和周四的 14:00 至 17:00 [1]。"
    assert check_grounding(right, [RELEASE]).sentences[0].supported
    # a day the question names is the user's own ("周一能发布吗？" "周一不能发布。")
    asked = check_grounding(
        "周一不在发布窗口内，发布窗口为周二和周四。", [RELEASE], question="周一能发布吗？"
    )
    assert asked.sentences[0].missing == ()
    office = Citation(index=1, source="office.md", text="前台工作时间为周一至周五 9:00-18:00。")
    assert check_grounding("周三前台 9:00 上班 [1]。", [office]).sentences[0].missing == ()
