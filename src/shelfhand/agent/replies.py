"""What an agent run makes of a model's reply, and the result it ends with (docs/design.md K2, issue 9).

A reply is cleaned before the run acts on it: tool calls the model wrote as text become calls
(:func:`recovered`), a final reply that only repeats a tool's result is told apart
(:func:`echoed`), and a replay note the model copied into its answer is removed
(:func:`without_copied_note`). The run's end is a :class:`~shelfhand.core.results.RunResult`
(:func:`final`, :func:`external_final`); a reply the run stopped at still gets results for
its calls (:func:`not_run`), so the transcript stays valid.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from shelfhand.core.citations import unknown_citations
from shelfhand.core.context import RunContext
from shelfhand.core.events import Final, final_event
from shelfhand.core.messages import (
    Block,
    Citation,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from shelfhand.core.names import is_text, valid_text
from shelfhand.core.results import StopReason, Usage, run_result
from shelfhand.models.base import ToolSchema
from shelfhand.models.textcalls import recover_tool_calls

from . import fallbacks
from .guard import Repeated

__all__ = [
    "cleaned",
    "echoed",
    "external_final",
    "final",
    "new_citations",
    "not_run",
    "recovered",
    "storable",
    "without_copied_note",
]


def recovered(reply: Message, schemas: Sequence[ToolSchema]) -> Message:
    """``reply`` with tool calls written as text turned into calls (whatever the provider did)."""
    if reply.tool_calls or not schemas:
        return reply
    return _recovered(reply, reply.text, schemas)


def _recovered(reply: Message, content: str, schemas: Sequence[ToolSchema]) -> Message:
    """:func:`recovered` for a reply without tool calls whose text is ``content``."""
    if not schemas or ("{" not in content and "[" not in content):
        return reply  # the common case: no JSON, so no call
    names = {str(s.get("function", {}).get("name", "")) for s in schemas}
    text, calls = recover_tool_calls(content, names)
    if not calls:
        return reply
    return replace(reply, content=Message.assistant(text, tool_calls=calls).content)


def echoed(reply: Message, new: Sequence[Message]) -> ToolResultBlock | None:
    """The tool result of the run that a final ``reply`` only repeats (see
    :func:`~.fallbacks.echoed_result`)."""
    return None if reply.tool_calls else fallbacks.echoed_result(reply.text, new)


def without_copied_note(reply: Message) -> Message:
    """A final ``reply`` without a replay note the model copied into its answer."""
    if reply.tool_calls:
        return reply
    text = fallbacks.without_copied_note(reply.text)
    return reply if text == reply.text else replace(reply, content=Message.assistant(text).content)


def cleaned(
    message: Message, schemas: Sequence[ToolSchema], new: Sequence[Message], *, shown: bool = False
) -> tuple[Message, tuple[ToolCallBlock, ...], ToolResultBlock | None]:
    """The model's reply as the run acts on it, its tool calls, and the tool result of the run
    that it only repeats (``None``: it does not). Tool calls written as text become calls; a
    reply whose text was already ``shown`` (streamed) is never such an echo; an answer loses a
    replay note the model copied into it."""
    calls = message.tool_calls
    if calls:  # the common step: calls, so nothing to recover or tell apart
        for c in calls:
            if not (c.arguments.isascii() and c.name.isascii() and c.id.isascii()):
                message = storable(message)
                return message, message.tool_calls, None
        return message, calls, None
    text = message.text
    if not text.isascii() and not is_text(text):
        message = storable(message)
        text = message.text
    reply = _recovered(message, text, schemas)
    if reply is not message:  # calls written as text: now calls
        return reply, reply.tool_calls, None
    echo = None if shown else fallbacks.echoed_result(text, new)
    if echo is None:
        answer = fallbacks.without_copied_note(text)
        if answer != text:
            reply = replace(reply, content=Message.assistant(answer).content)
    return reply, (), echo


def storable(message: Message) -> Message:
    """``message`` with its text and calls as UTF-8 can carry them: a custom
    :class:`~shelfhand.models.base.ChatModel` may return half of a surrogate pair alone,
    which no store, JSON reply or trace can hold (see
    :func:`~shelfhand.core.names.valid_text`; the OpenAI-compatible adapter does this
    itself); ``message`` itself when it holds none."""
    blocks: list[Block] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            text = valid_text(block.text)
            if text is not block.text:
                block = replace(block, text=text)
        elif isinstance(block, ToolCallBlock):
            fields = (block.id, block.name, block.arguments)
            valid = [valid_text(f) for f in fields]
            if any(v is not f for v, f in zip(valid, fields, strict=True)):
                block = replace(block, id=valid[0], name=valid[1], arguments=valid[2])
        blocks.append(block)
    if all(a is b for a, b in zip(blocks, message.content, strict=True)):
        return message
    return replace(message, content=tuple(blocks))


def not_run(calls: Sequence[ToolCallBlock], repeated: Repeated) -> Message:
    """Results for the calls of a reply the run stopped at (keeps the transcript valid)."""
    return Message.tool(
        ToolResultBlock(
            call_id=c.id,
            name=c.name,
            content=f"not run: the run stopped because {repeated.call.name} kept "
            + ("being repeated" if repeated.replays else "failing"),
            is_error=True,
        )
        for c in calls
    )


def new_citations(results: Sequence[ToolResultBlock], seen: Sequence[Citation]) -> list[Citation]:
    """The citations of ``results`` not already in ``seen`` (a passage retrieved again keeps
    its number, and is listed once)."""
    for r in results:
        if r.citations:
            break
    else:
        return []  # most tool results cite nothing
    keys = {(c.index, c.chunk_id) for c in seen}
    out: list[Citation] = []
    for c in (c for r in results for c in r.citations):
        if (c.index, c.chunk_id) not in keys:
            keys.add((c.index, c.chunk_id))
            out.append(c)
    return out


def final(
    text: str,
    new: Sequence[Message],
    citations: Sequence[Citation],
    run: RunContext,
    iterations: int,
    usage: Usage,
    reason: StopReason,
) -> Final:
    """The event a run ends with: its answer ``text``, transcript and citations."""
    return final_event(
        run_result(
            output=text,
            messages=tuple(new),
            citations=tuple(citations),
            usage=usage,
            iterations=iterations,
            stop_reason=reason,
            trace_id=run.trace_id,
            unknown_citations=unknown_citations(text, citations),
        )
    )


def external_final(
    reply: Message,
    external: tuple[ToolCallBlock, ...],
    new: Sequence[Message],
    citations: Sequence[Citation],
    run: RunContext,
    iterations: int,
    usage: Usage,
) -> Final:
    """The end of a run whose model called ``external`` tools: the calls go back to the
    caller, who executes them."""
    return final_event(
        run_result(
            output=reply.text,
            messages=tuple(new),
            citations=tuple(citations),
            usage=usage,
            iterations=iterations,
            stop_reason="external_tool",
            external_calls=external,
            trace_id=run.trace_id,
        )
    )
