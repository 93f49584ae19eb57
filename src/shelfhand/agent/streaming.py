"""Streaming text that never shows a tool call (issue 9, point 1).

Small models often write a tool call as *text* (a fenced ```` ```json ```` block, bare
``{"name": ..., "arguments": ...}``, a ``<tool_call>`` tag); the provider recovers it only when
the reply is complete. :class:`CallTextGate` sits between the model's text chunks and the
``TextDelta`` events of one step: text that cannot start a call is passed on at once; from the
first sign of a possible call (``{``, a code fence, ``<tool_call``, ``[{``, a Mistral or Llama
call marker, or the note of a replayed tool result that the model copied) the rest of the step
is held back until the reply is decided — except a code fence of another language
(```` ```python ````), which can hold no call and streams on. Then
:meth:`CallTextGate.finish` releases what the user should see: the held text unchanged when the
reply was plain text, or only the prose around the calls when it held calls.

A chunk that ends with the beginning of a marker (``"``"``, ``"<tool_"``, ``"["``) is held back
too, so a marker split across chunks is never half shown; so is trailing whitespace, until the
text after it shows whether it ends the prose before a call.
"""

from __future__ import annotations

import re
from typing import Literal

from shelfhand.core.events import TextDelta, TextWithdrawn

from .fallbacks import in_chinese
from .guard import REPEATED_NOTE

__all__ = [
    "REPETITION_NOTICE",
    "REPETITION_NOTICE_ZH",
    "STEP_SEPARATOR",
    "CallTextGate",
    "step_deltas",
    "withdrawn_rounds",
]

STEP_SEPARATOR = "\n\n"
"""Streamed between the text of two model steps of one run, so consumers never glue them."""


def step_deltas(piece: str, step_text: list[str], shown: bool) -> tuple[TextDelta, ...]:
    """The events that show ``piece`` of a step's text, added to ``step_text`` (what the step
    showed): its first piece follows :data:`STEP_SEPARATOR` when an earlier step of the run
    showed text (``shown``)."""
    if shown and not step_text:
        step_text += (STEP_SEPARATOR, piece)
        return TextDelta(text=STEP_SEPARATOR), TextDelta(text=piece)
    step_text.append(piece)
    return (TextDelta(text=piece),)


REPETITION_NOTICE = (
    "The reply above repeated itself and was stopped; it is kept up to where the repetition began"
)
"""What :class:`~shelfhand.core.events.TextWithdrawn` says to people when the rounds of a
reply caught in a loop, streamed before the adapter stopped it, are withdrawn."""
REPETITION_NOTICE_ZH = "上面的回复在不断重复，已被停止；保留到开始重复之前的部分"
""":data:`REPETITION_NOTICE` for a question asked in Chinese."""


def withdrawn_rounds(
    step_text: list[str], sent: str, kept: str, question: str = ""
) -> list[TextDelta | TextWithdrawn]:
    """The events that take back a step's streamed rounds when the model's reply was stopped
    in a loop (:data:`~shelfhand.models.base.FINISH_REPETITION`) and keeps ``kept``: the
    rounds after ``kept`` withdrawn, or, when ``kept`` does not begin what the step ``sent``,
    all of the step's text withdrawn and ``kept`` shown again. ``step_text`` (what the step
    showed, the separator first when it has one) becomes what stays shown; the notice is in
    the language ``question`` is asked in."""
    notice = REPETITION_NOTICE_ZH if in_chinese(question) else REPETITION_NOTICE
    shown = "".join(step_text)
    stays = [STEP_SEPARATOR, kept] if step_text[0] == STEP_SEPARATOR else [kept]
    if sent.startswith(kept):
        tail = sent[len(kept) :]
        if not tail:
            return []
        step_text[:] = stays
        return [TextWithdrawn(text=tail, reason="repetition", notice=notice)]
    step_text[:] = [t for t in stays if t]
    withdrawn = TextWithdrawn(text=shown, reason="repetition", notice=notice)
    return [withdrawn, *(TextDelta(text=t) for t in step_text)]


# A reply that copies the note of a replayed result (guard.REPEATED_NOTE) is a copied tool
# result: held back, then told apart as an echo by the run.
_ECHO_MARKER = REPEATED_NOTE[: REPEATED_NOTE.index(";")]
_TRIGGER = re.compile(
    r"\{|```|<tool_call|\[TOOL_CALLS\]|<\|python_tag\|>|\[\s*\{|" + re.escape(_ECHO_MARKER)
)
_MARKERS = ("```", "<tool_call", "[TOOL_CALLS]", "<|python_tag|>", _ECHO_MARKER)
_LONGEST_MARKER = max(len(m) for m in _MARKERS)
_OPEN_BRACKET = re.compile(r"\[\s*")
# A fence whose language line is complete; only these languages may hold a call (as textcalls).
_FENCE_OPEN = re.compile(r"\s*```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n")
_CALL_FENCES = frozenset({"", "json", "json5", "tool_call", "tool_calls", "tool_code"})


