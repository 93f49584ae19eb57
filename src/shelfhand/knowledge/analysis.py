"""Text analysis for the keyword index: the same tokens at index time and query time.

* Text is NFKC-normalised (full-width ``ＳＫＵ`` → ``SKU``) and lowercased.
* English words are stemmed (Snowball english via PyStemmer); stopwords are dropped.
* Runs of Chinese ideographs are segmented with jieba ``cut_for_search`` (it adds the shorter
  words inside long ones, ``保修期`` → ``保修``, ``保修期``) for documents and queries alike: on
  CMRC2018 (848 passages, 3,219 questions) BM25 recall@5 was 0.9950 with it for queries against
  0.9947 with plain ``cut``.
* Identifiers — code-like tokens with a digit (``E-203``, ``SKU2024-011``, ``LMP-X1``, ``v1.2``,
  ``2.0.1``, ``400-800-1234``) — are indexed whole and, when joined by ``-``, ``_`` or ``#``,
  also separator-free (``e203``), so ``E203`` and ``E-203`` meet. Of their parts only the
  meaningful ones are indexed (``sku2024`` of ``SKU2024-011``, ``lmp`` of ``LMP-X1``, a
  four-digit year of a date), never single letters or short digit runs such as the ``e`` and
  ``888`` of ``E-888`` that would match every error code. A query keeps its identifiers whole (and
  separator-free), without parts. Hyphenated words (``Wi-Fi``) and compounds holding an English
  word (``Cas9-induced``, ``interleukin-2``) are not identifiers: they are indexed and searched
  by all their words, and whole when they hold a digit, as before.

The index is fed these tokens pre-split with whitespace, so the search engine never applies a
second, different analysis.

A query word that no document holds is searched as its synonym that documents do hold
(:func:`with_synonyms`): words that documents write differently from how people ask
(``开封`` for ``拆封``: jieba reads 开封 as the city, and no document about opened goods holds
it). Only the query changes: the index stays as it is. :data:`SYNONYMS` is the built-in
list; the ``synonyms`` setting adds a workspace's own groups.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import Stemmer

__all__ = [
    "SYNONYMS",
    "SynonymTable",
    "chinese_only",
    "chinese_share",
    "glued_candidates",
    "identifier_tokens",
    "identifiers_and_spans",
    "in_chinese",
    "latin_names",
    "query_identifiers",
    "query_words",
    "split_version",
    "split_words",
    "synonym_candidates",
    "synonym_table",
    "tokenize_for_index",
    "tokenize_for_matching",
    "tokenize_query",
    "unglued",
    "unknown_pairs",
    "unknown_words",
    "with_synonyms",
]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A "word character" that is not CJK and not underscore.
_W = rf"[^\W_{_CJK}]"
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<code>{_W}+(?:[-_./:#]{_W}+)+)|(?P<word>{_W}+)")
_HAS_DIGIT = re.compile(r"\d")
_HAS_LETTER = re.compile(r"[^\W\d_]")
_SEPARATORS = re.compile(r"[-_./:#]")
# Only identifiers joined by - _ # get a separator-free form: ``3.5``, ``2.0.1`` or ``v1.2`` would
# turn into ``35``, ``201`` or ``v12`` and meet unrelated numbers and codes.
_JOINABLE = re.compile(r"[^./:]+")
# Plain numbers written with dots, slashes or colons (3.5, 2.0.1, 1/2, 10:30) are not
# identifiers of a query.
_NUMBER_LIKE = re.compile(r"\d+(?:[./:]\d+)+")
# A part this long made of letters only is an English word: ``cas9-induced``, ``interleukin-2``
# and ``covid-19`` are compound words, not codes, and keep all their parts (SciFact's queries
# are full of them).
_WORD_PART = 5

_EN_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is
    it its itself just me more most my myself no nor not of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves
    """.split()  # noqa: SIM905
)
# Function words that carry no topic; IDF would mostly discount them, dropping them keeps
# postings short and queries fast.
_ZH_WORDS = (
    "的 了 和 是 在 有 也 就 都 而 及 与 着 或 一个 没有 我们 你们 他们 她们 它们 这 那 这个 那个 之 其 为 以 于 吗 呢 吧 啊 呀 么 什么 怎么 怎样 如何 "
    "哪 哪个 哪些 多少 几 谁 请问 请 被 把 让 从 对 向 得 地"
)
_ZH_STOPWORDS = frozenset(_ZH_WORDS.split())

