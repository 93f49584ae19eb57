"""Passages that disagree: found and flagged, never silently resolved (issue 13, point 6).

Two passages of one evidence block conflict when all of these hold:

- they come from different sources (differences inside one document, or between the records
  of one file, are almost always different cases — unopened vs opened, model X1 vs X1 Pro —
  not contradictions);
- they are on the same subject: the same section heading, the same title once a version
  marker is taken off ("保修政策（第 1 版）" and "保修政策（第 2 版）"), or many shared terms;
- a sentence of one and its best match in the other say the same thing (at least
  :data:`SENTENCE_SIMILARITY` of their terms shared, numbers left out, no differing
  identifiers or names such as ``E-203`` / ``E-105``, ``X1`` / ``X2`` or ``X1`` / ``X1 Pro``)
  with a different quantity of the same kind: a duration (``12 个月`` vs ``24 个月``,
  ``2 years`` vs ``3 years``; years are compared as months, weeks as days), a price, a
  percentage, a measure, or a date.

Precision matters more than recall: the same number in unrelated sentences (``E-203`` and
``30 分钟``) is never compared, and sentences that agree raise nothing.

When the two documents are versions of one another, the note says which is newer: by the
effective date found in any passage of that document ("本版本自 2025 年 1 月 1 日起生效",
"effective 2025-01-01"), else by the version in the title or file name ("第 2 版", "v2").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import MONTH_NUMBERS, MONTH_PATTERN, split_version

__all__ = [
    "DISAGREE_ZH",
    "SENTENCE_SIMILARITY",
    "Conflict",
    "DocVersion",
    "Quantity",
    "annotate_conflicts",
    "cache_clear",
    "doc_version",
    "find_conflicts",
    "newer_without_date",
    "quantities",
]

SENTENCE_SIMILARITY = 0.5
"""Share of terms (Jaccard, numbers left out) two sentences need to count as one statement."""
PASSAGE_SIMILARITY = 0.3
"""Share of terms two passages without a common heading or title need for one subject."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Quantity:
    """A number with a unit as written (``24 个月``) and comparable (``("month", 24.0)``)."""

    text: str
    kind: str
    value: float | str
    start: int
    end: int


@dataclass(frozen=True, slots=True, kw_only=True)
class DocVersion:
    """What the evidence says about which edition of a document a passage is from."""

    base_title: str
    version: tuple[int, ...] | None = None
    effective: str | None = None
    """ISO date (``2025-01-01``)."""

    def describe(self, *, chinese: bool = False) -> str:
        """``version 2, effective 2025-01-01`` (``第 2 版，2025-01-01 生效``)."""
        parts = []
        if self.version is not None:
            number = ".".join(str(n) for n in self.version)
            parts.append(f"第 {number} 版" if chinese else f"version {number}")
        if self.effective:
            parts.append(f"{self.effective} 生效" if chinese else f"effective {self.effective}")
        return ("，" if chinese else ", ").join(parts)


@dataclass(frozen=True, slots=True, kw_only=True)
class Conflict:
    """Passages ``a`` and ``b`` (citation numbers) state different values for one thing."""

    a: int
    b: int
    values: tuple[tuple[str, str], ...]
    """Each disagreement as written: ``("12 个月", "24 个月")`` (``a``'s first)."""
    newer: int | None = None
    """The number of the passage from the newer document, when that is known."""
    newer_version: DocVersion | None = None
    """What the evidence says of the newer document's edition."""

    @property
    def newer_info(self) -> str:
        """:attr:`newer_version` described: ``version 2, effective 2025-01-01``."""
        return self.newer_version.describe() if self.newer_version is not None else ""

    @property
    def note(self) -> str:
        """``[2] and [4] disagree: 12 个月 vs 24 个月; [4] is newer (version 2, effective
        2025-01-01).``"""
        return self.note_in(chinese=False)

    def note_in(self, *, chinese: bool) -> str:
        """:attr:`note`, or for a question asked in Chinese ``[2] 与 [4] 不一致：12 个月 vs 24
        个月；[4] 较新（第 2 版，2025-01-01 生效）。``"""
        said = ("；" if chinese else "; ").join(f"{x} vs {y}" for x, y in self.values)
        if chinese:
            text = f"[{self.a}] 与 [{self.b}] {DISAGREE_ZH}：{said}"
        else:
            text = f"[{self.a}] and [{self.b}] disagree: {said}"
        if self.newer is not None:
            info = self.newer_version.describe(chinese=chinese) if self.newer_version else ""
            if chinese:
                text += f"；[{self.newer}] 较新" + (f"（{info}）" if info else "")
            else:
                text += f"; [{self.newer}] is newer" + (f" ({info})" if info else "")
        return text + ("。" if chinese else ".")


