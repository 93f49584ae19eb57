"""Fitting a conversation into the model's context window (issue 9, point 7).

Before every model call the agent checks that the request fits ``context_tokens`` minus the
tokens reserved for the answer (the model's ``max_tokens`` when it reports one, else an eighth of
the window) and minus the tool schemas. When it does not fit, in this order:

1. the **oldest tool results** are replaced by a marker (the newest step's results are kept);
2. the **oldest history** messages (earlier turns of the conversation) are dropped;
3. a call's **own arguments** over 1,000 characters (a model that wrote a megabyte of them,
   refused by the toolkit) become a marker saying how long they were;
4. the **newest tool results** are shortened, with a marker saying how much was cut.

Only the request is fitted: the run's transcript keeps every result as the toolkit gave it
(cut at the tool's ``max_result_chars``, 100,000 characters by default). When even the system
prompt and the question alone do not fit, :class:`ContextBudgetError` says so instead of sending
a request the server would refuse.

Tokens are estimated without a tokenizer, on the safe side for BPE tokenizers: every CJK
character, every digit (Qwen and Llama 3 split numbers into digits) and every punctuation or
symbol character counts one token, a run of letters counts one per three characters, and every
message adds a few tokens of template.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import ContextBudgetError, ModelTimeoutError
from shelfhand.core.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from shelfhand.core.results import Usage

if TYPE_CHECKING:
    from shelfhand.core.pricing import ModelPrice

__all__ = [
    "DEFAULT_CONTEXT_TOKENS",
    "ContextBudgetError",
    "GrowingBound",
    "TokenCounter",
    "cut_call",
    "cut_off_usage",
    "estimate_tokens",
    "fit_messages",
    "message_tokens",
    "positive_int",
    "request_budget",
    "schema_tokens",
]

DEFAULT_CONTEXT_TOKENS = 8192
_MESSAGE_OVERHEAD = 6
_REQUEST_OVERHEAD = 16
_CHARS_PER_TOKEN = 3
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_LETTER_RUN = re.compile(rf"[^\W\d_{_CJK}]+")
OLD_RESULT_MARKER = (
    "[This older tool result ({chars} characters) was cut to fit the context window. "
    "Call the tool again if you still need it.]"
)
CUT_MARKER = "\n[… {chars} more characters were cut to fit the context window.]"
ARGUMENTS_MARKER = '"[{chars} characters of arguments, cut to fit the context window]"'
"""What a call's own arguments become when they do not fit (a JSON string: valid JSON for
servers that parse the history's calls)."""
_LONG_ARGUMENTS = 1000
"""Arguments longer than this (characters) are cut when the request does not fit."""


