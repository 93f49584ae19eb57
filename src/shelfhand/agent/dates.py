"""Dates and days of the week read whole, for the grounding check: "arrives on 2025-03-12"
is held only by a text that states the 12th of March, not by a 3 and a 12 found apart (an
order's ``2025-03-09`` beside a quantity of 12), which is all the check's numbers can tell.

A date is compared by its month and day, written ``--MM-DD`` (ISO 8601's form for a date
without a year): its year is a number the check already looks for. What an answer states
(:func:`stated_dates`) is read strictly: ``2025-03-12``, ``2025/3/12``, ``2025 年 3 月 12 日``,
``3月12日``, ``March 12, 2025``, ``12 March``; ``03/12/2025`` could be either day and is not
read as a date. What evidence holds (:func:`held_dates`) is read leniently: such a date gives
both of its readings.
"""

from __future__ import annotations

import itertools
import re
import unicodedata

from shelfhand.knowledge.analysis import MONTH_NUMBERS

__all__ = ["held_dates", "stated_dates"]

_MONTH = (
    "(?:" + "|".join(sorted((m.capitalize() for m in MONTH_NUMBERS), key=len, reverse=True)) + ")"
)
_ORDINAL = r"(?:st|nd|rd|th)?"

# year first: 2025-03-12, 2025/3/12, 2025.3.12 (and an ISO timestamp's start)
_YEAR_FIRST = re.compile(r"(?<![\w.])\d{4}([-/.])(\d{1,2})\1(\d{1,2})(?!\d)")
# 2025 年 3 月 12 日, 3月12日, 3 月 12 号
_CHINESE = re.compile(r"(?<!\d)(\d{1,2})\s*月\s*(\d{1,2})\s*[日号]")
# March 12, 2025; Mar. 12th; 12 March 2025; the 12th of March
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}}){_ORDINAL}(?![\d:])")
_DAY_MONTH = re.compile(rf"(?<![\d.,])\b(\d{{1,2}}){_ORDINAL}\s+(?:of\s+)?({_MONTH})\b")
# 03/12/2025, 12.03.2025: the 3rd of December or the 12th of March
_EITHER = re.compile(r"(?<![\w.])(\d{1,2})([/.])(\d{1,2})\2\d{4}(?!\d)")


def _day(month: int, day: int) -> str | None:
    return f"--{month:02d}-{day:02d}" if 1 <= month <= 12 and 1 <= day <= 31 else None


_FULL_WIDTH = re.compile("[\uff10-\uff19]")  # full-width digits
_MONTH_STARTS = tuple(m.capitalize() for m in MONTH_NUMBERS if len(m) == 3)


def _normal(text: str) -> str:
    """``text`` with full-width digits (and the dashes and slashes between them) as ASCII
    (``２０２５－０３－１２`` → ``2025-03-12``)."""
    return unicodedata.normalize("NFKC", text) if _FULL_WIDTH.search(text) else text


def _read(text: str) -> set[str]:
    text = _normal(text)
    found = {_day(int(m[2]), int(m[3])) for m in _YEAR_FIRST.finditer(text)}
    # the other forms are looked for only where they may be (most sentences hold none)
    if "月" in text:
        found.update(_day(int(m[1]), int(m[2])) for m in _CHINESE.finditer(text))
    if any(month in text for month in _MONTH_STARTS):
        found.update(
            _day(MONTH_NUMBERS[m[1].lower()], int(m[2])) for m in _MONTH_DAY.finditer(text)
        )
        found.update(
            _day(MONTH_NUMBERS[m[2].lower()], int(m[1])) for m in _DAY_MONTH.finditer(text)
        )
    return {d for d in found if d}


def stated_dates(text: str) -> set[str]:
    """The days of the year ``text`` states unambiguously, as ``--MM-DD``, and the days of
    the week it names (``Tuesday`` for 周二, 星期二 or Tuesday)."""
    found = _read(text) if any(c.isdigit() for c in text) else set()
    if _MAY_NAME_WEEKDAY.search(text):
        found.update(_WEEKDAY_NAMES[n] for _, _, n in _weekdays(text))
    return found


def held_dates(text: str) -> frozenset[str]:
    """The days of the year ``text`` may state, as ``--MM-DD``: :func:`stated_dates` and both
    readings of a date that puts the day or the month first (``03/12/2025``); and the days
    of the week it names or spans: 周一至周五 holds Wednesday, and so do 工作日 and
    weekdays; 周末 and weekends hold Saturday and Sunday, 每天 and every day all seven."""
    found: set[str] = set()
    if any(c.isdigit() for c in text):
        found = _read(text)
        for m in _EITHER.finditer(_normal(text)):
            first, second = int(m[1]), int(m[3])
            found.update(d for d in (_day(first, second), _day(second, first)) if d)
    if _MAY_NAME_WEEKDAY.search(text):
        found.update(_WEEKDAY_NAMES[n] for n in _weekdays_held(text))
    return frozenset(found)


_WEEKDAY_NAMES = ("", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
_ZH_WEEKDAY = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "日": 7, "天": 7}
_WEEKDAY = re.compile(
    r"(?:周|星期|礼拜)([一二三四五六日天])(?![次遍回趟个天十百千万])"
    r"|\b(monday|tuesday|wednesday|thursday|friday|saturday|sunday)s?\b",
    re.IGNORECASE,
)
"""A day of the week named: 周二, 星期二, 礼拜二, Tuesday (not 每周一次, 每周五天 or 一周二十小时:
"once a week", "five days a week", "twenty hours a week")."""
_MAY_NAME_WEEKDAY = re.compile(r"[周期拜日天]|day|week", re.IGNORECASE)
"""What a text naming or spanning a day of the week must hold: an English sentence without
"day" or "week" is spared the regexes below (a Chinese one holding 日 or 天 is not)."""
_RANGE = re.compile(r"\s*(?:至|到|-|–|—|~|～|to|through|thru|until)\s*", re.IGNORECASE)
_SPANS = (
    (re.compile(r"工作日|\bweekdays?\b|\bbusiness days?\b", re.IGNORECASE), range(1, 6)),
    (re.compile(r"周末|双休日|\bweekends?\b", re.IGNORECASE), range(6, 8)),
    (re.compile(r"每天|每日|\bdaily\b|\bevery day\b|7\s*[×x*]\s*24", re.IGNORECASE), range(1, 8)),
)
"""Words spanning days of the week, and the days (1 Monday … 7 Sunday)."""


def _weekdays(text: str) -> list[tuple[int, int, int]]:
    """The days of the week ``text`` names, as (start, end, day: 1 Monday … 7 Sunday)."""
    return [
        (m.start(), m.end(), _ZH_WEEKDAY[m[1]] if m[1] else _WEEKDAY_NAMES.index(m[2].capitalize()))
        for m in _WEEKDAY.finditer(text)
    ]


def _weekdays_held(text: str) -> set[int]:
    """The days of the week ``text`` names, those a range of two spans (周一至周五, Monday to
    Friday: Monday … Friday), and those a word spans (:data:`_SPANS`)."""
    named = _weekdays(text)
    held = {n for _, _, n in named}
    for (_, end, first), (start, _, last) in itertools.pairwise(named):
        if _RANGE.fullmatch(text, end, start):
            held.update((first - 1 + i) % 7 + 1 for i in range((last - first) % 7 + 1))
    for pattern, days in _SPANS:
        if pattern.search(text):
            held.update(days)
    return held