DISAGREE_ZH = "不一致"
"""What a Chinese :meth:`Conflict.note_in` says of two passages (how its lines are told apart)."""


def newer_without_date(note: str) -> bool:
    """Whether a conflict note names the newer passage but not when it took effect (the
    caller may look the date up in the document's other passages)."""
    if DISAGREE_ZH in note:
        return "较新" in note and "生效" not in note
    return "newer" in note and "effective" not in note


# --- quantities ---------------------------------------------------------------------------

_NUM_START = r"(?<![A-Za-z0-9_\-./:])"
_DATE_RES = (
    re.compile(_NUM_START + r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(?:(\d{1,2})\s*[日号])?"),
    re.compile(_NUM_START + r"(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?![\d])"),
    re.compile(rf"(?i)\b({MONTH_PATTERN})\.?\s+(\d{{1,2}}),?\s+(\d{{4}})\b"),
    re.compile(rf"(?i)\b(\d{{1,2}})\s+({MONTH_PATTERN})\.?,?\s+(\d{{4}})\b"),
)
_WORD_NUMBERS = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "sixty": 60, "ninety": 90,
}  # fmt: skip
_ZH_DIGITS = {"零": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
              "八": 8, "九": 9}  # fmt: skip
# unit as written → (kind, factor to the kind's base unit)
_UNITS: tuple[tuple[str, str, float], ...] = (
    (r"个工作日|工作日|business days?|working days?", "workday", 1),
    (r"个月|個月|months?", "month", 1),
    (r"年|years?", "month", 12),
    (r"周|星期|weeks?", "day", 7),
    (r"天|日|days?", "day", 1),
    (r"小时|小時|hours?|hrs?", "minute", 60),
    (r"分钟|分鐘|minutes?|mins?", "minute", 1),
    (r"秒|seconds?|secs?", "second", 1),
    (r"%|％|percent|per cent", "percent", 1),
    (r"元|块|人民币|CNY|RMB|yuan", "money:cny", 1),
    (r"USD|US dollars?|dollars?", "money:usd", 1),
    (r"EUR|euros?", "money:eur", 1),
    (r"ANSI lm|ANSI lumens|lumens|lm|流明", "lumen", 1),
    (r"毫米|mm", "length", 0.001),
    (r"厘米|cm", "length", 0.01),
    (r"米|m", "length", 1),
    (r"千克|公斤|kg", "mass", 1),
    (r"克|g", "mass", 0.001),
    (r"°C|℃|摄氏度", "celsius", 1),
    (r"dB|分贝", "db", 1),
    (r"W|瓦", "watt", 1),
    (r"V|伏", "volt", 1),
    (r"Hz|赫兹", "hz", 1),
    (r"英寸|inch(?:es)?|in\.", "inch", 1),
    (r"GB", "gb", 1),
    (r"mAh", "mah", 1),
)
_UNIT_KIND = [
    (re.compile(f"(?:{pattern})$", re.IGNORECASE), kind, f) for pattern, kind, f in _UNITS
]
_UNIT_ALT = "|".join(pattern for pattern, _, _ in _UNITS)
_NUMBER = (
    r"(\d+(?:,\d{3})*(?:\.\d+)?|[零一二两三四五六七八九十]{1,3}|" + "|".join(_WORD_NUMBERS) + ")"
)
_QUANTITY_RE = re.compile(
    _NUM_START
    + r"(?P<cur>[¥￥$€]\s?)?"
    + _NUMBER.replace("(", "(?P<num>", 1)
    + r"(?:\s?(?P<unit>"
    + _UNIT_ALT
    + r")(?![A-Za-z]))?",
    re.IGNORECASE,
)
_CURRENCY = {"¥": "money:cny", "￥": "money:cny", "$": "money:usd", "€": "money:eur"}