_stemmer_local = threading.local()
_jieba_lock = threading.Lock()
_jieba: Any = None


def _stem_words(words: list[str]) -> list[str]:
    # PyStemmer objects are not thread-safe; one per thread.
    stemmer = getattr(_stemmer_local, "stemmer", None)
    if stemmer is None:
        stemmer = Stemmer.Stemmer("english")
        _stemmer_local.stemmer = stemmer
    result: list[str] = stemmer.stemWords(words)
    return result


def _jieba_module() -> Any:
    """Import and initialise jieba once, quietly (it logs its dictionary load to stderr)."""
    global _jieba
    if _jieba is None:
        with _jieba_lock:
            if _jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                logging.getLogger("jieba").setLevel(logging.WARNING)
                jieba.initialize()
                _jieba = jieba
    return _jieba


def _is_identifier_word(word: str) -> bool:
    """A single word mixing letters and digits (``e888``, ``sku2024``, ``hdr10``), 3+ long."""
    return len(word) >= 3 and bool(_HAS_DIGIT.search(word)) and bool(_HAS_LETTER.search(word))


def _is_identifier_code(parts: list[str]) -> bool:
    """Whether a code's parts make an identifier: a digit somewhere and no English word."""
    return any(_HAS_DIGIT.search(p) for p in parts) and not any(
        len(p) >= _WORD_PART and p.isalpha() for p in parts
    )


def _meaningful_part(part: str) -> bool:
    """Whether a part of an identifier is worth indexing on its own: a word of 3+ characters or
    a run of 4+ digits (a year, a long number); never ``e`` or ``888``."""
    if part.isdigit():
        return len(part) >= 4
    return len(part) >= 3


def _identifier_forms(code: str) -> list[str]:
    """The whole identifier and its separator-free form (when that is safe to join)."""
    forms = [code]
    if _JOINABLE.fullmatch(code):
        joined = _SEPARATORS.sub("", code)
        if joined != code:
            forms.append(joined)
    return forms


_Cut = Callable[[str], tuple[Iterable[str], Sequence[str]]]
"""How a run of Chinese characters is cut: its words, and the character pairs of the
stretches jieba's dictionary has no word for (:func:`_index_cut`; none for the other cuts)."""


def _analyze(text: str, cut: _Cut, *, query: bool) -> list[str]:
    tokens, pairs = _analyze_parts(text, cut, query=query)
    return tokens + pairs if pairs else tokens


def _analyze_parts(text: str, cut: _Cut, *, query: bool) -> tuple[list[str], list[str]]:
    """The tokens of ``text``, its Chinese runs cut by ``cut``, and the character pairs
    ``cut`` gives that it did not give as words (:func:`unknown_pairs`)."""
    text = unicodedata.normalize("NFKC", text).lower()
    tokens: list[str] = []
    pairs: list[str] = []  # the character pairs of words jieba lacks (:func:`unknown_pairs`)
    to_stem: list[int] = []  # positions in ``tokens`` holding plain words to stem

    def add_word(word: str) -> None:
        if word in _EN_STOPWORDS:
            return
        if word.isascii() and word.isalpha():
            to_stem.append(len(tokens))
        tokens.append(word)

    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup
        value = match.group()
        if kind == "cjk":
            words, own_pairs = cut(value)
            kept = [w for w in words if w not in _ZH_STOPWORDS]
            if own_pairs:
                pairs += [p for p in own_pairs if p not in kept]
            if query:
                kept = _not_asking(kept)
            tokens += kept
        elif kind == "code":
            parts = _SEPARATORS.split(value)
            if _is_identifier_code(parts):
                tokens.extend(_identifier_forms(value))
                if not query:
                    for part in parts:
                        if _meaningful_part(part):
                            add_word(part)
            else:  # a hyphenated word (wi-fi) or a compound (cas9-induced): whole and its words
                if _HAS_DIGIT.search(value):
                    tokens.append(value)
                for part in parts:
                    add_word(part)
        else:
            add_word(value)
    if to_stem:
        stemmed = _stem_words([tokens[i] for i in to_stem])
        for i, s in zip(to_stem, stemmed, strict=True):
            tokens[i] = s
    return tokens, pairs


