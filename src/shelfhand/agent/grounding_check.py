"""The grounding check: does each sentence of an answer say what its passages say?

Offline and fast (no second model): every sentence of the answer is scored against the
passages it cites (``[n]``), or against all of the run's passages when it cites none:

- **words**: the share of the sentence's content words (the keyword index's analysis,
  :func:`~shelfhand.knowledge.analysis.tokenize_for_matching`: English stemmed, Chinese
  segmented with jieba's dictionary, identifiers such as ``E-203`` or ``SKU2024-011`` whole) that the best passage holds;
- **facts**: every number, duration, code and date of the sentence must appear in those
  passages (or in the question: "3 units" may come from the user). ``3,999`` meets ``3999``,
  ``2025-01-01`` meets ``2025 年 1 月 1 日``. A date is also checked whole, by its month and
  day (:mod:`.dates`): "2025-03-12" is not held by a 3 and a 12 found apart.

A sentence no passage supports is supported by a **tool result** of the run (an order's
status, a stock count: what the caller's own systems returned) when every fact of it is held
by the tool results, the passages or the question, and one result holds enough of its words
(the same shares); its :attr:`~shelfhand.core.grounding.SentenceSupport.tool` names the tool.

A sentence is supported when no fact is missing and enough of its words are found
(:data:`MIN_SUPPORT`; less when the sentence states facts the passages hold, since an English
answer over Chinese passages shares its facts, not its words), and no number of it is
**misplaced**: held by a table only in rows about something else than the row the sentence
names (:func:`misplaced_numbers`: "The Lumen X1 Pro costs 3,999 CNY" over a price table whose
3,999 is the Lumen X1's and whose Lumen X1 Pro row says 5,999). The result is a
:class:`~shelfhand.core.grounding.Grounding`, per sentence, with the supporting passage.

When a tool called for the question failed (the stock system is down), a sentence's words
other than what it names (its capitalised words and codes) must be held in the main by its
passage, unless it states a number the question did not: "The Lumen X1 is in stock." over the
product's description rests on "Lumen X1" alone, and "stock" is what the failed tool would
have told (:meth:`Evidence.says_nothing_held`).
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from shelfhand.core.citations import CITATION_MARK
from shelfhand.core.grounding import Grounding, SentenceSupport
from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import (
    chinese_share,
    identifiers_and_spans,
    latin_names,
    tokenize_for_matching,
)

from .amounts import asked_amount, timed, timed_numbers, timed_verb, times
from .dates import held_dates, stated_dates

__all__ = [
    "MIN_SUPPORT",
    "Evidence",
    "check_grounding",
    "facts",
    "misplaced_numbers",
    "split_sentences",
    "table",
    "without_citations",
    "words",
]

MIN_SUPPORT = 0.5
"""Share of a sentence's content words the best passage must hold."""
MIN_SUPPORT_WITH_FACTS = 0.25
"""The same, for a sentence whose numbers and codes the passages all hold."""
ACROSS_SHARE = 1 / 3
"""The share of a text's letters in Chinese from which it reads as Chinese to the check of a
sentence in the other language than its passage (an English passage has under a quarter of
that: its headings may quote a Chinese term)."""
MIN_WORDS = 3
"""Sentences with fewer content words and no fact are not checked ("Hope this helps!")."""
PASSAGE_CACHE = 1024
"""Passages whose analysis is kept (about 1 MB)."""

MIN_SUBJECT = 2
"""The fewest characters of a passage's title that a sentence naming it names its subject
(see :meth:`Evidence._transplanted`)."""
_QUALIFIER = re.compile(r"\s*[（(][^()（）]*[)）]\s*$")


@functools.lru_cache(maxsize=PASSAGE_CACHE)
def title_subject(title: str) -> str:
    """What a passage's title names, as a sentence would name it: "朱皇后 (孙休)" names 朱皇后."""
    return _QUALIFIER.sub("", title).strip().casefold()


MIN_TOLD = 2
"""A sentence with no fact telling at least this many words the question does not hold must
have :data:`MIN_SUPPORT` of those held by its passage too (see :meth:`Evidence._telling`)."""


def _tells(told: set[str], held: frozenset[str]) -> bool:
    """Whether a passage holding the words ``held`` holds enough of what a sentence tells
    beyond the question's words (``told``)."""
    return len(told & held) >= MIN_SUPPORT * len(told)


TOOL_TEXT_CHARS = 20_000
"""Characters of one tool result that sentences are checked against (a long result, a web
page, is checked by its start)."""

# a sentence ends at 。！？；!?; or a newline, or at ". " (not inside 3.5 or e.g.)
_SENTENCE_END = re.compile(r"(?<=[。！？；!?;])|\n+|(?<=[a-z0-9)\]\u3400-\u9fff][.])\s+(?=\S)")
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)、]|#+)\s+")
_MARKER_ONLY = re.compile(r"\d{1,2}[.)、]")
_NUMBER = re.compile(r"\d+(?:[,，]\d{3})*(?:\.\d+)?")
_LEADING_ZEROS = re.compile(r"^0+(?=\d)")
# an identifier's separator-free form holding a letter (``e203``, ``sku2024011``): dates such
# as 2025-01-01 are checked by their numbers (and whole, by their day: see .dates)
_SEPARATOR_FREE = re.compile(r"[^\W_]*[^\W\d_][^\W_]*")
# "9th", "21st": a number (counted as one), not a code
_ORDINAL = re.compile(r"\d+(?:st|nd|rd|th)")