def estimate_tokens(text: str) -> int:
    """A cautious token count of ``text`` (see the module doc)."""
    # every non-space character is a token, except that a run of letters shares them
    non_space = len("".join(text.split()))
    runs = _LETTER_RUN.findall(text)
    return non_space - sum(len(r) - -(-len(r) // _CHARS_PER_TOKEN) for r in runs)


def message_tokens(message: Message) -> int:
    """Estimated tokens of one message as sent: text, tool calls and tool results."""
    total = _MESSAGE_OVERHEAD + estimate_tokens(message.text)
    for call in message.tool_calls:
        total += _MESSAGE_OVERHEAD + estimate_tokens(call.name) + estimate_tokens(call.arguments)
    for result in message.tool_results:
        total += _MESSAGE_OVERHEAD + estimate_tokens(result.content)
    return total


LEFT = (asyncio.CancelledError, GeneratorExit)
"""What a model call raises when its caller went away."""
LATE = (TimeoutError, ModelTimeoutError)
"""What a model call raises past its deadline."""
CUT_OFF = LEFT + LATE
"""What a model call raises when it was cut off (its caller went away, a timeout) rather than
failed: the provider may have read its request and written some of its reply, and bills
them."""


def cut_off_usage(exc: BaseException, request_tokens: int, streamed: Sequence[str]) -> Usage:
    """What a call of the loop that ended with ``exc`` before its reply was complete is
    charged against the caller's budget:

    - cut off (the caller went away, a timeout) or broken after text streamed: the request's
      estimate (``request_tokens``) and what was ``streamed``, as the provider read the one
      and wrote the other until the connection closed, and bills them. Before, such a call
      was released, so a caller who read a streamed answer and disconnected before its end
      spent no tokens of their budget;
    - failed before any text (an error answer, a server out of reach): nothing, as before (the
      call still counts in ``model_calls``).
    """
    if streamed:
        return Usage(input_tokens=request_tokens, output_tokens=estimate_tokens("".join(streamed)))
    if isinstance(exc, CUT_OFF):
        return Usage(input_tokens=request_tokens, output_tokens=0)
    return Usage(input_tokens=0, output_tokens=0)


def cut_call(charged: Usage, price: ModelPrice | None) -> Usage:
    """A call cut off as a run's usage counts it: one model call at what its budget charged
    (:func:`cut_off_usage`), its cost at ``price`` (unknown without one)."""
    return Usage(
        input_tokens=charged.input_tokens,
        output_tokens=charged.output_tokens,
        model_calls=1,
        cost=price.cost(charged) if price is not None else None,
    )


def positive_int(value: object) -> int | None:
    """``value`` when it is a positive ``int`` (not a ``bool``), else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class TokenCounter:
    """:func:`message_tokens` remembered per message object, for the requests of one run
    (messages are immutable, and most of them are sent again at every step)."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[Message, int]] = {}

    def __call__(self, message: Message) -> int:
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        count = message_tokens(message)
        self._known[id(message)] = (message, count)
        return count


class GrowingBound:
    """A running upper bound of the tokens of a conversation that only grows at the end
    (the run's messages), so that a request that obviously fits costs O(1) to check."""

    def __init__(self, fixed: Sequence[Message], *, base: int = 0) -> None:
        # base: the bound of messages counted before (the agent keeps its system message's)
        self._fixed = base + sum(size_bound(m) for m in fixed) if fixed else base
        self._grown = 0
        self._counted = 0

    def total(self, grown: Sequence[Message]) -> int:
        """The bound of the fixed messages plus ``grown`` (the same list, only appended to)."""
        for message in grown[self._counted :]:
            self._grown += size_bound(message)
        self._counted = len(grown)
        return self._fixed + self._grown


def schema_tokens(tools: Sequence[Any]) -> int:
    """Estimated tokens of the tool schemas sent with a request."""
    return estimate_tokens(json.dumps(list(tools), ensure_ascii=False)) if tools else 0


def request_budget(
    context_tokens: int,
    max_tokens: int | None,
    tools: Sequence[Any] = (),
    *,
    tools_tokens: int | None = None,
) -> int:
    """Tokens left for the messages: the window minus the answer's reserve and the tools
    (``tools_tokens``: their count when already known, see :func:`schema_tokens`)."""
    reserve = max_tokens if max_tokens is not None else context_tokens // 8
    schemas = tools_tokens if tools_tokens is not None else schema_tokens(tools)
    return context_tokens - reserve - schemas - _REQUEST_OVERHEAD


def fit_messages(
    messages: Sequence[Message],
    budget: int,
    *,
    keep_from: int,
    count: Callable[[Message], int] = message_tokens,
    bound: int | None = None,
) -> list[Message]:
    """``messages`` cut to fit ``budget`` tokens (see the module doc); ``messages`` itself
    when it is a list that fits.

    Args:
        messages: The request: system prompt first.
        budget: Tokens the messages may take (see :func:`request_budget`).
        keep_from: Index of the first message that must not be dropped (this run's prompt);
            messages between the system prompt and it are history and may be dropped.
        count: Counts one message's tokens (e.g. a run's :class:`TokenCounter`).
        bound: An upper bound of all the messages' tokens when the caller keeps one (see
            :class:`GrowingBound`); by default the characters are counted.

    Raises:
        ContextBudgetError: even the messages that must stay do not fit.
    """
    if (bound if bound is not None else sum(map(size_bound, messages))) <= budget:
        # the common case, decided without estimating anything (a list is not copied)
        return messages if isinstance(messages, list) else list(messages)
    sizes = [count(m) for m in messages]
    total = sum(sizes)
    if total <= budget:
        return list(messages)
    out = list(messages)
    tool_steps = [i for i, m in enumerate(out) if m.role == "tool"]
    # 1. the oldest tool results become a marker (the newest step's results stay for now)
    for i in tool_steps[:-1]:
        if total <= budget:
            break
        out[i] = _replace_results(out[i], _marker)
        total += message_tokens(out[i]) - sizes[i]
        sizes[i] = message_tokens(out[i])
    # 2. the oldest history goes, a message at a time; tool results never lose their call
    first = 1 if out and out[0].role == "system" else 0
    while total > budget and first < keep_from:
        total -= sizes.pop(first)
        out.pop(first)
        keep_from -= 1
        while first < keep_from and out[first].role == "tool":
            total -= sizes.pop(first)
            out.pop(first)
            keep_from -= 1
    # 3. a call's own arguments (a model that wrote a megabyte of them): a marker
    for i, message in enumerate(out):
        if total <= budget:
            break
        if message.role != "assistant" or not any(
            len(call.arguments) > _LONG_ARGUMENTS for call in message.tool_calls
        ):
            continue
        out[i] = replace(message, content=tuple(map(_cut_arguments, message.content)))
        size = message_tokens(out[i])
        sizes[i], total = size, total - sizes[i] + size
    # 4. the newest tool results are shortened, one result at a time
    for i in reversed(range(len(out))):
        if total <= budget:
            break
        if out[i].role != "tool":
            continue
        blocks = list(out[i].content)
        for j, block in enumerate(blocks):
            if total <= budget:
                break
            if isinstance(block, ToolResultBlock):
                shorter = _shorten(block, total - budget)
                total += estimate_tokens(shorter.content) - estimate_tokens(block.content)
                blocks[j] = shorter
        out[i] = replace(out[i], content=tuple(blocks))
        sizes[i] = message_tokens(out[i])
    if total > budget:
        raise ContextBudgetError(
            f"the request needs about {total} tokens but only {budget} fit the model's context "
            "window after reserving room for the answer and the tool schemas; shorten the "
            "question or system prompt, or raise the model's context size (context_tokens)"
        )
    return out


def size_bound(message: Message) -> int:
    """An upper bound of :func:`message_tokens` (no estimate is above the character count)."""
    total = _MESSAGE_OVERHEAD
    for block in message.content:
        if isinstance(block, TextBlock):
            total += len(block.text)
        elif isinstance(block, ToolCallBlock):
            total += _MESSAGE_OVERHEAD + len(block.name) + len(block.arguments)
        elif isinstance(block, ToolResultBlock):
            total += _MESSAGE_OVERHEAD + len(block.content)
    return total


def _replace_results(message: Message, change: Any) -> Message:
    blocks = tuple(change(b) if isinstance(b, ToolResultBlock) else b for b in message.content)
    return replace(message, content=blocks)


def _cut_arguments(block: Any) -> Any:
    if isinstance(block, ToolCallBlock) and len(block.arguments) > _LONG_ARGUMENTS:
        return replace(block, arguments=ARGUMENTS_MARKER.format(chars=len(block.arguments)))
    return block


def _marker(result: ToolResultBlock) -> ToolResultBlock:
    if result.content.startswith("[This older tool result"):
        return result
    return replace(result, content=OLD_RESULT_MARKER.format(chars=len(result.content)))


def _shorten(result: ToolResultBlock, excess: int) -> ToolResultBlock:
    """Cut at least ``excess`` tokens' worth off the end of ``result`` (all of it if needed)."""
    content = result.content
    tokens = estimate_tokens(content)
    keep_tokens = max(0, tokens - excess - estimate_tokens(CUT_MARKER.format(chars=len(content))))
    # Find the longest prefix within keep_tokens (prefix token counts never exceed the whole).
    low, high = 0, len(content)
    while low < high:
        mid = (low + high + 1) // 2
        if estimate_tokens(content[:mid]) <= keep_tokens:
            low = mid
        else:
            high = mid - 1
    kept = content[:low]
    return replace(result, content=kept + CUT_MARKER.format(chars=len(content) - len(kept)))
