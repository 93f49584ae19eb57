"""Does the answer answer the question? Checks that a grounded answer can still fail, each
offline and cheap, used by :class:`~.answer_check.AnswerCheck`:

- :func:`only_labels`: the answer is nothing but the labels the passages were shown with
  (a title, a section heading, ``title › section (source)``): a small model copies the
  evidence's formatting instead of its content;
- :func:`misses_identifier`: the question names an identifier (``SKU2024-011``, ``E-310``)
  that a passage holds, and the answer neither names it nor rests on a passage holding it:
  it answers about something else (the product's description instead of its price row);
- :func:`misses_amount`: the question asks how long or how much (a price, a fee), and the
  answer states no such amount;
- :func:`rests_elsewhere`: a passage holds every word of the question, and the answer rests
  only on passages that, together, hold at most half of them: it answers about something
  near the question ("the C4K has lens shift" for "How do I clean the lens?", beside the
  FAQ entry on cleaning the lens);
- :func:`tells_one_part`: the question is broad ("退货政策是什么？") and the answer rests on
  one of the document's sections that hold it, when the extractive answer quotes one
  sentence of each;
- :func:`in_other_language`: the answer is in the other language than the question's while
  the passages' sentences answer it in the question's;
- :func:`shares_only_names`: the answer holds nothing of the question but its names (the
  product, not what is asked about it); the answer check uses it when the tool that could
  answer failed, or answered about the question while the answer quotes the passages
  (:func:`quotes_beyond_names`);
- :func:`states_nothing_held`: with no passage about the question (the extractive answer's
  measure), an answer stating no number or code the passages hold did not come from them:
  "The Lumen X1 Pro does not sell gaming laptops." rests on a spec sheet that never mentions
  laptops.

Each is a reason to show the passages' own sentences, or "the documents do not cover this",
instead (``fallback_reason`` ``heading_echo``, ``off_topic``, ``unanswered``, ``partial``,
``other_language``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from shelfhand.core.grounding import Grounding
from shelfhand.core.messages import Citation
from shelfhand.knowledge.analysis import (
    SynonymTable,
    chinese_share,
    in_chinese,
    query_identifiers,
)
from shelfhand.knowledge.evidence.citations import label

from .amounts import COUNT, DURATION, NUMBER_WORD, asked_amount
from .extractive import (
    NOT_ASKED,
    OVERVIEW_PASSAGES,
    asked_words,
    compared_passages,
    extractive_answer,
    headed,
    in_language,
    overview_passages,
)
from .grounding_check import (
    MIN_SUPPORT,
    PASSAGE_CACHE,
    facts,
    names_and_rest,
    passage_words,
    without_citations,
    words,
)

__all__ = [
    "holds_identifier",
    "in_other_language",
    "misses_amount",
    "misses_identifier",
    "misses_tool_identifier",
    "only_labels",
    "quotes_beyond_names",
    "rests_elsewhere",
    "shares_only_names",
    "states_nothing_held",
    "tells_one_part",
]

_DIGIT = re.compile(r"\d")
_CODE = re.compile(r"\b[A-Za-z][\w-]*\d[\w-]*|\b\d[\w-]*[A-Za-z][\w-]*")
"""A word holding letters and digits (``X1``, ``E-203``, ``4K``): a name or code."""
_RUN = re.compile(r"[\w-]+")
_LETTER = re.compile(r"[A-Za-z]")


def _without_codes(text: str) -> str:
    """``text`` with its names and codes (:data:`_CODE`) blanked out. :data:`_CODE` is tried
    only on a run of word characters and hyphens holding both a letter and a digit: from
    each of a run's starts it reads to the run's end before it fails, so a hyphenated run
    with no digit (``a-a-a-…``, 5,000 characters) took 0.12 s, and 20,000 took 1.9 s; a run
    holding both is taken whole from its first start, and the matches are the same."""

    def one(run: re.Match[str]) -> str:
        word = run.group()
        if _DIGIT.search(word) is None or _LETTER.search(word) is None:
            return word
        return _CODE.sub(" ", word)

    return _RUN.sub(one, text)


_FREE = re.compile(
    r"\bfree\b|\bno (?:extra )?(?:charge|cost|fee)s?\b|\bat no cost\b|免费|不收费|不收取|无需付费",
    re.IGNORECASE,
)
"""An answer that a price or fee is nothing."""
_MONEY_WORDS = re.compile(
    r"\b(?:hundred|thousand|million)s?\b|[一二两三四五六七八九十百千万]+\s*(?:元|块)",
    re.IGNORECASE,
)
"""A sum written in words ("two thousand", "三千元"); not any number word: "two HDMI inputs"
and the 一 of 一般 state no price."""
_MEASURE = re.compile(
    r"(?<!\d)(?<!\d[,.])\d[\d,.]{0,39}\s*(?:[x×]\s*\d[\d,.]{0,39}|"  # (see amounts._NUM)
    r"(?:[kmg]?hz|ms|sec(?:ond)?s?|s|h|hrs?"
    r"|ansi|lm|lumens?|nits?|[km]?w|watts?|v|volts?|mah|kg|g|lbs?|mm|cm|m|km|inch(?:es)?|in"
    r"|ft|db|[kmgt]b|fps|bits?|units?|pcs|pieces|times|x|°c?|\")(?![A-Za-z])"
    r"|赫兹|毫秒|秒|月|流明|瓦|伏|公斤|千克|克|毫米|厘米|米|英寸|寸|分贝|度|个|台|次|件)",
    re.IGNORECASE,
)
"""A number of some other measure than money and time (``240 Hz``, ``4 ms``, ``3,000 ANSI``,
``3840 × 2160``, ``1.2x``); durations (``20,000 h`` too) are :data:`~.amounts.DURATION`'s."""
_VERSION = re.compile(
    r"\b(?:HDMI|USB|Wi-?Fi|Bluetooth|DisplayPort|PCIe|HDR|Android|iOS|Windows|version|ver\.?)"
    r"\s*\d+(?:\.\d+)*",
    re.IGNORECASE,
)
"""A version after its name (``HDMI 2.0``, ``Wi-Fi 6``, ``version 3.1``): not a price."""
_LABEL_SPLIT = re.compile(r"(?<!\s)\s*(?:›|>)\s*")
_FRAGMENT = re.compile(r"[,，、;；\n()（）]+")
MIN_WORDS_LEFT = 3
"""A part of an answer with fewer content words (and no number), once the labels are taken
out, is filler around them ("The warranty policy for the …")."""