def _zh_number(text: str) -> float | None:
    if text == "十":
        return 10
    if "十" in text:
        tens, _, ones = text.partition("十")
        t = _ZH_DIGITS.get(tens, -1) if tens else 1
        o = _ZH_DIGITS.get(ones, -1) if ones else 0
        return None if t < 0 or o < 0 else float(t * 10 + o)
    if len(text) == 1 and text in _ZH_DIGITS:
        return float(_ZH_DIGITS[text])
    return None


def _number(text: str) -> float | None:
    lowered = text.lower()
    if lowered in _WORD_NUMBERS:
        return float(_WORD_NUMBERS[lowered])
    if text[0] in _ZH_DIGITS or text[0] == "十":
        return _zh_number(text)
    return float(text.replace(",", ""))


def _dates(text: str) -> list[Quantity]:
    found: list[Quantity] = []
    for i, pattern in enumerate(_DATE_RES):
        for m in pattern.finditer(text):
            if any(q.start < m.end() and m.start() < q.end for q in found):
                continue
            if i <= 1:
                year, month, day = m.group(1), m.group(2), m.group(3)
            elif i == 2:
                month, day, year = str(MONTH_NUMBERS[m.group(1).lower()]), m.group(2), m.group(3)
            else:
                day, month, year = m.group(1), str(MONTH_NUMBERS[m.group(2).lower()]), m.group(3)
            if not 1 <= int(month) <= 12 or (day and not 1 <= int(day) <= 31):
                continue
            value = f"{int(year):04d}-{int(month):02d}" + (f"-{int(day):02d}" if day else "")
            found.append(
                Quantity(
                    text=m.group(0).strip(), kind="date", value=value, start=m.start(), end=m.end()
                )
            )
    return sorted(found, key=lambda q: q.start)


def quantities(text: str) -> list[Quantity]:
    """The dates and the numbers with a unit (or currency sign) in ``text``, in order.

    A bare number (an error code, a phone number, a model name) is not a quantity.
    """
    return list(_quantities(text))


@lru_cache(maxsize=4096)
def _quantities(text: str) -> tuple[Quantity, ...]:
    found = _dates(text)
    for m in _QUANTITY_RE.finditer(text):
        if any(q.start < m.end() and m.start() < q.end for q in found):
            continue
        unit, cur = m.group("unit"), m.group("cur")
        if not unit and not cur:
            continue
        raw = m.group("num")
        if not unit and not raw[0].isdigit():
            continue
        number = _number(raw)
        if number is None:
            continue
        if cur:
            kind, factor = _CURRENCY[cur.strip()], 1.0
        else:
            kind, factor = next((k, f) for pattern, k, f in _UNIT_KIND if pattern.match(unit or ""))
        found.append(
            Quantity(
                text=m.group(0).strip(),
                kind=kind,
                value=round(number * factor, 6),
                start=m.start(),
                end=m.end(),
            )
        )
    return tuple(sorted(found, key=lambda q: q.start))


# --- sentences and terms ------------------------------------------------------------------

_SENTENCE_END = re.compile(r"[。！？；!?;\n]+|\.(?=\s|$)")
_CJK_RUN = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z']+")
_IDENTIFIER = re.compile(
    r"(?<![A-Za-z0-9])(?:[A-Za-z]+[-_]?\d[A-Za-z0-9_-]*|\d+[A-Za-z][A-Za-z0-9_-]*)(?![A-Za-z0-9])"
)
_NAME = re.compile(r"[A-Za-z][A-Za-z']*")
_STOP = frozenset((
    "the", "a", "an", "of", "to", "in", "on", "for", "and", "or", "is", "are", "be", "by",
    "at", "as", "it", "its", "this", "that", "with", "from", "your", "our", "we", "you", "can",
    "may", "will", "any", "all",
))  # fmt: skip