_ASKING_WORDS = (
    "为什么 为何 哪一年 哪一个 哪一位 哪一种 哪几个 哪几 哪里 哪儿 哪位 哪种 哪年 什么样 什么时候 "
    "怎么样 多久 多长 多长时间"
)
_ASKING = frozenset(_ASKING_WORDS.split())
"""Chinese words that ask (why, which year, where, how long) and that the stopwords, single
words, do not cover: a passage answers "莱索托哪一年独立？" with "1966 年", never with 哪一年.
A query searched them (and 一年, which the search mode finds inside 哪一年), and they counted
against every hit's relevance: in a workspace of one CMRC passage, where the words a passage
holds weigh little beside those it lacks, the question found nothing. Dropped from queries
only (:func:`_not_asking`)."""


def _not_asking(cut: list[str]) -> list[str]:
    """A query run's words without those of :data:`_ASKING` and the words the search mode
    found inside one (they come right before it: 一年, 哪一年)."""
    out: list[str] = []
    for word in cut:
        if word in _ASKING:
            while out and out[-1] in word:
                out.pop()
            continue
        out.append(word)
    return out


def _pairs_of(words: Iterable[str]) -> list[str]:
    """The character pairs of each stretch of one-character ``words`` (jieba's dictionary
    cut), stopwords aside."""
    return [
        stretch[i : i + 2]
        for stretch in _single_character_runs(words, lambda w: w not in _ZH_STOPWORDS)
        for i in range(len(stretch) - 1)
    ]


def _index_cut(run: str) -> tuple[Iterable[str], list[str]]:
    """:func:`_segment_for_index` of ``run`` and the pairs of it :func:`unknown_pairs`
    gives, from one reading of jieba's dictionary: its search-mode cut
    (``cut_for_search(run, HMM=True)``) walks the route its dictionary gives and hands each
    stretch of one-character words to the HMM; the same stretches, before the HMM, are what
    the pairs are made of. Asking
    jieba for both cuts read the dictionary twice, and the analysis of CMRC's passages ran
    at 158,000 characters a second instead of 248,000. The same words as jieba's, in the
    same order (``tests/knowledge/test_unknown_pairs.py`` compares them over the samples)."""
    if len(run) == 1 or len(run) > _HMM_RUN_CHARS:
        return _segment_for_index(run), []
    jieba = _jieba_module()
    tokenizer, han = jieba.dt, jieba.re_han_default
    freq: dict[str, int] = tokenizer.FREQ
    words: list[str] = []  # the accurate-mode cut, with the HMM's guesses
    plain: list[str] = []  # the dictionary's cut alone
    for block in han.split(run):
        if not block:
            continue
        if not han.match(block):  # (a character outside jieba's range: one by one, as it does)
            words += block
            plain += block
            continue
        route: dict[int, tuple[float, int]] = {}
        tokenizer.calc(block, tokenizer.get_DAG(block), route)
        at, stretch = 0, ""
        while at < len(block):
            end = route[at][1] + 1
            word = block[at:end]
            plain.append(word)
            if end - at == 1:
                stretch += word
            else:
                if stretch:
                    words += _guessed(jieba, stretch, freq)
                    stretch = ""
                words.append(word)
            at = end
        if stretch:
            words += _guessed(jieba, stretch, freq)
    return [g for w in words for g in _with_grams(w, freq)], _pairs_of(plain)


def _guessed(jieba: Any, stretch: str, freq: dict[str, int]) -> list[str]:
    """A stretch of one-character words as jieba's accurate cut gives it: the HMM's guess
    unless the dictionary holds it whole."""
    if len(stretch) == 1:
        return [stretch]
    if not freq.get(stretch):
        return list(jieba.finalseg.cut(stretch))
    return list(stretch)


def _with_grams(word: str, freq: dict[str, int]) -> list[str]:
    """``word`` after the dictionary words of two and three characters inside it (jieba's
    search mode)."""
    out: list[str] = []
    if len(word) > 2:
        out += [word[i : i + 2] for i in range(len(word) - 1) if freq.get(word[i : i + 2])]
    if len(word) > 3:
        out += [word[i : i + 3] for i in range(len(word) - 2) if freq.get(word[i : i + 3])]
    out.append(word)
    return out