_FIRSTS = frozenset(m[0] for m in _MARKERS) | {"["}
"""The characters a marker (or ``_OPEN_BRACKET``) starts with."""


def _partial_marker(text: str) -> int:
    """Length of the longest suffix of ``text`` that may be the start of a marker (only
    suffixes starting with a marker's first character are tried: a piece of plain text costs
    a scan of its last characters, not a comparison per length and marker)."""
    end = len(text)
    for start in range(max(0, end - _LONGEST_MARKER), end):
        if text[start] in _FIRSTS:
            tail = text[start:]
            if any(m.startswith(tail) for m in _MARKERS) or _OPEN_BRACKET.fullmatch(tail):
                return end - start
    return 0


def _may_open_fence(held: str) -> bool:
    """Whether more text could make ``held`` open a code fence (``_FENCE_OPEN``)."""
    start = held.lstrip()
    return "```".startswith(start[:3]) and "\n" not in start


class CallTextGate:
    """Holds back one step's streamed text while it may be a text-encoded tool call.

    Args:
        active: ``False`` passes everything through (no tools were offered, so no reply can
            be a call).
    """

    def __init__(self, *, active: bool) -> None:
        self.active = active
        self._sent: list[str] = []
        self._pending = ""
        # "held": held to the step's end, nothing more to read (its text is decided then)
        self._mode: Literal["text", "hold", "held", "fence"] = "text"

    @property
    def sent(self) -> str:
        """The text released so far in this step."""
        return "".join(self._sent)

    def feed(self, text: str) -> str:
        """Take a chunk; return the part that is safe to show now (maybe empty)."""
        if not self.active:
            self._sent.append(text)
            return text
        if self._mode == "held":
            return ""
        self._pending += text
        out = self._drain()
        if out:
            self._sent.append(out)
        return out

    def _drain(self) -> str:
        out: list[str] = []
        while True:
            buffer = self._pending
            if self._mode == "fence":
                # inside a code fence of another language: never a call, except a tag
                close, tag = buffer.find("```"), buffer.find("<tool_call")
                if tag >= 0 and (close < 0 or tag < close):
                    out.append(buffer[:tag])
                    self._pending, self._mode = buffer[tag:], "hold"
                    return "".join(out)
                if close >= 0:
                    out.append(buffer[: close + 3])
                    self._pending, self._mode = buffer[close + 3 :], "text"
                    continue
                cut = len(buffer) - _partial_marker(buffer)
                out.append(buffer[:cut])
                self._pending = buffer[cut:]
                return "".join(out)
            if self._mode == "hold":
                fence = _FENCE_OPEN.match(buffer)
                if fence is not None and fence.group(1).lower() not in _CALL_FENCES:
                    out.append(fence.group(0))
                    self._pending, self._mode = buffer[fence.end() :], "fence"
                    continue
                if fence is not None or not _may_open_fence(buffer):
                    # a call's fence, or no fence: held to the end, not read again (a held
                    # reply grown piece by piece was copied whole at each piece)
                    self._pending, self._mode = "", "held"
                return "".join(out)
            found = _TRIGGER.search(buffer)
            cut = found.start() if found is not None else len(buffer) - _partial_marker(buffer)
            # Whitespace waits for what follows it: before a call it is not shown at all.
            cut = len(buffer[:cut].rstrip())
            out.append(buffer[:cut])
            self._pending = buffer[cut:]
            if found is None:
                return "".join(out)
            self._mode = "hold"

    def finish(self, visible: str) -> str:
        """The rest of the step to show, given ``visible``: the reply's text once decided
        (with any recovered calls already removed from it)."""
        sent = self.sent
        if visible.startswith(sent):
            rest = visible[len(sent) :]
        else:
            # Recovery strips whitespace around removed calls: compare without it.
            trimmed = sent.rstrip()
            rest = visible[len(trimmed) :].lstrip() if visible.startswith(trimmed) else ""
            if rest and trimmed and not sent.endswith(("\n", " ")):
                rest = "\n" + rest
        self._pending = ""
        self._mode = "text"
        if rest:
            self._sent.append(rest)
        return rest