def _sentences(text: str) -> list[str]:
    out, last = [], 0
    for m in _SENTENCE_END.finditer(text):
        out.append(text[last : m.start()])
        last = m.end()
    out.append(text[last:])
    return [s.strip() for s in out if s.strip()]


def _without_quantities(text: str) -> str:
    for q in reversed(_quantities(text)):
        text = text[: q.start] + " " + text[q.end :]
    return text


@lru_cache(maxsize=4096)
def _terms(text: str) -> frozenset[str]:
    """Lower-cased words and CJK character pairs, numbers and units left out."""
    plain = re.sub(r"\d+", " ", _without_quantities(text))
    terms: set[str] = {w.lower() for w in _WORD.findall(plain) if w.lower() not in _STOP}
    for run in _CJK_RUN.findall(plain):
        terms.update(run[i : i + 2] for i in range(len(run) - 1))
        if len(run) == 1:
            terms.add(run)
    return frozenset(terms)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a and b else 0.0


@lru_cache(maxsize=4096)
def _identifiers(text: str) -> frozenset[str]:
    """Codes and names that tell subjects apart: ``E-203``, ``X1``, and capitalised words
    after the first (``Lumen X1 Pro`` is not ``Lumen X1``)."""
    plain = _without_quantities(text)
    names = {w for w in _NAME.findall(plain)[1:] if w[0].isupper()}
    return frozenset({i.upper() for i in _IDENTIFIER.findall(plain)} | names)


# --- versions -----------------------------------------------------------------------------

_EFFECTIVE_AFTER = re.compile(r"生效日期\s*[:：]?|(?i:\beffective(?:\s+date)?\b\s*:?)")
_EFFECTIVE_BEFORE = re.compile(r"起?生效")
_CLAUSE_END = re.compile(r"[，,。；;\n]")
_WINDOW = 40


def _version(text: str) -> tuple[tuple[int, ...] | None, str]:
    """The version number in a title or file name, and the name without it."""
    return split_version(text) or (None, text.strip())


@lru_cache(maxsize=2048)
def _effective(text: str) -> str | None:
    """The date a passage says its document takes effect: "生效日期：2025-01-01", "effective
    (from) March 1, 2024", or "自 2025 年 1 月 1 日起生效" (a date in the same clause)."""
    for m in _EFFECTIVE_AFTER.finditer(text):
        dates = _dates(text[m.end() : m.end() + _WINDOW])
        if dates and isinstance(dates[0].value, str):
            return dates[0].value
    for m in _EFFECTIVE_BEFORE.finditer(text):
        window = text[max(0, m.start() - _WINDOW) : m.start()]
        clause = _CLAUSE_END.split(window)[-1]
        dates = _dates(clause)
        if dates and isinstance(dates[-1].value, str):
            return dates[-1].value
    return None


def doc_version(citation: Citation, siblings: Iterable[Citation] = ()) -> DocVersion:
    """The version (title, else file name) and effective date (text of ``citation`` or of its
    ``siblings`` from the same document) the evidence shows for ``citation``'s document."""
    version, base = _version(citation.title) if citation.title else (None, "")
    if version is None:
        stem = citation.source.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        version, _ = _version(stem)
    effective = _effective(citation.text)
    for other in siblings:
        if effective is not None:
            break
        if other.doc_id == citation.doc_id and other.doc_id:
            effective = _effective(other.text)
    return DocVersion(base_title=base, version=version, effective=effective)


def _newer(a: DocVersion, b: DocVersion) -> int:
    """1 when ``a`` is newer, -1 when ``b`` is, 0 when the evidence does not say."""
    if a.effective and b.effective and a.effective != b.effective:
        return 1 if a.effective > b.effective else -1
    same_title = bool(a.base_title) and a.base_title == b.base_title
    if same_title and a.version is not None and b.version is not None and a.version != b.version:
        return 1 if a.version > b.version else -1
    return 0


# --- conflicts ----------------------------------------------------------------------------


def _leaf(section: str) -> str:
    return section.rsplit(">", 1)[-1].strip()