def only_labels(answer: str, citations: Sequence[Citation]) -> bool:
    """Whether ``answer`` is nothing but the passages' labels: their titles, section
    headings, sources or whole ``title › section (source)`` lines ("未拆封商品, 已拆封的商品",
    "The BrightBeam Projector FAQ › Frequently asked questions > … (projector/faq.html)")."""
    left = without_citations(answer).lower()
    if not left.strip():
        return False
    pieces: set[str] = set()
    for c in citations:
        shown = label(c)
        pieces.update((shown, shown.rsplit(" (", 1)[0], c.source, c.title))
        pieces.update(_LABEL_SPLIT.split(c.section))
    named = sorted((p.strip().lower() for p in pieces if len(p.strip()) > 1), key=len)[::-1]
    taken = False
    for piece in named:
        if piece in left:
            left = left.replace(piece, " ")
            taken = True
    longest = len(named[0]) if named else 0
    for fragment in _FRAGMENT.split(left):
        own = words(fragment)
        if not own:
            continue
        if facts(fragment) or len(fragment.strip()) > 2 * longest:
            return False  # a number, or longer than any heading reworded: it says something
        if any(own <= passage_words(p) for p in named):  # a heading, reworded: 已拆封的商品
            taken = True
        elif len(own) >= MIN_WORDS_LEFT:
            return False
    return taken


def _resting(grounding: Grounding | None) -> set[int]:
    """The passages the answer's supported sentences rest on (none without a check)."""
    if grounding is None:
        return set()
    return {s.passage for s in grounding.sentences if s.supported and s.passage is not None}


def holds_identifier(text: str, identifiers: Sequence[str]) -> bool:
    """Whether ``text`` holds one of ``identifiers`` (as :func:`query_identifiers` gives
    them), with or without its hyphens."""
    lowered = text.lower()
    return any(i in lowered or i in lowered.replace("-", "") for i in identifiers)


def misses_identifier(
    question: str, answer: str, grounding: Grounding | None, citations: Sequence[Citation]
) -> bool:
    """Whether the question names an identifier a passage holds while the answer neither
    names it nor rests on (is supported by) a passage holding it."""
    ids = query_identifiers(question)
    if not ids or grounding is None or holds_identifier(answer, ids):
        return False
    holding = {c.index for c in citations if holds_identifier(c.text, ids)}
    if not holding:
        return False  # no passage has it: nothing better to show
    resting = _resting(grounding)
    # an answer too short to check ("The lamp is overheating.") rests on nothing: left alone
    return bool(resting) and not resting & holding


