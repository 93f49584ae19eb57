"""Honest answers for runs that end without one from the model (issue 9, points 4 and 6).

A run never ends with a blank answer: a blank reply gets one nudge (:data:`NUDGE`; a reply
of citation marks alone, ``[1][2]``, when the run has found nothing to cite,
:data:`MARKS_NUDGE`; with passages found, the answer check answers with their best sentences
instead); a second such reply ends the run with :func:`empty_answer` (the passages the run
found, "the documents do not cover this" when it searched them and found nothing, or "no
answer"). A reply that only repeats a tool's raw JSON result (:func:`echoed_result`; small
models do) is treated the same way: one nudge (:data:`ECHO_NUDGE`), then :func:`echo_answer`.
A run that stops because the model kept repeating a failing call (or one already answered)
ends with :func:`repeated_call_answer`; one that reaches ``max_iters`` with
:func:`max_iters_answer`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from shelfhand.core.messages import Citation, Message, ToolResultBlock
from shelfhand.knowledge.analysis import in_chinese

from .guard import REPEATED_NOTE, Repeated

__all__ = [
    "ECHO_NUDGE",
    "MARKS_NUDGE",
    "NOT_CONFIGURED",
    "NOT_COVERED",
    "NOT_COVERED_ZH",
    "NUDGE",
    "echo_answer",
    "echoed_result",
    "empty_answer",
    "found_nothing",
    "in_chinese",
    "max_iters_answer",
    "not_covered",
    "passage_lines",
    "readable",
    "repeated_call_answer",
    "says_not_covered",
    "tool_failure_lines",
    "tool_result_lines",
    "tool_results",
    "without_copied_note",
]

NOT_COVERED = "The documents do not cover this: no passage in the knowledge base matches it."
"""What a person reads when a search of the documents found nothing (no guessing)."""
NOT_COVERED_ZH = "文档中没有这方面的内容：知识库里没有与这个问题相符的段落。"
""":data:`NOT_COVERED` for a question asked in Chinese (:func:`not_covered`)."""


def not_covered(question: str) -> str:
    """What a person reads when the documents do not cover ``question``, in the language
    it is asked in (:data:`NOT_COVERED`, :data:`NOT_COVERED_ZH`)."""
    return NOT_COVERED_ZH if in_chinese(question) else NOT_COVERED


def says_not_covered(answer: str) -> bool:
    """Whether ``answer`` is (or opens with) "the documents do not cover this", in either
    language."""
    return answer.startswith((NOT_COVERED, NOT_COVERED_ZH))


RETRIEVE_TOOL = "retrieve"
NOT_CONFIGURED = "knowledge base not configured"
"""What ``retrieve`` answers without a knowledge base."""

NUDGE = (
    "Your last reply was empty. Answer the question now, in plain text, using the tool results "
    "above; if they do not contain the answer, say so."
)
MARKS_NUDGE = (
    "Your last reply had only citation marks and no words, and nothing has been found to "
    "cite. Answer the question in plain text; if a tool can find what you need, call it first."
)
ECHO_NUDGE = (
    "Your last reply only repeated the raw result of the {tool} tool. Answer the user's "
    "question now, in plain words, using that result."
)
_PASSAGE_CHARS = 300
_READABLE_CHARS = 100_000  # a longer result is shortened as it is, not parsed
_ECHO_CHARS = 2000
_FENCED = re.compile(r"\A```[A-Za-z0-9_]*[ \t]*\n(.*)\n```\Z", re.DOTALL)
_NOTE = REPEATED_NOTE.strip()


def _json_value(text: str) -> Any:
    """``text`` (the replay note and a code fence removed) as JSON; ``None`` when it is not
    a JSON object or array."""
    text = text.replace(_NOTE, "").strip()
    fenced = _FENCED.match(text)
    if fenced is not None:
        text = fenced.group(1).strip()
    if not text.startswith(("{", "[")):
        return None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict | list) else None


def _within(part: Any, whole: Any) -> bool:
    """``part`` is ``whole``, or an object holding some of its keys with the same values."""
    if isinstance(part, dict) and isinstance(whole, dict):
        return bool(part) and all(k in whole and _within(v, whole[k]) for k, v in part.items())
    return bool(part == whole)


def echoed_result(text: str, messages: Sequence[Message]) -> ToolResultBlock | None:
    """The tool result of this run that ``text`` (a final reply) merely repeats: its JSON
    object or array, or some of its fields (``{"stock": 12}`` of ``{"sku": …, "stock": 12}``),
    maybe fenced, maybe with the replay note; or the replay note alone (then the latest
    replayed result); else ``None``.

    Only JSON counts: a reply that quotes a plain-text result is an answer in words."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[", "```")):
        return None
    value = _json_value(stripped)
    if value is None and stripped.replace(_NOTE, "").strip():
        return None
    for message in reversed(messages):
        for result in message.tool_results:
            if result.is_error:
                continue
            if value is None:  # only the note: the model copied a replayed result's head
                if result.content.startswith(REPEATED_NOTE):
                    return result
            elif _within(value, _json_value(result.content)):
                return result
    return None


def without_copied_note(text: str) -> str:
    """``text`` without a replay note the model copied into it (the rest is its answer)."""
    return text.replace(_NOTE, "").strip() if _NOTE in text else text


def readable(content: str) -> str:
    """A tool result as a person reads it: a JSON object as ``key: value`` pairs
    (``order: SO-1001, status: shipped``), a list of them one after another (``; ``), nested
    values as compact JSON; any other text as it is."""
    value = _json_value(content) if len(content) <= _READABLE_CHARS else None
    if value is None:
        return content
    items = value if isinstance(value, list) else [value]
    return "; ".join(_pairs(item) for item in items)