_HMM_RUN_CHARS = 500
"""The longest run of Chinese characters jieba's HMM reads at once; a longer one is read in
pieces this long. Its Viterbi pass copies the path so far at every character, quadratic in a
run of characters its dictionary lacks: 32,000 of them, a query the service accepts, took
2.4 s; a document's such run (under the word limit: Chinese has none) minutes. Real text
breaks runs with punctuation long before (the longest run in CMRC 2018's 10,000 passages is
55 characters)."""


def _segment_for_index(run: str) -> Iterable[str]:
    if len(run) == 1:
        return (run,)
    cut = _jieba_module().cut_for_search
    if len(run) <= _HMM_RUN_CHARS:
        result: Iterable[str] = cut(run, HMM=True)
        return result
    return (
        word
        for start in range(0, len(run), _HMM_RUN_CHARS)
        for word in cut(run[start : start + _HMM_RUN_CHARS], HMM=True)
    )


def _query_cut(run: str) -> tuple[Iterable[str], Sequence[str]]:
    """:func:`_segment_for_index` of ``run``, without pairs (:func:`tokenize_query`)."""
    return _segment_for_index(run), ()


def tokenize_for_index(text: str) -> list[str]:
    """Tokens to index for ``text`` (stemmed English, jieba search-mode Chinese, identifiers
    whole, separator-free and by their meaningful parts)."""
    return _analyze(text, _index_cut, query=False)


def _matching_cut(run: str) -> tuple[Iterable[str], Sequence[str]]:
    """jieba's search-mode cut of ``run`` from its dictionary alone (no HMM), without pairs."""
    if len(run) == 1:
        return (run,), ()
    return _jieba_module().cut_for_search(run, HMM=False), ()


def tokenize_for_matching(text: str) -> list[str]:
    """Tokens for comparing two texts (an answer's sentence with a passage): the analysis of
    :func:`tokenize_for_index` with jieba's dictionary words only (no HMM guesses at unknown
    words, which split into characters instead): about three times faster, and the same for
    both texts compared. Not for the index."""
    return _analyze(text, _matching_cut, query=False)


def chinese_share(text: str) -> float:
    """The share of ``text``'s letters that are Chinese characters (0 for no letters), counted
    by regex in C: a character loop in Python was half of ingest's first phase on big files."""
    letters = len(_NOT_LETTERS.sub("", text))
    return len(_CJK_CHAR.findall(text)) / letters if letters else 0.0


MONTH_NUMBERS: dict[str, int] = {
    name: number
    for number, names in enumerate(
        (
            ("jan", "january"),
            ("feb", "february"),
            ("mar", "march"),
            ("apr", "april"),
            ("may",),
            ("jun", "june"),
            ("jul", "july"),
            ("aug", "august"),
            ("sep", "sept", "september"),
            ("oct", "october"),
            ("nov", "november"),
            ("dec", "december"),
        ),
        start=1,
    )
    for name in names
}
"""English month names and their abbreviations, lower-case, to the month's number (the
dates of the answer check and of the conflict notes)."""
MONTH_PATTERN = "(?:" + "|".join(sorted(MONTH_NUMBERS, key=len, reverse=True)) + ")"
""":data:`MONTH_NUMBERS`' names as a regex alternation, longest first (match case-blind)."""
VERSION_MARKERS = (
    re.compile(r"[（(\[【]?(?<!\s)\s*第\s*(\d+)\s*版\s*[)）\]】]?"),
    re.compile(
        r"(?i)(?<![\s_\-(（])[\s_\-(（]*\b(?:version|ver\.?|rev\.?|revision|v)\s*(\d+(?:\.\d+)*)\b[)）]?"
    ),
)
"""A version marker in a title or file name, its number the first group: ``（第 2 版）``,
`` v2``, ``_rev3``, `` (version 2.1)``, with the separator before it (the versions of a passage
and the conflict notes' "newer" read the same markers). Each is tried from a whitespace or
separator run's start only: from each of its characters, a title of 100,000 spaces was read
quadratically."""


def split_version(text: str) -> tuple[tuple[int, ...], str] | None:
    """The version a title or file name names (:data:`VERSION_MARKERS`) and the name without
    its marker: ``"保修政策（第 2 版）"`` → ``((2,), "保修政策")``; ``None`` when it names none."""
    for pattern in VERSION_MARKERS:
        found = pattern.search(text)
        if found:
            base = (text[: found.start()] + text[found.end() :]).strip(" -_")
            return tuple(int(p) for p in found.group(1).split(".")), base
    return None