def split_sentences(text: str) -> list[str]:
    """``text`` as sentences: Chinese and English punctuation, line breaks and list items
    end one; decimals (``3.5``), identifiers (``v1.2``) and citation markers stay inside."""
    out: list[str] = []
    marker = ""
    for piece in _SENTENCE_END.split(text):
        if piece is None:
            continue
        if _MARKER_ONLY.fullmatch(piece.strip()):
            marker = piece.strip()  # "4." of a numbered list: it starts the next sentence
            continue
        sentence = _LIST_MARK.sub("", f"{marker} {piece}" if marker else piece).strip()
        marker = ""
        if sentence and not CITATION_MARK.fullmatch(sentence):
            if out and sentence.startswith("/ "):  # "Still need help? / 仍需帮助？": one heading
                out[-1] = f"{out[-1]} {sentence}"
            else:
                out.append(sentence)
    return out


def cited_numbers(sentence: str) -> tuple[int, ...]:
    """The passage numbers ``sentence`` cites, in order, once each."""
    return tuple(dict.fromkeys(int(n) for n in CITATION_MARK.findall(sentence)))


def without_citations(text: str) -> str:
    """``text`` with its ``[n]`` citation markers blanked out."""
    return CITATION_MARK.sub(" ", text)


def words(text: str) -> set[str]:
    """The content words of ``text`` as the keyword index analyses them."""
    return set(tokenize_for_matching(CITATION_MARK.sub(" ", text)))


def _number(raw: str) -> str:
    value = raw.replace(",", "").replace("，", "")
    if "." in value:
        value = value.rstrip("0").rstrip(".") or "0"
    return _LEADING_ZEROS.sub("", value)


def facts(text: str) -> set[str]:
    """The numbers and codes of ``text``, normalised (``3,999`` → ``3999``, ``E-203`` →
    ``e203``; the parts of a date count as numbers too: ``2025-01-01`` → ``2025``, ``1``;
    ``9th`` → ``9``). The digits of a code with a letter are the code's alone: ``SKU2024-012``
    is ``sku2024012``, not also ``2024`` and ``12`` (a passage naming it does not hold "12
    units"). Citation markers are not facts."""
    text = unicodedata.normalize("NFKC", CITATION_MARK.sub(" ", text))
    codes, spans = identifiers_and_spans(text)
    found = {_number(m.group()) for m in _NUMBER.finditer(_without_codes(text, spans))}
    found.update(t for t in codes if _SEPARATOR_FREE.fullmatch(t) and not _ORDINAL.fullmatch(t))
    return found


