"""Questions that ask for an amount, and text that states one: a duration ("how long",
"多久"), a sum of money ("how much", "price", "fee", "价格", "翻新费") or a count ("how many",
"几个", "多少种"). Shared by the
extractive answer (:mod:`.extractive`: quote the sentence that states it) and the answer
check (:mod:`.answer_topic`: an answer without one does not answer)."""

from __future__ import annotations

import re

__all__ = ["COUNT", "DURATION", "MONEY", "NUMBER_WORD", "asked_amount"]

_NUM = r"(?<!\d)(?<!\d[,.])\d[\d,.]{0,39}(?:\s*(?:-|–|~|至|到|to)\s*\d[\d,.]{0,39})?\s*"
# Tried from a number's first digit only, over at most 40 of its characters: from each of
# its digits and unbounded, a long run (a CSV row, a JSON array of numbers in a tool's
# result) was quadratic, half a second for 2 KB; no amount is 40 characters long.
DURATION = re.compile(
    _NUM
    + r"(?:(?:business |working |calendar )?(?:minutes?|mins?|hours?|days?|weeks?|months?|years?)"
    + r"|(?:h|hrs?)\b|分钟|小时|天|周|个月|个工作日|工作日|年)",
    re.IGNORECASE,
)
"""A number of minutes, hours, days, weeks, months or years (``30 minutes``, ``3–5 business
days``, ``3 至 5 个工作日``, a spec table's ``20,000 h``)."""
MONEY = re.compile(_NUM + r"(?:CNY|RMB|USD|EUR|元|%|％)|[¥$€]\s*\d", re.IGNORECASE)
"""A sum or a rate (``499 CNY``, ``10%``, ``¥3999``)."""
NUMBER_WORD = re.compile(
    r"\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
    r"thirty|forty|fifty|sixty|ninety|hundred|thousand|half|a (?:year|month|week|day))\b"
    r"|[一二两三四五六七八九十百千万半]",
    re.IGNORECASE,
)
"""An amount written in words ("two years", "两年", "半个月")."""
_MEASURE_WORD = "个种类属名位只条家座部次项所台件款支间门本张人"
_NUMERAL = "一二两三四五六七八九十百千万几"
_NUMERAL_RUN = f"[{_NUMERAL}]{{1,20}}"
# (tried from a number's first digit or numeral only, and bounded: see _NUM)
COUNT = re.compile(
    rf"(?<![\d.,])\d{{1,3}}(?![\d.,:/-])(?!\s*年)|(?<!\d)\d{{1,40}}\s*[{_MEASURE_WORD}]"
    rf"|(?<![{_NUMERAL}]){_NUMERAL_RUN}\s*[{_MEASURE_WORD}]"
    r"|\b(?:one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|dozens?"
    r"|hundreds?|thousands?|several|a few)\b",
    re.IGNORECASE,
)
"""A count: a number of at most three digits that is not a year's (``4``, not ``2001`` or
``2001 年``), a number and a measure word (``四个属``, ``12 座``), or one in words."""
_ASKS_COUNT = re.compile(
    rf"how many|(?<!哪)几\s*[{_MEASURE_WORD}]|多少\s*[{_MEASURE_WORD}]", re.IGNORECASE
)
""""哪几个站点" asks which stations, not how many."""
_ASKS_DURATION = re.compile(
    r"how (?:long|soon)|how many (?:minutes|hours|days|weeks|months|years)"
    r"|多久|多长|几(?:天|周|个月|年|小时|分钟)|多少(?:天|小时|分钟)",
    re.IGNORECASE,
)
_ASKS_MONEY = re.compile(
    r"how much|\bprices?\b|\bcosts?\b|\bfees?\b|多少钱|价格|费用|价钱|售价|\w费", re.IGNORECASE
)


def asked_amount(question: str) -> re.Pattern[str] | None:
    """:data:`DURATION` when ``question`` asks how long, :data:`MONEY` when it asks how much
    or about a price or fee, :data:`COUNT` when it asks how many ("鬣齿兽科中有几个属生存到中新世？");
    ``None`` when it asks for none of these."""
    if _ASKS_DURATION.search(question):
        return DURATION
    if _ASKS_MONEY.search(question):
        return MONEY
    if _ASKS_COUNT.search(question):
        return COUNT
    return None