def in_chinese(text: str) -> bool:
    """Whether ``text`` (a question) is in Chinese: Chinese characters make at least a third
    of its letters ("E-203 是什么故障？" is; "Is 年假 paid?" is not), not counting the letters
    of the names it holds (a Latin word after the first that is capitalised or holds a
    digit: "Lumen X1 Pro 支持 HDR 吗？" asks in Chinese about a product named in English)."""
    share = chinese_share(text)
    if share >= 1 / 3 or share == 0:
        return share > 0
    names = sum(len(_NOT_LETTERS.sub("", text[a:b])) for a, b in latin_names(text))
    if not names:
        return False
    letters = len(_NOT_LETTERS.sub("", text)) - names
    return len(_CJK_CHAR.findall(text)) / letters >= 1 / 3


_LATIN_NAME = re.compile(r"(?<![A-Za-z0-9])(?:[A-Z]|[A-Za-z]+(?=\d))[A-Za-z0-9-]*")


def latin_names(text: str, *, first: bool = False) -> list[tuple[int, int]]:
    """Where the Latin words of ``text`` that name something are, as (start, end): those
    capitalised or holding a digit (``Lumen``, ``X1``, ``HDR10``, ``sku2024-011``). The
    text's first word only with ``first``: in English a sentence's first word is capitalised
    as the sentence's (a Chinese sentence has no such capital)."""
    return [m.span() for m in _LATIN_NAME.finditer(text, 0 if first else 1)]


_CJK_CHAR = re.compile(f"[{_CJK}]")
_NOT_LETTERS = re.compile(r"[\W\d_]+")


def holds_chinese(text: str, end: int | None = None) -> bool:
    """Whether ``text`` (its first ``end`` characters) holds a Chinese character: a search
    that stops at the first, where :func:`chinese_share` reads every character."""
    return _CJK_CHAR.search(text, 0, len(text) if end is None else end) is not None


def chinese_only(text: str) -> bool:
    """Whether ``text`` is all Chinese characters (and not empty)."""
    return _CJK_WORD.fullmatch(text) is not None


_CJK_WORD = re.compile(f"[{_CJK}]+")


def _single_character_runs(words: Iterable[str], counts: Callable[[str], bool]) -> list[str]:
    """Each run of two or more consecutive one-character ``words`` that ``counts``, joined."""
    runs: list[str] = []
    run: list[str] = []
    for word in [*words, ""]:
        if len(word) == 1 and counts(word):
            run.append(word)
            continue
        if len(run) > 1:
            runs.append("".join(run))
        run = []
    return runs


def unknown_words(text: str, *, dropped: AbstractSet[str] = frozenset()) -> list[str]:
    """The Chinese words of ``text`` that jieba's dictionary lacks, which matching cuts into
    characters (``年假`` → ``年``, ``假``; ``工牌`` → ``工``, ``牌``): each run of two or more
    single-character words, not counting stopwords and ``dropped`` (words that only ask),
    joined again. A text holding ``年`` and ``假`` apart ("2025 年", "假期") does not hold
    ``年假``: a caller compares such a word as a whole (``年假`` in the text)."""
    found: list[str] = []
    normalised = unicodedata.normalize("NFKC", text)
    for match in _CJK_RUN.finditer(normalised):
        found += _single_character_runs(
            _jieba_module().lcut(match.group(), HMM=False),
            lambda word: word not in _ZH_STOPWORDS and word not in dropped,
        )
    return found


_CJK_RUN = re.compile(f"[{_CJK}]{{2,}}")


def split_words(tokens: Sequence[str], query: str) -> tuple[str, ...]:
    """The words of ``query`` that its analysis (``tokens``, :func:`tokenize_query`) cut into
    single characters because jieba lacks them: each run of two or more one-character
    Chinese tokens that ``query`` holds together (``年假`` → ``年``, ``假``). A passage that
    holds only ``年`` ("2025 年") is not about 年假; the search checks such words whole."""
    runs = _single_character_runs(tokens, chinese_only)
    if not runs:
        return ()
    held = unicodedata.normalize("NFKC", query)
    return tuple(dict.fromkeys(r for r in runs if r in held))