def misses_tool_identifier(
    question: str, answer: str, grounding: Grounding | None, tools: Sequence[tuple[str, str]]
) -> bool:
    """Whether the question names an identifier a tool result holds (``SO-1001`` in the
    order's status) while the answer neither names it nor rests on a result holding it (it
    tells the stock of the product instead): :func:`misses_identifier` for the run's tool
    results (``tools``: tool name, result text)."""
    ids = query_identifiers(question)
    if not ids or grounding is None or holds_identifier(answer, ids):
        return False
    holding = {name for name, text in tools if holds_identifier(text, ids)}
    resting = {s.tool for s in grounding.sentences if s.supported and s.tool}
    return bool(holding) and bool(resting) and not resting & holding


MIN_ASKED = 2
"""The fewest question words for :func:`rests_elsewhere` (one word is a topic, not a
question: any passage holding it is about it)."""
ABOUT_SHARE = 0.6
"""The share of the question's words a passage holding more than :data:`MIN_ASKED` of them
but not all needs to be about the question for :func:`rests_elsewhere`: a question written
from a passage rarely says all of it again ("《战国无双3》是由哪两个公司合作开发的？" and its
passage, "由光荣和ω-force开发", share 5 of its 8 words)."""


_FRAMES = passage_words("policy policies rules process procedure 政策 规定 流程 制度")
"""Words naming the kind of answer asked for, not its topic: "What is your return policy?"
asks about returns. The returns policy's English summary, a whole answer to it, holds
"return" and not "policy" (its title says 政策), while a FAQ entry holds both ("see the
returns policy"): counted, "policy" made the model's answer quoting the summary one resting
on half the question, and it was replaced by the FAQ entry's one sentence."""


def rests_elsewhere(
    question: str,
    grounding: Grounding | None,
    citations: Sequence[Citation],
    synonyms: SynonymTable | None = None,
) -> bool:
    """Whether a passage (with its title and section) holds every word of ``question``, or
    more than :data:`MIN_ASKED` and :data:`ABOUT_SHARE` of them, while the passages the answer
    rests on (its supported sentences), together, hold at most half as many: the answer is
    about something near the question, and a passage about the question itself was there
    (Qwen2.5-Coder-0.5B answered "《战国无双3》是由哪两个公司合作开发的？" with a samurai's
    biography, word for word). An answer resting on nothing is left alone; so is a question
    no passage holds enough of (most questions naming an identifier:
    :func:`misses_identifier` checks those)."""
    resting = _resting(grounding)
    if not resting:
        return False
    asked = asked_words(question, citations, synonyms)
    asked = asked - _FRAMES or asked
    if len(asked) < MIN_ASKED:
        return False
    held = {c.index: asked.intersection(passage_words(headed(c))) for c in citations}
    most = max((len(words_held) for words_held in held.values()), default=0)
    if most < len(asked) and (most <= MIN_ASKED or most < ABOUT_SHARE * len(asked)):
        return False
    covered: set[str] = set()
    for index in resting:
        covered.update(held.get(index, ()))
    # at most half: "The brightness of the Lumen X1 is 3,000 ANSI lumens" rests on a passage
    # without "bright" (2 of the question's 3 words), beside the table row holding all three
    return 2 * len(covered) <= most


def tells_one_part(
    question: str,
    grounding: Grounding | None,
    citations: Sequence[Citation],
    synonyms: SynonymTable | None = None,
) -> bool:
    """Whether ``question`` is broad ("退货政策是什么？": one or two words naming a topic, which
    several sections of one document hold, :func:`~.extractive.overview_passages`) and the
    answer rests on one of those sections at most: Qwen2.5-Coder-0.5B answered it with the
    policy's opening ("退货政策适用于明光官方商城售出的投影仪及配件。申请退货时请提供订单号…"),
    true, and none of its rules (30 days unopened, 7 days opened, refunds, exceptions). Or
    the question compares things the documents give a section each ("Lumen X1 和 Lumen X1
    Pro 有什么区别？", :func:`~.extractive.compared_passages`) and the answer rests on one of
    them alone. An answer resting on nothing is left alone."""
    resting = _resting(grounding)
    if not resting:
        return False
    parts = overview_passages(question, citations, synonyms)
    if len(parts) >= OVERVIEW_PASSAGES:
        return len(resting & parts) <= 1
    # "Lumen X1 和 Lumen X1 Pro 有什么区别？" answered from the X1 Pro's section alone (a table
    # row naming both, or two sections, is an answer of its own)
    named = compared_passages(question, citations)
    return len(named) > 1 and len(resting & named) == 1 and resting <= named


