"""Streaming text that never shows a tool call (issue 9, point 1).

Small models often write a tool call as *text* (a fenced ```` ```json ```` block, bare
``{"name": ..., "arguments": ...}``, a ``<tool_call>`` tag); the provider recovers it only when
the reply is complete. :class:`CallTextGate` sits between the model's text chunks and the
``TextDelta`` events of one step: text that cannot start a call is passed on at once; from the
first sign of a possible call (``{``, a code fence, ``<tool_call``, ``[{``, a Mistral or Llama
call marker) the rest of the step is held back until the reply is decided. Then
:meth:`CallTextGate.finish` releases what the user should see: the held text unchanged when the
reply was plain text, or only the prose around the calls when it held calls.

A chunk that ends with the beginning of a marker (``"``"``, ``"<tool_"``, ``"["``) is held back
too, so a marker split across chunks is never half shown; so is trailing whitespace, until the
text after it shows whether it ends the prose before a call.
"""

from __future__ import annotations

import re

__all__ = ["STEP_SEPARATOR", "CallTextGate"]

STEP_SEPARATOR = "\n\n"
"""Streamed between the text of two model steps of one run, so consumers never glue them."""

_TRIGGER = re.compile(r"\{|```|<tool_call|\[TOOL_CALLS\]|<\|python_tag\|>|\[\s*\{")
_MARKERS = ("```", "<tool_call", "[TOOL_CALLS]", "<|python_tag|>")
_LONGEST_MARKER = max(len(m) for m in _MARKERS)
_OPEN_BRACKET = re.compile(r"\[\s*")


def _partial_marker(text: str) -> int:
    """Length of the longest suffix of ``text`` that may be the start of a marker."""
    for size in range(min(len(text), _LONGEST_MARKER), 0, -1):
        tail = text[-size:]
        if any(m.startswith(tail) for m in _MARKERS) or _OPEN_BRACKET.fullmatch(tail):
            return size
    return 0


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
        self._holding = False

    @property
    def sent(self) -> str:
        """The text released so far in this step."""
        return "".join(self._sent)

    def feed(self, text: str) -> str:
        """Take a chunk; return the part that is safe to show now (maybe empty)."""
        if not self.active:
            self._sent.append(text)
            return text
        if self._holding:
            self._pending += text
            return ""
        buffer = self._pending + text
        found = _TRIGGER.search(buffer)
        if found is not None:
            cut = found.start()
            self._holding = True
        else:
            cut = len(buffer) - _partial_marker(buffer)
        # Whitespace waits for what follows it: before a call it is not shown at all.
        cut = len(buffer[:cut].rstrip())
        out, self._pending = buffer[:cut], buffer[cut:]
        if out:
            self._sent.append(out)
        return out

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
        self._holding = False
        if rest:
            self._sent.append(rest)
        return rest
