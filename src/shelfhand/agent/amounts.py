"""Questions that ask for an amount, and text that states one: a duration ("how long",
"多久"), a sum of money ("how much", "price", "fee", "价格", "翻新费") or a count ("how many",
"几个", "多少种"); and, for a question asking how long until something is done, that doing
(恢复 of "P0 事故多久要恢复？") and the times a sentence gives for it ("1 小时内恢复"). Shared by the
extractive answer (:mod:`.extractive`: quote the sentence that states it) and the answer
check (:mod:`.answer_topic`: an answer without one does not answer; :mod:`.grounding_check`:
a duration that is not the time of the doing asked about is said of another thing)."""

from __future__ import annotations

import functools
import re
import unicodedata

from shelfhand.knowledge.analysis import chinese_only, tokenize_for_matching

__all__ = [
    "COUNT",
    "DURATION",
    "MONEY",
    "NUMBER_WORD",
    "asked_amount",
    "timed",
    "timed_numbers",
    "timed_verb",
    "times",
]

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
_MODAL = "(?:要|须|需|需要|必须|应|应该|应当|得|能|才能|可以|会|就|内|之内|以内|完成)*"
_ASKS_TIME = re.compile(
    r"多久|多长时间|多长|几(?:天|周|个月|小时|分钟|个工作日)|多少(?:天|小时|分钟|个工作日)"
)
_DOING_AFTER = re.compile(_MODAL + r"([\u3400-\u9fff]+)")
_DOING_BEFORE = re.compile(r"([\u3400-\u9fff]+?)" + _MODAL + r"(?:是|为|有)?\s*$")
_BETWEEN = r"[^，。；;,.!?！？\n]{0,20}?"
"""What may stand between a time and the doing it is the time of, in the same clause: a manner
("30 分钟内首次响应"), a doing it comes with ("7 个工作日内完成检测和维修"), the asking for it
("30 天内可申请无理由退货"); not the next clause's ("须在 30 分钟内首次响应，4 小时内给出解决方案":
4 小时 is not the time of 响应)."""
_WITHIN = r"\s*(?:个\s*)?(?:分钟|小时|天|日|工作日|周|星期|月|年)\s*(?:内|之内|以内)\s*" + _MODAL
"""After a number: its unit of time, "within", and what may stand before the doing ("3 个工作日
内须")."""
_TIME_THEN = (
    r"(?:(?<![\d.])\d{1,40}(?:\.\d{1,6})?|[一二两三四五六七八九十半]{1,3})" + _WITHIN + _BETWEEN
)
"""An amount of time something is done within, and what may stand between it and the doing:
"1 小时内", "3 个工作日内须", "7 个工作日内完成检测和", "30 分钟内首次"."""
_TIMED_NUMBER = r"(?<![\d.])(?<!\d,)(\d[\d,]{0,39}(?:\.\d{1,6})?)" + _WITHIN
_TIMED = re.compile(_TIMED_NUMBER + r"([\u3400-\u9fff]+)")
""":data:`_TIME_THEN` in digits, with the number and the words after it. Like every amount
here, tried from a number's first digit only and over at most 40 of its characters."""


_DOING_CHARS = 16
"""How many characters beside the asking word are cut to find the doing (a word of a few):
a question the service accepts (32,000 characters, one run) took 90 ms to cut whole."""


def timed_verb(question: str) -> str | None:
    """The word a question asking how long until something is done names the doing of: 恢复
    of "P0 事故多久要恢复？", 付款 of "发票收到后几天内付款？", 维修 of "保修维修需要多长时间？"
    (the doing before the asking when none comes after it); ``None`` for any other question."""
    asked = _ASKS_TIME.search(question)
    if asked is None:
        return None
    after = _DOING_AFTER.match(question, asked.end())
    if after is not None:
        tokens = tokenize_for_matching(after.group(1)[:_DOING_CHARS])
        doing = tokens[0] if tokens else ""
    else:
        before = _DOING_BEFORE.search(question, 0, asked.start())
        run = before.group(1)[-_DOING_CHARS:] if before is not None else ""
        tokens = tokenize_for_matching(run) if run else []
        doing = tokens[-1] if tokens else ""
    return doing if doing and chinese_only(doing) else None


def timed(sentence: str, number: str) -> str | None:
    """The word ``sentence`` gives ``number`` (as :func:`~.grounding_check.measured` writes it)
    as the time within which it is done: 恢复 for "1" in "须在 1 小时内恢复。"; ``None`` when
    it gives no doing that time."""
    for found in _TIMED.finditer(unicodedata.normalize("NFKC", sentence)):
        if found.group(1).replace(",", "") == number:
            first = tokenize_for_matching(found.group(2))
            return first[0] if first and chinese_only(first[0]) else None
    return None


def timed_numbers(sentence: str, verb: str) -> list[str]:
    """The numbers (in digits, without their commas) ``sentence`` gives as the time within
    which ``verb`` is done: ``["1"]`` of "须在 5 分钟内响应，1 小时内恢复。" for 恢复."""
    if verb not in sentence:
        return []
    text = unicodedata.normalize("NFKC", sentence)
    return [m.group(1).replace(",", "") for m in _timing(verb).finditer(text)]


@functools.lru_cache(maxsize=256)
def _timing(verb: str) -> re.Pattern[str]:
    return re.compile(_TIMED_NUMBER + _BETWEEN + re.escape(verb))


def times(sentence: str, verb: str) -> bool:
    """Whether ``sentence`` gives the time within which ``verb`` is done ("须在 5 分钟内响应，1
    小时内恢复。" for 恢复), not a time after it ("须在恢复后 3 个工作日内提交复盘报告。")."""
    return verb in sentence and _time_then(verb).search(sentence) is not None


@functools.lru_cache(maxsize=256)
def _time_then(verb: str) -> re.Pattern[str]:
    return re.compile(_TIME_THEN + re.escape(verb))


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
