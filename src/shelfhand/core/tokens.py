"""Counting tokens cheaply, the same way everywhere (chunk sizes, memory windows, budgets)."""

from __future__ import annotations

import re

__all__ = ["RUN_CHARS_PER_TOKEN", "TOKEN_RE", "count_tokens"]

# Kana, CJK ideographs (with extension A and compatibility forms) and Hangul syllables.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
TOKEN_RE = re.compile(rf"([{_CJK}])|([^\W_{_CJK}]+)|(\S)")
RUN_CHARS_PER_TOKEN = 4


def count_tokens(text: str) -> int:
    """Approximate how many tokens a BPE tokenizer would make of ``text``, cheaply.

    Each CJK character (ideograph, kana, Hangul) counts 1; each run of other letters and
    digits counts ``ceil(len / 4)`` (English averages about four characters per BPE token);
    each other non-space character (punctuation, symbols, ``_``) counts 1; whitespace is free.
    The count is additive over whitespace-separated pieces and never grows when pieces are
    concatenated, which is what keeps packed chunks within budget.
    """
    total = 0
    for _cjk, run, _other in TOKEN_RE.findall(text):
        total += (len(run) + RUN_CHARS_PER_TOKEN - 1) // RUN_CHARS_PER_TOKEN if run else 1
    return total