def unknown_pairs(text: str) -> list[str]:
    """The character pairs of each stretch of ``text`` that jieba's dictionary cuts into
    single characters (a word it lacks: 大促, 发版, 封网), each once: 大促, 促封, 封网, 网期 for
    "大促封网期", and "大促期间能发版吗？" → ``大促``, ``能发``, ``发版``. The search-mode cut
    guesses such words with its HMM, and guesses them differently in different sentences:
    "日为大促封网期" is cut 日为/大/促封/网期, and "大促期间" 大促/期间, so the question's 大促
    never met the document's. The index adds these pairs, cut the same way whatever the
    context (the bigrams Lucene's CJK analysis indexes, here only where the dictionary has no
    word), after its other tokens (so the runs of one-character tokens :func:`split_words`
    reads stay whole), a pair the cut already gave as a word not again. A search adds those
    of its own the index holds to the query's tokens (:func:`query_words`): a pair no chunk
    holds (``能发``, or any pair in an index built before the pairs were) is another reading
    of characters the query already searches, not a word the hits lack. A run longer than
    :data:`_HMM_RUN_CHARS` (hostile: the HMM reads it in pieces) gives none."""
    normalised = unicodedata.normalize("NFKC", text).lower()
    return list(
        dict.fromkeys(p for m in _CJK_RUN.finditer(normalised) for p in _index_cut(m.group())[1])
    )


def query_words(text: str) -> tuple[list[str], list[str]]:
    """:func:`tokenize_query` of ``text`` and its :func:`unknown_pairs` that are not tokens
    already, from one analysis (one walk of jieba's dictionary a run)."""
    tokens, pairs = _analyze_parts(text, _index_cut, query=True)
    return tokens, [p for p in dict.fromkeys(pairs) if p not in tokens]


def tokenize_query(text: str) -> list[str]:
    """Tokens to search for ``text``: the analysis of :func:`tokenize_for_index`, except that
    identifiers are searched whole (and separator-free), never by their parts."""
    return _analyze(text, _query_cut, query=True)


def identifier_tokens(text: str) -> list[str]:
    """The identifiers in ``text`` as index tokens, in order and repeated as often as they
    occur: ``"What is error E-888?"`` → ``["e-888", "e888"]``; ``"E888"`` → ``["e888"]``.
    Identifiers are codes with a digit (``E-888``, ``SKU2024-011``, ``v1.2``, ``400-800-1234``)
    and words mixing letters and digits, three characters or longer (``E888``, ``HDR10``); plain
    numbers (``3.5``, ``2025``) and words (``projector``) are not."""
    return identifiers_and_spans(unicodedata.normalize("NFKC", text).lower(), lowered=True)[0]


def identifiers_and_spans(
    text: str, *, lowered: bool = False
) -> tuple[list[str], list[tuple[int, int]]]:
    """:func:`identifier_tokens` of ``text`` (already NFKC-normalised; ``lowered``: and
    lower-cased, which spares lower-casing each token), and where those holding a letter are
    (``E-203``, ``SKU2024-012``, ``HDR10``, ``9th``; not the all-digit codes: dates, phone
    numbers), as (start, end), in one pass."""
    found: list[str] = []
    spans: list[tuple[int, int]] = []
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup
        if kind == "cjk":
            continue
        value = match.group() if lowered else match.group().lower()
        if kind == "code":
            if _is_identifier_code(_SEPARATORS.split(value)) and not _NUMBER_LIKE.fullmatch(value):
                found.extend(_identifier_forms(value))
                if _HAS_LETTER.search(value):
                    spans.append(match.span())
        elif _is_identifier_word(value):
            found.append(value)
            spans.append(match.span())
    return found, spans


def query_identifiers(text: str) -> list[str]:
    """The distinct :func:`identifier_tokens` of a query: a passage whose text holds one of
    them matches the query exactly."""
    return list(dict.fromkeys(identifier_tokens(text)))


SYNONYMS: tuple[tuple[str, ...], ...] = (("开封", "拆封"),)
"""Groups of words that mean the same in questions about products and orders and are written
differently in documents. Kept short on purpose: a query holding a word of a group costs one
more look-up of document frequencies (workspaces add their own, the ``synonyms`` setting)."""

SynonymTable = dict[str, tuple[str, ...]]
"""A query token → the tokens it adds (:func:`synonym_table`)."""