def _without_codes(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` with its codes that hold a letter (at ``spans``) blanked out: their digits are
    no numbers of their own; ordinals kept."""
    if not spans:
        return text
    parts, at = [], 0
    for start, end in spans:
        if _ORDINAL.fullmatch(text, start, end):
            continue
        parts.append(text[at:start])
        parts.append(" ")
        at = end
    parts.append(text[at:])
    return "".join(parts)


@functools.lru_cache(maxsize=PASSAGE_CACHE * 8)
def passage_words(text: str) -> frozenset[str]:
    """:func:`words` of a passage's text or sentence, kept for the process's most recent ones
    (the same passages come back question after question: segmenting them is the check's and
    the extractive answer's main cost)."""
    return frozenset(words(text))


_CODE_FACT = re.compile(r"[a-z]+\d[a-z\d]*")
"""A fact that is a code (``e203``, ``sku2024011``, as :func:`facts` writes them), not a number."""


@functools.lru_cache(maxsize=PASSAGE_CACHE)
def _analysed(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """A passage's words and facts (kept for the process's most recent passages: a passage
    found again by another question, or checked twice in one run, is analysed once)."""
    return passage_words(text), frozenset(facts(text))


_MEASURED = re.compile(
    r"(?<![\d.])(?<!\d[,，])(\d{1,15}(?:[,，]\d{3}){0,5}(?:\.\d{1,6})?)(?![\d,，])\s*"
    r"(个月|个工作日|工作日|小时|分钟|[天日年周秒元块倍次%]"
    r"|(?:business days?|days?|months?|years?|weeks?|hours?|minutes?|seconds?)\b)",
    re.IGNORECASE,
)
"""A number with the unit it is stated in ("3 天", "24 个月", "7 days"; the 1 小时 of "5 分钟内
响应，1 小时内恢复", after a clause's comma, not the 000 of "1，000 元"): tried from a number's
first digit only, and of bounded length (a run of 11,000 digits with no unit after it took
15 s when each digit was a start)."""
_DURATION_UNITS = frozenset(
    [
        *("秒", "分钟", "小时", "天", "日", "周", "个月", "年", "工作日", "个工作日"),
        *("second", "minute", "hour", "day", "week", "month", "year", "business day"),
    ]
)
"""The units of :func:`measured` that time something (as it writes them: "7 days" → ``day``)."""
_UNIT_WORDS = frozenset(
    words("天 个月 个 月 年 周 日 小时 分钟 秒 元 块 倍 次 工作日 business days months years weeks")
    | words("hours minutes seconds day month year week hour minute second")
)
"""The words of units: a sentence sharing "天" with an answer is not about what it names."""


def measured(text: str) -> dict[str, str]:
    """The numbers ``text`` states with a unit, normalised as :func:`facts` writes them, each
    with its unit (``"享有婚假 3 天"`` → ``{"3": "天"}``; "7 days" → ``{"7": "day"}``)."""
    text = unicodedata.normalize("NFKC", CITATION_MARK.sub(" ", text))
    return {
        _number(m.group(1)): m.group(2).casefold().removesuffix("s")
        for m in _MEASURED.finditer(text)
    }


@functools.lru_cache(maxsize=PASSAGE_CACHE)
def _measured_sentences(text: str) -> tuple[tuple[str, dict[str, str]], ...]:
    """A passage's sentences that state a number with its unit, each with its numbers and
    their units (kept like its words)."""
    return tuple((s, amounts) for s in split_sentences(text) if (amounts := measured(s)))


def _naming(own: AbstractSet[str]) -> frozenset[str]:
    """The words of a sentence that name something: not its numbers, nor the units."""
    return frozenset(w for w in own if not _HAS_DIGIT.search(w)) - _UNIT_WORDS


_HAS_DIGIT = re.compile(r"\d")
_passage_share = functools.lru_cache(maxsize=PASSAGE_CACHE)(chinese_share)
"""A passage's :func:`~shelfhand.knowledge.analysis.chinese_share`, kept like its words."""
_passage_days = functools.lru_cache(maxsize=PASSAGE_CACHE)(held_dates)
"""A passage's :func:`~.dates.held_dates`, kept like its words (a tool result's, which no
other run sees, are read each time)."""


def _times_another(number: str, timing: AbstractSet[str], answer: Mapping[str, str] | None) -> bool:
    """Whether, for a question asking how long until something is done, the passages give the
    time within which it is done (``timing``, :meth:`Evidence._timing`) and the duration
    ``number`` is not that time: "保修维修需要多长时间？" answered with the warranty's "整机保修期为
    自购买之日起 12 个月。" (Qwen2.5-Coder-0.5B), where the policy says "7 个工作日内完成检测和维修".
    Not when the answer (its numbers, ``answer``) states that time too."""
    if not timing or number in timing:
        return False
    return not any(n in timing for n in answer or {})


class Evidence:
    """The passages of a run, each analysed the first time a sentence is checked against it
    (an answer citing [1] costs the analysis of passage 1 only)."""

    __slots__ = (
        "_asked",
        "_disagree",
        "_doing",
        "_question",
        "_sections",
        "_sources",
        "_texts",
        "_titles",
        "_tools",
        "question_facts",
        "tool_failed",
    )

    def __init__(
        self,
        citations: Sequence[Citation],
        question: str = "",
        tools: Sequence[tuple[str, str]] = (),
        tool_failed: bool = False,
        asked: str = "",
    ) -> None:
        # a passage says what its heading says too ("保修政策（第 2 版）": the answer may name it)
        self._texts = {
            c.index: "\n".join(p for p in (c.title, c.section, c.text) if p)
            for c in citations
            if c.text
        }
        self._sections = {c.index: c.section for c in citations if c.text and c.section}
        # the passages that disagree (versions of a policy): each pair, either way round
        self._disagree = frozenset(
            frozenset((c.index, other)) for c in citations for other in c.conflicts_with
        )
        self._titles = {
            c.index: (c.title, c.doc_id or c.source) for c in citations if c.text and c.title
        }
        self.question_facts = frozenset(facts(question)) if question else frozenset()
        self._question = question
        self._doing = timed_verb(question) if question else None
        self._asked = asked
        # a passage's source, named in an answer ("(docs-t1/warranty.md)"), is not a claim:
        # its digits and words are not checked (longest first: one may contain another)
        self._sources = sorted({c.source for c in citations if c.source}, key=len, reverse=True)
        self._tools = tuple((name, text[:TOOL_TEXT_CHARS]) for name, text in tools if text.strip())
        self.tool_failed = tool_failed

    @classmethod
    def of(
        cls,
        citations: Sequence[Citation],
        question: str = "",
        tools: Sequence[tuple[str, str]] = (),
        tool_failed: bool = False,
        asked: str = "",
    ) -> Evidence:
        """``citations`` ready to check against (a passage retrieved twice counts once), and
        ``tools``: the run's other tool results, as (tool name, result text); ``tool_failed``:
        a tool called for the question failed (see :meth:`says_nothing_held`); ``asked``:
        the query a follow-up was rewritten to (see :meth:`_question_names`)."""
        return cls(citations, question, tools, tool_failed, asked)

    def says_nothing_held(self, claims: str, own: set[str], held: frozenset[str]) -> bool:
        """Whether a sentence (its text ``claims``, words ``own``) says nothing a passage (its
        words ``held``) holds beyond what it names, while the tool that could have said it
        failed (:attr:`tool_failed`).

        The names (a capitalised word after the first, a code such as ``X1`` or
        ``SKU2024-011``) carry such a sentence over the share of words a sentence needs: "The
        Lumen X1 is in stock." over the product's description holds "Lumen X1" and not
        "stock", which is what the failed ``query_stock`` was for. So its other words must be
        held in the main (:data:`MIN_SUPPORT`). A sentence stating a number the question did
        not is left to the facts check."""
        if not self.tool_failed:
            return False
        names, rest = names_and_rest(claims)
        if any(f.isdigit() for f in facts(rest) - self.question_facts):
            return False  # (a number of its own, not a name's digits: "X1")
        told = own - names
        return bool(told) and len(told & held) / len(told) < MIN_SUPPORT

    def _misplaced(
        self,
        stated: set[str],
        own: set[str],
        tables: dict[int, Table],
        analysed: dict[int, tuple[frozenset[str], frozenset[str]]],
    ) -> set[str]:
        """The numbers of a sentence (``stated``, its words ``own``) that the tables of its
        passages hold only in other rows than the one it names, and no passage states outside
        a table (see :func:`misplaced_numbers`)."""
        named = _named(own)
        checked = _standalone(stated, named) - self.question_facts
        if not checked:
            return set()
        misplaced: set[str] = set()
        for tabled in tables.values():
            misplaced.update(
                misplaced_numbers(checked, named, tabled, otherwise=self._question_names)
            )
        for i, tabled in tables.items() if misplaced else ():  # unless said outside a table
            if tabled.rows:
                misplaced -= tabled.elsewhere
            elif not self._heads_another_row(i, named, tables):
                misplaced -= analysed[i][1]
        return misplaced

    def _heads_another_row(
        self, index: int, named: frozenset[str], tables: dict[int, Table]
    ) -> bool:
        """Whether passage ``index``'s heading names another row of a table than the rows
        ``named`` (a sentence's naming words) names: "Lumen Mini M2's light source lasts
        about 4,000 hours" is not borne out by the section "Lumen X1 (SKU2024-011)", whose
        description states the X1's 4,000 hours (seen with Qwen2.5-Coder-0.5B)."""
        section = self._sections.get(index)
        if not section:
            return False
        heading = _named(passage_words(section))
        for tabled in tables.values():
            if not tabled.rows:
                continue
            theirs = _most_shared(heading, tabled.labels)
            # (the rows the question names when the sentence names none, as for the numbers)
            if theirs and theirs.isdisjoint(_rows_named(named, tabled, self._question_names)):
                return True
        return False

    def _days(self, pool: Iterable[int]) -> frozenset[str]:
        """The days of the year (``--MM-DD``) the passages of ``pool`` and the question may
        state."""
        found = held_dates(self._question) if self._question else frozenset()
        return found.union(*(_passage_days(self._texts[i]) for i in pool))

    def _question_names(self) -> frozenset[str]:
        """What a sentence naming nothing of a table ("The price is 3,999.") is read as about:
        the question's naming words (analysed only when such a sentence comes), with those
        of its rewrite when it has one: "它的光源能用多久？" names no product, "Lumen X1 Pro
        light source" does. Only its names: a number the rewrite, which the model wrote,
        states is not one the answer may repeat."""
        names = _named(passage_words(self._question)) if self._question else frozenset()
        return names | _named(passage_words(self._asked)) if self._asked else names

    def _telling(
        self,
        own: set[str],
        best: int,
        score: float,
        pool: Sequence[int],
        analysed: dict[int, tuple[frozenset[str], frozenset[str]]],
        needed: float,
    ) -> tuple[int, float, bool]:
        """The passage supporting a sentence of words ``own`` and no fact, its share, and
        whether what the sentence tells beyond the question's words is held too: the
        question's words, said again, carried "《安般守意经》论述了佛教的出家人制度。" over the
        share a sentence needs (Qwen2.5-Coder-0.5B, CMRC 2018; the sutra's passage says it
        teaches watching the breath). ``best`` and ``score`` as they were when it tells too
        little to check (:data:`MIN_TOLD`) or its best passage holds enough of it; else the
        passage of ``pool`` holding the most of its words among those holding enough of
        both, or ``best`` and ``False`` (not supported) when none does."""
        told = own - self._asked_words()
        if len(told) < MIN_TOLD:
            return best, score, True

        if _tells(told, analysed[best][0]):
            return best, score, True
        shares = {i: len(own & analysed[i][0]) / len(own) for i in pool}
        telling = [i for i in pool if shares[i] >= needed and _tells(told, analysed[i][0])]
        if not telling:
            return best, score, False
        other = max(telling, key=lambda i: shares[i])
        return other, shares[other], True

    def _transplanted(
        self,
        claims: str,
        own: set[str],
        best: int,
        pool: Sequence[int],
        analysed: dict[int, tuple[frozenset[str], frozenset[str]]],
    ) -> bool:
        """Whether a sentence (``claims``, words ``own``) names the subject of a passage of
        ``pool`` (its title, "亚麻") and rests on another document's passage (``best``, whose
        subject it does not name), while the passage about what it names holds too little of
        what it tells beyond the question's words: "亚麻适宜生活在热带沙漠气候。" took the climate
        of a desert town's passage (Qwen2.5-Coder-0.5B, CMRC 2018; flax's passage says it likes
        a cool, humid one)."""
        text = claims.casefold()
        titles = {i: (title_subject(title), doc) for i, (title, doc) in self._titles.items()}
        own_subject, own_doc = titles.get(best, ("", ""))
        if own_subject and own_subject in text:
            return False
        named = [
            i
            for i in pool
            if i != best
            and i in titles
            and len(titles[i][0]) >= MIN_SUBJECT
            and titles[i][0] in text
            and titles[i][1] != own_doc
        ]
        if not named:
            return False
        told = own - self._asked_words()
        if len(told) < MIN_TOLD:
            return False
        return not any(_tells(told, analysed[i][0]) for i in named)

    def _another_entry(
        self,
        stated: set[str],
        best: int,
        analysed: dict[int, tuple[frozenset[str], frozenset[str]]],
    ) -> set[str]:
        """The codes the question asks about (``E-203``) that a sentence states (``stated``,
        its facts) while the passage it rests on (``best``) lacks them and names a code of its
        own, when a passage holding them was found: the sentence tells another code's entry
        under the code asked about. Qwen2.5-Coder-0.5B answered "E-203 怎么修？" with "如果
        E-203 返回，需要更换风扇", the E-105 entry's last step (the question's code counts as
        held by every passage, so the sentence passed). ``set()`` when it does not."""
        named = {f for f in stated & self.question_facts if _CODE_FACT.fullmatch(f)}
        held = analysed[best][1]
        if not named or named <= held:
            return set()
        if not any(_CODE_FACT.fullmatch(f) for f in held - named):
            return set()  # (a passage naming no code: a chunk of the entry, or a general one)
        if not any(named <= _analysed(text)[1] for text in self._texts.values()):
            return set()  # no passage holds the code: nothing better to rest on
        return named - held

    def _across(self, claims: str, pool: Sequence[int]) -> bool:
        """Whether a sentence (``claims``) is in the other language than every passage of
        ``pool`` (Chinese over English passages, or the reverse; a passage in both is in
        neither other): with one in its language, a number another language's passage holds
        is a coincidence ("12 units" and a Chinese policy's "12 个月")."""
        if chinese_share(claims) >= ACROSS_SHARE:
            return all(_passage_share(self._texts[i]) < ACROSS_SHARE / 4 for i in pool)
        return all(_passage_share(self._texts[i]) >= ACROSS_SHARE for i in pool)

    def _said_of_another(
        self,
        claims: str,
        own: set[str],
        pool: Sequence[int],
        answer: Mapping[str, str] | None = None,
    ) -> set[str]:
        """The numbers a sentence (``claims``, words ``own``) states with a unit ("3 天") that
        the passages of ``pool`` state with it only in sentences about something else: a
        sentence stating another amount of that unit holds more of what the sentence names
        than any sentence stating this one. Qwen2.5-Coder-0.5B answered "产假多少天？" with
        "产假的天数是 3 天。" over "享有婚假 3 天。女员工生育享受 158 天产假。": the passage holds
        3, as the marriage leave's. A number the question states is the user's own; a
        sentence naming nothing ("3 天。") is left to the other checks.

        When the question asks how long or how much, a number is said of another thing too
        when a sentence stating another amount of its unit holds more of what the question
        names than each sentence stating it (all that one holds, and more): "值班多久要响应告警？"
        answered with the incident levels' "须在 5 分钟内响应，1 小时内恢复。", copied word for
        word, while the on-call rule says "主值班须在 15 分钟内响应告警" (Qwen2.5-Coder-0.5B).
        Not when the answer (its numbers with their units, ``answer``) states that amount
        too (the extractive answer quotes the sentences around the one that answers), nor
        from a passage that disagrees with the one stating it (another version of a policy,
        whose conflict note says which is newer)."""
        stated = {n: u for n, u in measured(claims).items() if n not in self.question_facts}
        named = _naming(own)
        if not stated or not named:
            return set()
        sentences = [(i, *m) for i in pool for m in _measured_sentences(self._texts[i])]
        timing: frozenset[str] | None = None  # (read for the first duration only)
        out: set[str] = set()
        for number, unit in stated.items():
            holding = [(i, s) for i, s, amounts in sentences if amounts.get(number) == unit]
            if holding and self._doing is not None and unit in _DURATION_UNITS:
                if timing is None:
                    timing = self._timing(sentences)
                if _times_another(number, timing, answer):
                    out.add(number)
                    continue
            doing = timed(claims, number)
            rivals = [
                (i, s, amounts)
                for i, s, amounts in sentences
                if number not in amounts
                and unit in amounts.values()
                # ("1 小时内恢复" and "恢复后 24 小时内提交复盘报告" time two doings)
                and (doing is None or times(s, doing))
            ]
            if not holding or not rivals:
                continue  # (stated in another way, a table's cell: the other checks read it)
            # (the sentences' words read only now: most numbers have no rival)
            most = max(len(passage_words(s) & named) for _, s in holding)
            if any(len(passage_words(s) & named) > most for _, s, _ in rivals):
                out.add(number)
                continue
            said = answer or {}
            unsaid = [
                s
                for i, s, amounts in rivals
                if not any(said.get(n) == u for n, u in amounts.items())
                # (a version that disagrees: the conflict note tells which amount is whose)
                and not any(frozenset((i, h)) in self._disagree for h, _ in holding)
            ]
            if self._asked_of([s for _, s in holding], unsaid):
                out.add(number)
        return out

    def _timing(self, sentences: Sequence[tuple[int, str, Mapping[str, str]]]) -> frozenset[str]:
        """The numbers ``sentences`` give as the time within which the doing the question
        asks the time of is done (:func:`~.amounts.timed_verb`, :func:`~.amounts.timed_numbers`)."""
        doing = self._doing or ""
        return frozenset(_number(n) for _, s, _ in sentences for n in timed_numbers(s, doing))

    def _asked_of(self, holding: Sequence[str], rivals: Sequence[str]) -> bool:
        """Whether, for a question asking an amount, a sentence of ``rivals`` holds every
        word the question names that each sentence of ``holding`` holds, and more (see
        :meth:`_said_of_another`); not when one of ``holding`` names none of them. When
        the question asks how long until something is done (:func:`~.amounts.timed_verb`)
        and a sentence of ``holding`` gives that time ("1 小时内恢复"), only a rival that
        gives it too counts: "恢复后 3 小时内提交复盘报告" tells another doing's time."""
        if not self._question or asked_amount(self._question) is None:
            return False
        asked = _naming(self._asked_words())
        told = [passage_words(s) & asked for s in holding]
        if not all(told):
            # (a sentence naming none of it tells more than was asked: "晚婚另加 7 天")
            return False
        verb = self._doing
        if verb is not None and any(times(s, verb) for s in holding):
            rivals = [s for s in rivals if times(s, verb)]
        return any(
            all(t < theirs for t in told) for theirs in (passage_words(s) & asked for s in rivals)
        )

    def _asked_words(self) -> frozenset[str]:
        """The question's words, with its rewrite's (read only when a sentence needs them)."""
        asked = passage_words(self._question)
        return asked | passage_words(self._asked) if self._asked else asked

    def check(
        self, sentence: str, answer: Mapping[str, str] | None = None
    ) -> SentenceSupport | None:
        """``sentence`` scored against the passages it cites (all when it cites none or
        only numbers no passage has); ``None`` when it has nothing to check. ``answer``:
        the numbers the whole answer states, with their units (:func:`measured`).

        The supporting passage is the one holding most of the sentence's words among those
        holding all of its facts (when one does): "12 months" is shown with the policy that
        says 12 months, and its disagreement notes with it."""
        cited = cited_numbers(sentence)
        claims = sentence
        for source in self._sources:
            claims = claims.replace(source, " ")
        own = words(claims)
        stated = facts(claims)
        if len(own) < MIN_WORDS and not stated:
            return None
        pool = [i for i in cited if i in self._texts] or list(self._texts)
        analysed = {i: _analysed(self._texts[i]) for i in pool}
        allowed: set[str] = set(self.question_facts)
        for _, held in analysed.values():
            allowed |= held
        missing = sorted(f for f in stated if f not in allowed and not _inside_code(f, allowed))
        days = stated_dates(claims)
        on_days = self._days(pool) if days else frozenset()
        missing += sorted(days - on_days)
        whole = [i for i in pool if stated <= (analysed[i][1] | self.question_facts)]
        best, score = None, 0.0
        for i in whole or pool:
            share = len(own & analysed[i][0]) / len(own) if own else 1.0
            if share > score or best is None:
                best, score = i, share
        needed = MIN_SUPPORT_WITH_FACTS if stated else MIN_SUPPORT
        if best is not None and stated - self.question_facts and self._across(claims, pool):
            # in the other language than every passage, it shares none of their words: the
            # numbers and codes of its own (not the question's), all held, are what bear it out
            needed = 0.0
        told = True
        if best is not None and score >= needed and not stated and self._question:
            best, score, told = self._telling(own, best, score, whole or pool, analysed, needed)
        misplaced: set[str] = set()
        if stated and not missing:
            tables = {i: table(self._texts[i]) for i in pool}
            if any(t.rows for t in tables.values()):
                misplaced = self._misplaced(stated, own, tables, analysed)
        if not missing and not misplaced and best is not None and self.question_facts:
            misplaced = self._another_entry(stated, best, analysed)
        if stated and not missing and not misplaced:
            misplaced = self._said_of_another(claims, own, pool, answer)
        supported = not missing and not misplaced and score >= needed and told and best is not None
        if (
            supported
            and best is not None
            and self.says_nothing_held(claims, own, analysed[best][0])
        ):
            supported = False
        if supported and best is not None and self._question and len(self._titles) > 1:
            supported = not self._transplanted(claims, own, best, pool, analysed)
        if self._tools:  # a tool result that holds more of the sentence is what it is about
            # (a number a table holds only in another row is not held unless a result holds it)
            by_tool = self._tool_support(
                sentence, cited, own, stated, allowed - misplaced, days - on_days
            )
            if by_tool.score > score or (by_tool.supported and not supported):
                return by_tool
        return SentenceSupport(
            text=sentence,
            supported=supported,
            passage=best if score > 0 else None,
            score=score,
            cited=cited,
            missing=tuple(missing),
            misplaced=tuple(sorted(misplaced)),
        )

    def _tool_support(
        self,
        sentence: str,
        cited: tuple[int, ...],
        own: set[str],
        stated: set[str],
        allowed: set[str],
        days: set[str],
    ) -> SentenceSupport:
        """``sentence`` against the run's tool results: the one holding most of its words,
        and whether they support it (every fact held by them, the passages or the question,
        ``allowed``; every day of ``days``, those the passages do not state, held by them;
        enough of its words in that result)."""
        analysed = [(name, _analysed(text)) for name, text in self._tools]
        held = set(allowed).union(*(found for _, (_, found) in analysed))
        missing = sorted(f for f in stated if f not in held and not _inside_code(f, held))
        if days:
            missing += sorted(days.difference(*(held_dates(text) for _, text in self._tools)))
        best, score = analysed[0][0], 0.0
        for name, (held_words, _) in analysed:
            share = len(own & held_words) / len(own) if own else 1.0
            if share > score:
                best, score = name, share
        enough = score >= (MIN_SUPPORT_WITH_FACTS if stated else MIN_SUPPORT)
        return SentenceSupport(
            text=sentence,
            supported=enough and not missing,
            score=score,
            cited=cited,
            missing=tuple(missing),
            tool=best,
        )


def names_and_rest(text: str) -> tuple[set[str], str]:
    """The tokens of what ``text`` names: its codes (``sku2024011``) and its Latin names
    (:func:`~shelfhand.knowledge.analysis.latin_names`: ``Lumen``, ``X1``, ``Pro``; an
    English sentence's first word is not one); and ``text`` without them."""
    _, codes = identifiers_and_spans(text)
    spans = sorted(codes + latin_names(text, first=chinese_share(text) > 0))
    named, parts, at = [], [], 0
    for start, end in spans:
        if start < at:
            continue  # (a code that is a name too)
        named.append(text[start:end])
        parts.append(text[at:start])
        at = end
    parts.append(text[at:])
    return (words(" ".join(named)) if named else set()), " ".join(parts)


def _named(tokens: Iterable[str]) -> frozenset[str]:
    """The words of ``tokens`` that name something (numbers alone do not)."""
    return frozenset(t for t in tokens if not t.replace(",", "").replace(".", "").isdigit())


def _standalone(found: Iterable[str], named: Iterable[str]) -> set[str]:
    """The numbers of ``found`` (facts) that stand alone: not the digits of a name among
    ``named`` ("1" of "X1", "2024" of "SKU2024-012")."""
    names = [w for w in named if not w.isalpha()]
    return {f for f in found if f.isdigit() and not any(f in w for w in names)}


@dataclass(frozen=True, slots=True)
class Table:
    """The tables of a passage: its data rows, each as its naming words and its numbers, and
    the facts of its other lines (``elsewhere``; empty when it has no table)."""

    rows: tuple[tuple[frozenset[str], frozenset[str]], ...]
    elsewhere: frozenset[str]
    common: frozenset[str] = frozenset()
    """The words every row holds, when there are two or more (they name no row)."""
    labels: tuple[frozenset[str], ...] = ()
    """Each row's label: the words of its cells before the first that holds a number
    (``SKU2024-011 | Lumen X1``; ``更换灯泡``), what a heading naming the row would say."""


@functools.lru_cache(maxsize=PASSAGE_CACHE)
def table(text: str) -> Table:
    """The :class:`Table` of a passage's text: its data rows are the lines of two or more
    cells separated by ``|`` that hold a number standing alone (a header names columns and
    holds none; a Markdown rule ``|---|`` neither)."""
    rows = []
    labels = []
    other = []
    for line in text.splitlines():
        if line.count("|") >= 2:
            named = _named(passage_words(line))
            numbers = _standalone(facts(line), named)
            if numbers:
                rows.append((named, frozenset(numbers)))
                labels.append(_label(line))
                continue
        other.append(line)
    if not rows:
        return Table(rows=(), elsewhere=frozenset())
    common = frozenset.intersection(*(w for w, _ in rows)) if len(rows) > 1 else frozenset()
    return Table(
        rows=tuple(rows),
        elsewhere=frozenset(facts("\n".join(other))),
        common=common,
        labels=tuple(labels),
    )


def _label(row: str) -> frozenset[str]:
    """The words of ``row``'s cells before its first cell holding a number of its own."""
    label: set[str] = set()
    for cell in row.strip().strip("|").split("|"):
        held = _named(words(cell))  # (not kept: cells would crowd out the passages)
        if _standalone(facts(cell), held):
            break
        label |= held
    return frozenset(label)


def misplaced_numbers(
    numbers: Iterable[str],
    named: frozenset[str],
    passage: Table,
    *,
    otherwise: Callable[[], frozenset[str]] = frozenset,
) -> list[str]:
    """The ``numbers`` (normalised, see :func:`facts`) that the tables of a passage (its
    :func:`table`) hold only in rows about something else than what ``named`` (a
    sentence's words) names.

    The rows ``named`` names are those sharing the most of its words (one, or several that
    tie); when it names no row, those ``otherwise()`` names (the question's words: "The price
    is 3,999." answers the question's row). A number is misplaced when none of them holds
    it. When one of the numbers is in a named row, the sentence speaks of several rows (a
    comparison: "the X1 costs 3,999 and the X1 Pro 5,999"): none is."""
    rows = passage.rows
    named_rows = _rows_named(named, passage, otherwise)
    if not named_rows:
        return []
    numbers = list(numbers)
    if any(n in rows[i][1] for i in named_rows for n in numbers):
        return []
    return [n for n in numbers if any(n in held for _, held in rows)]


def _rows_named(
    named: frozenset[str], passage: Table, otherwise: Callable[[], frozenset[str]]
) -> frozenset[int]:
    """The rows of ``passage`` (by position) that ``named`` names: those sharing the most of
    its words that not every row holds (the ``h`` of "4,000 h" is in every row of a table of
    lamp hours, and names none), and of several that tie, those whose labels hold fewest
    other words; when it names none, those that ``otherwise()`` names; none when neither
    does."""
    if not passage.rows:
        return frozenset()
    row_words = [words_of - passage.common for words_of, _ in passage.rows]
    found = _most_shared(named, row_words)
    if not found:
        named = otherwise()
        found = _most_shared(named, row_words)
    if len(found) < 2 or not passage.labels:
        return found
    # a tie: the rows whose labels say least besides what is named ("X1" names the Lumen X1's
    # row, not the Lumen X1 Pro's, whose label has "Pro" too)
    extra = {i: len(passage.labels[i] - named - passage.common) for i in found}
    fewest = min(extra.values())
    return frozenset(i for i, n in extra.items() if n == fewest)


def _most_shared(named: frozenset[str], rows: Sequence[frozenset[str]]) -> frozenset[int]:
    """The rows (by position, each as its words) sharing the most of ``named``; none when no
    row shares any."""
    shared = [len(named & words_of) for words_of in rows]
    most = max(shared, default=0)
    return frozenset(i for i, n in enumerate(shared) if n == most) if most else frozenset()


def _inside_code(fact: str, allowed: Iterable[str]) -> bool:
    """A code's number part alone (``203`` of ``e203``, ``1001`` of ``so1001``) is never
    missing when the code is in the evidence; neither is a code the evidence spells with its
    number only. Its number part is all its last digits: ``12`` is no part of
    ``sku2024012`` ("12 units in stock" is not held by a table naming SKU2024-012)."""
    if not fact.isdigit():
        return False
    for held in allowed:
        if held.isdigit() or not held.endswith(fact):
            continue
        digits = _LAST_DIGITS.search(held)
        if digits is not None and _LEADING_ZEROS.sub("", digits.group()) == fact:
            return True
    return False


_LAST_DIGITS = re.compile(r"\d+$")


def check_grounding(
    answer: str,
    citations: Sequence[Citation],
    *,
    question: str = "",
    tools: Sequence[tuple[str, str]] = (),
    tool_failed: bool = False,
    asked: str = "",
) -> Grounding:
    """Check every sentence of ``answer`` against ``citations`` (see the module docstring).

    Args:
        answer: The answer text, with its ``[n]`` citation markers.
        citations: The run's passages (their ``index`` is what ``[n]`` names).
        question: The user's message: numbers it states may be repeated by the answer.
        tools: The run's other tool results, as (tool name, result text): what a sentence
            no passage supports may rest on.
        tool_failed: A tool called for the question failed and none answered in its place:
            a sentence saying what it would have told, and no passage says, is not supported
            by the passages' naming words alone (:meth:`Evidence.says_nothing_held`).
        asked: The self-contained query a follow-up was rewritten to (setting
            ``query_rewrite``): a sentence naming no row of a table ("4,000 h") is read as
            about the rows it and the question name ("它的光源能用多久？" names none).
    """
    evidence = Evidence.of(citations, question, tools, tool_failed, asked)
    amounts = measured(answer)
    checked = (evidence.check(s, amounts) for s in split_sentences(answer))
    return Grounding(sentences=tuple(s for s in checked if s is not None))