OTHER_LANGUAGE_SHARE = 0.5
"""The share of an answer's letters in Chinese from which a question in English counts as
answered in Chinese (an English answer quoting a Chinese term, "Please关机", is not)."""


def in_other_language(
    question: str,
    answer: str,
    grounding: Grounding | None,
    citations: Sequence[Citation],
    synonyms: SynonymTable | None = None,
) -> bool:
    """Whether ``answer`` is written in the other language than ``question`` (mostly Chinese
    for a question in English, no Chinese at all for one in Chinese) while a passage it rests
    on says it in the question's language too (the extractive answer quotes it, in that
    language alone): Qwen2.5-Coder-0.5B answered "What does error code E-203 mean and how do
    I fix it?" with the bilingual manual's Chinese sentences. An answer from a passage in one
    language stands: for "How long is the warranty?", "整机保修期为 24 个月" from a Chinese
    policy is not replaced by the English sentences of a FAQ entry beside it ("See the
    warranty policy: the period depends on the purchase date.")."""
    zh = in_chinese(question)
    share = chinese_share(without_citations(answer))
    answered_in_other = share == 0 if zh else share >= OTHER_LANGUAGE_SHARE
    if not answered_in_other:
        return False
    resting = _resting(grounding)
    if not resting:
        return False
    extract = extractive_answer(question, citations, synonyms=synonyms)
    return (
        extract is not None
        and set(extract.passages) <= resting
        and all(in_language(sentence, zh) for sentence, _ in extract.sentences)
    )


def misses_amount(question: str, answer: str) -> bool:
    """Whether ``question`` asks how long, how much or how many and ``answer`` states no such
    amount: for "how long", no duration in digits and no number in words; for "how many", no
    count (:data:`~.amounts.COUNT`); for "how much", a price
    or a fee, no sum (``499 CNY``, ``¥3999``), no "free", and no number that could be one:
    a number of another measure (``240 Hz``, ``4 ms``, ``3,000 ANSI lumens``), a version
    (``HDMI 2.0``) or inside a name (``X1``, ``HDR10``) is not a price ("The Lumen X1 Pro
    adds native 4K … 240 Hz gaming mode with 4 ms input lag." does not answer "What is the
    list price?")."""
    kind = asked_amount(question)
    if kind is None:
        return False
    text = without_citations(answer)
    if kind is DURATION:
        return not (NUMBER_WORD.search(text) or kind.search(text))
    if kind is COUNT:  # "类剑齿虎亚科有时亦被分类在鬣齿兽科中" for "有几个属…？" (2001 is a year)
        return not kind.search(text)
    if kind.search(text) or _FREE.search(text) or _MONEY_WORDS.search(text):
        return False
    bare = _without_codes(_MEASURE.sub(" ", DURATION.sub(" ", _VERSION.sub(" ", text))))
    return not _DIGIT.search(bare)


def shares_only_names(question: str, answer: str) -> bool:
    """Whether ``answer`` holds none of ``question``'s words but its names: "The Lumen X1
    (SKU2024-011) is our best-selling home projector …" for "Lumen X1（SKU2024-011）库存还剩多少
    台？" shares the product and nothing of what is asked about it (库存, 剩). ``False`` when
    the question is all names and asking words."""
    asked = words(names_and_rest(question)[1]).difference(NOT_ASKED)
    return bool(asked) and asked.isdisjoint(words(answer))


def quotes_beyond_names(answer: str, citations: Sequence[Citation]) -> bool:
    """Whether the passages of ``citations`` hold most of ``answer``'s words besides its
    names (:data:`~.grounding_check.MIN_SUPPORT` of them): "The Lumen X1 is our
    best-selling home projector …" quotes the product's description; "Yes, the Lumen X1 is
    currently available." names the product the description names, and says what no passage
    does."""
    told = words(names_and_rest(answer)[1])
    if not told:
        return False
    held: set[str] = set()
    for citation in citations:
        held.update(passage_words(citation.text))
    return len(told & held) / len(told) >= MIN_SUPPORT


def states_nothing_held(answer: str, citations: Sequence[Citation]) -> bool:
    """Whether ``answer`` states no number that ``citations`` hold (an answer in another
    language than its passages shares those with them, not words)."""
    said = _numbers(answer)
    return not any(said & _numbers(c.text) for c in citations)


@functools.lru_cache(maxsize=PASSAGE_CACHE)
def _numbers(text: str) -> frozenset[str]:
    """The numbers of ``text`` (a product code such as ``X1`` is shared by any answer that
    names the product, whatever it says about it: it is not a number)."""
    plain = _without_codes(text)
    return frozenset(f for f in facts(plain) if f.replace(".", "").isdigit())