def synonym_table(groups: Iterable[Iterable[str]] = SYNONYMS) -> SynonymTable:
    """The expansions of ``groups`` in the index's own tokens: each word analysed as a query is
    (``Refunds`` → ``refund``); a word that analyses to one token adds the tokens of the other
    words of its groups."""
    table: dict[str, list[str]] = {}
    for group in groups:
        analysed = [tokenize_query(word) for word in group]
        for i, tokens in enumerate(analysed):
            if len(tokens) != 1:
                continue  # a phrase is added by its words, never looked up as one token
            added = table.setdefault(tokens[0], [])
            for j, others in enumerate(analysed):
                if j != i:
                    added.extend(t for t in others if t != tokens[0] and t not in added)
    return {word: tuple(added) for word, added in table.items() if added}


def synonym_candidates(tokens: Iterable[str], table: SynonymTable) -> list[str]:
    """The tokens of a query that have synonyms, and those synonyms (each once): what
    :func:`with_synonyms` needs the document frequencies of."""
    found: list[str] = []
    for token in tokens:
        if token in table:
            found.extend((token, *table[token]))
    return list(dict.fromkeys(found))


def glued_candidates(tokens: Iterable[str]) -> list[str]:
    """The Chinese tokens of a query of three characters or more, and each one's beginnings
    and ends of two characters or more (each once): what :func:`unglued` needs the document
    frequencies of."""
    found: list[str] = []
    for token in tokens:
        if len(token) >= _GLUED_MIN and chinese_only(token):
            found.append(token)
            found.extend(token[:n] for n in range(len(token) - 1, 1, -1))
            found.extend(token[-n:] for n in range(len(token) - 1, 1, -1))
    return list(dict.fromkeys(found))


def unglued(tokens: list[str], doc_freq: Mapping[str, int]) -> list[str]:
    """``tokens`` with each Chinese word that no document holds (``doc_freq`` 0) and that
    begins or ends with a word documents hold replaced by that word, and by the rest when
    documents hold it too.

    jieba's HMM guesses at words it does not know from the characters around them, and in a
    short question a name often takes the next character along: "尚恩有什么爱好？" gives
    ``尚恩有``, "苏博为什么改名成苏镜宇？" ``成苏镜宇``, where the documents hold ``尚恩`` and
    ``苏镜宇``. Searched as guessed, the name finds nothing and counts against every hit's
    relevance; the longest beginning (else end) the documents hold is searched instead
    (``尚恩``; ``苏镜宇``; ``公司总部`` → ``公司``, ``总部``), unless the query already
    searches it (jieba's search mode gives ``一年`` beside ``哪一年``)."""
    out: list[str] = []
    for token in tokens:
        if len(token) >= _GLUED_MIN and token in doc_freq and not doc_freq[token]:
            parts = _known_parts(token, doc_freq)
            if parts:  # (a part the query already searches is not searched twice)
                out.extend(part for part in parts if part not in tokens)
                continue
        out.append(token)
    return out


_GLUED_MIN = 3
"""The shortest guessed word that is looked into: two characters are a word or two single
characters, which the search already holds as they are."""


def _known_parts(token: str, doc_freq: Mapping[str, int]) -> list[str]:
    for n in range(len(token) - 1, 1, -1):
        head, rest = token[:n], token[n:]
        if doc_freq.get(head, 0):
            return [head, rest] if len(rest) > 1 and doc_freq.get(rest, 0) else [head]
    for n in range(len(token) - 1, 1, -1):
        rest, tail = token[:-n], token[-n:]
        if doc_freq.get(tail, 0):
            return [rest, tail] if len(rest) > 1 and doc_freq.get(rest, 0) else [tail]
    return []


def with_synonyms(tokens: list[str], table: SynonymTable, doc_freq: Mapping[str, int]) -> list[str]:
    """``tokens`` with each word no document holds (``doc_freq`` 0) replaced by its synonym
    that most documents hold, if any does; a word the documents hold stays as it is.

    One token per word, not the word and its synonyms: a query's relevance is measured
    against its words' weights, and a synonym no document holds would count against every
    hit (so would the same idea counted twice)."""
    out: list[str] = []
    for token in tokens:
        if not doc_freq.get(token, 0) and token in table:
            best = max(table[token], key=lambda s: doc_freq.get(s, 0))
            if doc_freq.get(best, 0) > 0:
                token = best
        if token not in out:
            out.append(token)
    return out
