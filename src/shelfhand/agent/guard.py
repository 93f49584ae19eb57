"""The tool-call loop guard of one run (issue 9, point 6).

Small models repeat themselves: the same rejected call again and again until ``max_iters``, or
the same successful lookup several times. :class:`CallGuard` remembers, per run, every call by
its name and canonical arguments:

* a call that already **succeeded** in this run is answered from that earlier result, with a
  note, instead of running the tool again (the group switch ``use_tool_group`` is exempt: its
  effect is the point); a traced run records it as an ``execute_tool`` span with decision
  ``replayed`` (:func:`~.spans.replayed_call`). Answered so **twice**, asked again, the run
  ends with what it found (the 0.5B model sent one search eight times in a row, each a model
  call of seconds, its result unchanged);
* a call that **failed twice with the same error** gets a note telling the model to stop
  repeating it; asked a **third** time, the run ends with an honest answer (the call is not run
  again).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from shelfhand.core.messages import ToolCallBlock, ToolResultBlock
from shelfhand.tools.audit import canonical_json
from shelfhand.tools.toolkit import META_TOOL_NAME

from .grounding import RETRIEVE_TOOL
from .spans import replayed_call

__all__ = ["FAILURES_BEFORE_STOP", "REPEATED_NOTE", "REPLAYS_BEFORE_STOP", "CallGuard", "Repeated"]

FAILURES_BEFORE_STOP = 2
"""Identical failures after which the model is told to stop; the next identical call ends the
run."""
REPLAYS_BEFORE_STOP = 2
"""Times a successful call is answered from its earlier result; the next identical call ends
the run."""

REPEATED_NOTE = "[The same call already succeeded earlier in this run; this is that result.]\n"
"""Put before a replayed result. (After it, the 0.5B model copied the result as its answer in
5 of the first 6 native-mode cases, against 1 of 20 with the note first.) A model that copies
the note is held back by the streaming gate and told apart as an echo
(:func:`shelfhand.agent.fallbacks.echoed_result`)."""
STOP_NOTE = (
    "\n\nThis exact call has now failed {n} times with the same error. Do not call it again "
    "with the same arguments: change the arguments, use another tool, or answer with what you "
    "have."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Repeated:
    """A call the model kept sending: failing with the same error (``failures``), or already
    answered (``replays``: its earlier result given that many times)."""

    call: ToolCallBlock
    error: str = ""
    """The error it failed with, each time ("" for a call that succeeded)."""
    failures: int = 0
    replays: int = 0


@dataclass(slots=True)
class _Seen:
    """One distinct call (name + arguments) of the run, and how it went."""

    arguments: str
    canonical: str | None = None
    result: ToolResultBlock | None = None
    replays: int = 0
    """Times ``result`` was given again."""
    failures: dict[str, int] = field(default_factory=dict)

    def same_arguments(self, canonical: str) -> bool:
        if self.canonical is None:
            self.canonical = canonical_arguments(self.arguments)
        return self.canonical == canonical


def canonical_arguments(arguments: str) -> str:
    """Canonical JSON of the arguments (the stripped text when it is not JSON)."""
    try:
        return canonical_json(json.loads(arguments)) if arguments.strip() else "{}"
    except json.JSONDecodeError:
        return arguments.strip()


class CallGuard:
    """Remembers the calls of one run (see the module doc). Not shared between runs.

    Calls are compared by name, then by argument text, and only then by canonical arguments,
    so the first call of each tool costs no JSON work at all.
    """

    # class-level zeros, set on the instance by its first replay (most runs have none: one
    # store fewer each at every run's start)
    replayed = 0
    """Calls answered from an earlier result (not run: the run's usage leaves them out)."""
    replayed_searches = 0
    """Those of them that were ``retrieve`` calls."""

    def __init__(self, *, replay: bool = True) -> None:
        self._by_name: dict[str, list[_Seen]] = {}
        self._replay = replay

    def _find(self, call: ToolCallBlock) -> _Seen | None:
        seen = self._by_name.get(call.name)
        if not seen:
            return None
        for entry in seen:
            if entry.arguments == call.arguments:
                return entry
        canonical = canonical_arguments(call.arguments)
        for entry in seen:
            if entry.same_arguments(canonical):
                return entry
        return None

    def replays(self, name: str) -> bool:
        """Whether a repeated successful call of the tool ``name`` is answered from the
        earlier result."""
        return self._replay and name != META_TOOL_NAME

    def replay(self, call: ToolCallBlock) -> ToolResultBlock | None:
        """The earlier successful result of the same call, addressed to ``call``; else None.
        A replayed call gets a span of its own when the run is traced."""
        if not self._replay or call.name == META_TOOL_NAME:
            return None
        seen = self._find(call)
        if seen is None or seen.result is None:
            return None
        earlier = seen.result
        seen.replays += 1
        self.replayed += 1
        if call.name == RETRIEVE_TOOL:
            self.replayed_searches += 1
        replayed_call(call, earlier)
        # The same citations, with the numbers they got when the call first ran (the run
        # lists each passage once).
        return ToolResultBlock(
            call_id=call.id,
            name=call.name,
            content=REPEATED_NOTE + earlier.content,
            citations=earlier.citations,
        )

    def refused(self, call: ToolCallBlock) -> Repeated | None:
        """The call failed with the same error ``FAILURES_BEFORE_STOP`` times already, or
        was answered from its earlier result ``REPLAYS_BEFORE_STOP`` times."""
        seen = self._find(call)
        if seen is None:
            return None
        if seen.replays >= REPLAYS_BEFORE_STOP:
            return Repeated(call=call, replays=seen.replays)
        for error, count in seen.failures.items():
            if count >= FAILURES_BEFORE_STOP:
                return Repeated(call=call, error=error, failures=count)
        return None

    def record(self, call: ToolCallBlock, result: ToolResultBlock) -> ToolResultBlock:
        """Remember how ``call`` went; the result to give the model (with a note when the
        same failure has now happened ``FAILURES_BEFORE_STOP`` times)."""
        if not result.is_error and not self._replay and call.name not in self._by_name:
            # nothing to replay it for, and no failure of this tool to count: nothing to keep
            return result
        seen = self._find(call)
        if seen is None:
            seen = _Seen(arguments=call.arguments)
            self._by_name.setdefault(call.name, []).append(seen)
        if not result.is_error:
            seen.result = result
            return result
        count = seen.failures.get(result.content, 0) + 1
        seen.failures[result.content] = count
        if count < FAILURES_BEFORE_STOP:
            return result
        return ToolResultBlock(
            call_id=result.call_id,
            name=result.name,
            content=result.content + STOP_NOTE.format(n=count),
            is_error=True,
            citations=result.citations,
            failure=result.failure,
        )