def _pairs(item: object) -> str:
    if not isinstance(item, dict):
        return _plain(item)
    return ", ".join(f"{key}: {_plain(value)}" for key, value in item.items())


def _plain(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def tool_results(messages: Sequence[Message], *, leave_out: str = "") -> list[tuple[str, str]]:
    """The run's successful tool results as ``(tool, content)``, the content :func:`readable`
    and shortened like passages, each content once (replays of it included); ``leave_out``:
    a tool whose results are not listed."""
    found: list[tuple[str, str]] = []
    seen: set[str] = set()
    for message in messages:
        for result in message.tool_results:
            content = result.content.replace(_NOTE, "").strip()
            if result.is_error or not content or content in seen or result.name == leave_out:
                continue
            seen.add(content)
            content = readable(content)
            if len(content) > _PASSAGE_CHARS:
                content = content[:_PASSAGE_CHARS] + "…"
            found.append((result.name, content))
    return found


def tool_result_lines(messages: Sequence[Message], *, leave_out: str = "") -> list[str]:
    """:func:`tool_results` as ``- tool: content`` lines."""
    return [f"- {name}: {content}" for name, content in tool_results(messages, leave_out=leave_out)]


def tool_failure_lines(messages: Sequence[Message], *, leave_out: str = "") -> list[str]:
    """The run's tools whose calls failed (raised, timed out, circuit open, rate limited,
    returned an error of their own) and that returned nothing in the run, as ``- tool: what
    happened`` lines, each tool once (its last failure): each result's
    :attr:`~shelfhand.core.messages.ToolResultBlock.failure`, set by the toolkit, which
    leaves out the advice to the model and names an exception by its class alone unless it is
    a :class:`~shelfhand.core.errors.ToolError` (``failed: no order SO-9 for this
    customer``); ``leave_out``: a tool not listed.

    A call the model got wrong (unknown tool, invalid arguments, not permitted) is not a
    failure of the tool: not listed."""
    failures: dict[str, str] = {}
    returned: set[str] = set()
    for message in messages:
        for result in message.tool_results:
            if result.name == leave_out:
                continue
            if not result.is_error:
                returned.add(result.name)
            elif result.failure:
                failures[result.name] = result.failure[:_PASSAGE_CHARS]
    return [f"- {name}: {what}" for name, what in failures.items() if name not in returned]


def echo_answer(result: ToolResultBlock) -> str:
    """What the user reads when the model twice answered with only a tool's raw result."""
    content = result.content.replace(_NOTE, "").strip()
    if len(content) > _ECHO_CHARS:
        content = content[:_ECHO_CHARS] + "…"
    return (
        f"The model did not write an answer in words. The {result.name} tool returned:\n{content}"
    )


def passage_lines(citations: Sequence[Citation]) -> list[str]:
    lines = []
    for c in citations:
        where = c.title or c.source
        text = " ".join(c.text.split())
        if len(text) > _PASSAGE_CHARS:
            text = text[:_PASSAGE_CHARS] + "…"
        lines.append(f"[{c.index}] {where}: {text}" if text else f"[{c.index}] {where}")
    return lines


def found_nothing(messages: Sequence[Message], *, tool_name: str = RETRIEVE_TOOL) -> bool:
    """Whether ``messages`` searched the documents (a ``retrieve`` call that ran: not an
    error, not "not configured") and no such call returned a passage."""
    searches = [
        r
        for m in messages
        for r in m.tool_results
        if r.name == tool_name and not r.is_error and r.content != NOT_CONFIGURED
    ]
    return bool(searches) and not any(r.citations for r in searches)


def empty_answer(citations: Sequence[Citation], messages: Sequence[Message] = ()) -> str:
    """What the user reads when the model answered with nothing, twice (``messages``: the
    run's, to tell "the documents have nothing on this" from "no answer")."""
    if not citations and found_nothing(messages):
        return f"{NOT_COVERED} (The model returned an empty reply.)"
    if not citations:
        results = tool_result_lines(messages)
        if results:
            return "\n".join(
                [
                    "The model returned an empty reply, so there is no written answer. The tools "
                    "returned:",
                    *results,
                ]
            )
        return "No answer: the model returned an empty reply. Try asking again or rephrasing."
    return "\n".join(
        [
            "The model returned an empty reply, so there is no written answer. These passages "
            "were found and may help:",
            *passage_lines(citations),
        ]
    )


def repeated_call_answer(repeated: Repeated, citations: Sequence[Citation]) -> str:
    """What the user reads when the model kept sending a call that keeps failing, or one whose
    result it already had."""
    if repeated.replays:
        lines = [
            f"I stopped: the model kept repeating the tool call {repeated.call.name}, whose "
            f"result it already had ({repeated.replays + 1} times in all), so there is no "
            "complete answer."
        ]
    else:
        error = repeated.error.splitlines()[0] if repeated.error else "an error"
        lines = [
            f"I stopped: the tool call {repeated.call.name} failed {repeated.failures} times "
            f"with the same error ({error[:300]}) and the model kept repeating it, so there is "
            "no complete answer."
        ]
    if citations:
        lines.append("Passages found before that:")
        lines.extend(passage_lines(citations))
    return "\n".join(lines)


def max_iters_answer(max_iters: int, new: Sequence[Message]) -> str:
    """What the user reads when the run used up its steps."""
    last = next((m for m in reversed(new) if m.role == "tool"), None)
    lines = [f"I could not finish within {max_iters} steps, so this is not a complete answer."]
    if last is not None:
        lines.append("The last tool results were:")
        lines.extend(f"- {r.name}: {r.content[:300]}" for r in last.tool_results)
    return "\n".join(lines)