def _same_subject(a: Citation, b: Citation, va: DocVersion, vb: DocVersion) -> bool:
    if _leaf(a.section) and _leaf(a.section) == _leaf(b.section):
        return True
    if va.base_title and va.base_title == vb.base_title:
        return True
    return _jaccard(_terms(a.text), _terms(b.text)) >= PASSAGE_SIMILARITY


def _statement_differences(a: str, b: str) -> list[tuple[str, str]]:
    """What sentences of ``a`` and their best matches in ``b`` state differently."""
    b_sentences = [(s, _terms(s), _identifiers(s), quantities(s)) for s in _sentences(b)]
    out: list[tuple[str, str]] = []
    for sentence in _sentences(a):
        qa = quantities(sentence)
        if not qa:
            continue
        terms, idents = _terms(sentence), _identifiers(sentence)
        scored = [(_jaccard(terms, t), s, i, q) for s, t, i, q in b_sentences if q]
        if not scored:
            continue
        similarity, other, other_idents, qb = max(scored, key=lambda x: x[0])
        if similarity < SENTENCE_SIMILARITY or idents != other_idents:
            continue
        # "in force from 2023-03-01" vs "from 2025-01-01": which edition, not a contradiction
        editions = _effective(sentence) is not None or _effective(other) is not None
        for kind in dict.fromkeys(q.kind for q in qa if not (editions and q.kind == "date")):
            mine = [q for q in qa if q.kind == kind]
            theirs = [q for q in qb if q.kind == kind]
            if not theirs or {q.value for q in mine} == {q.value for q in theirs}:
                continue
            only_a = [q.text for q in mine if q.value not in {t.value for t in theirs}]
            only_b = [q.text for q in theirs if q.value not in {m.value for m in mine}]
            if only_a and only_b:
                pair = (", ".join(only_a), ", ".join(only_b))
                if pair not in out:
                    out.append(pair)
    return out


def find_conflicts(
    citations: Sequence[Citation], *, context: Sequence[Citation] = ()
) -> list[Conflict]:
    """Pairs of ``citations`` that disagree, the lower number first, in order of it.

    ``context``: more passages of the same documents, read only for their versions and
    effective dates (a document's "effective from" line is rarely the passage that matched).
    """
    versions = {c.index: doc_version(c, [*citations, *context]) for c in citations}
    ordered = sorted(citations, key=lambda c: c.index)
    out: list[Conflict] = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            # one document (and the records of one file) states cases, not contradictions
            if a.index == b.index or a.source == b.source or (a.doc_id and a.doc_id == b.doc_id):
                continue
            va, vb = versions[a.index], versions[b.index]
            if not _same_subject(a, b, va, vb):
                continue
            values = _statement_differences(a.text, b.text)
            if not values:
                continue
            order = _newer(va, vb)
            newer = a if order > 0 else b if order < 0 else None
            out.append(
                Conflict(
                    a=a.index,
                    b=b.index,
                    values=tuple(values),
                    newer=None if newer is None else newer.index,
                    newer_version=None if newer is None else versions[newer.index],
                )
            )
    return out


def annotate_conflicts(
    citations: Sequence[Citation],
    conflicts: Sequence[Conflict] | None = None,
    *,
    chinese: bool = False,
) -> list[Citation]:
    """``citations`` with ``conflicts_with`` and ``conflict_note`` set from ``conflicts``
    (default: :func:`find_conflicts` of ``citations``), the notes in Chinese with
    ``chinese``. Numbers must already be final: they are what the notes name."""
    if conflicts is None:
        conflicts = find_conflicts(citations)
    if not conflicts:
        return list(citations)
    out = []
    for c in citations:
        mine = [x for x in conflicts if c.index in (x.a, x.b)]
        if not mine:
            out.append(c)
            continue
        others = tuple(x.b if x.a == c.index else x.a for x in mine)
        out.append(
            replace(
                c,
                conflicts_with=tuple(dict.fromkeys(others)),
                conflict_note="\n".join(x.note_in(chinese=chinese) for x in mine),
            )
        )
    return out


def cache_clear() -> None:
    """Forget the per-text analyses kept between calls (benchmarks measure a cold start)."""
    for cached in (_quantities, _terms, _identifiers, _effective):
        cached.cache_clear()
