"""Calls of ``inline=True`` sync tools: they run on the event loop, to their end.

Such a call never waits, so no deadline could fire while it runs: none is registered for it
(a timeout applies to the other tools only, as docs/tools.md says).
"""

from __future__ import annotations

import threading

import pytest

from shelfhand import Toolkit, UserContext, tool
from shelfhand.core.context import RunContext
from shelfhand.core.messages import ToolCallBlock
from shelfhand.tools.governance import Governance

pytestmark = pytest.mark.anyio

RUN = RunContext(user=UserContext(tenant_id="acme", user_id="alice"))


@tool(inline=True, timeout=1)
def word_count(text: str) -> int:
    """Count the words of a text."""
    assert threading.current_thread() is threading.main_thread()  # on the loop's thread
    return len(text.split())


@tool(timeout=1)
def char_count(text: str) -> int:
    """Count the characters of a text (on a worker thread)."""
    return len(text)


@tool(inline=True, timeout=1)
async def shout(text: str) -> str:
    """Upper-case a text (async: inline means nothing for it)."""
    return text.upper()


def test_only_an_inline_sync_tool_is_planned_on_the_loop() -> None:
    governance = Governance()
    assert governance.plan(word_count).on_loop
    assert not governance.plan(char_count).on_loop
    assert not governance.plan(shout).on_loop


async def test_an_inline_call_returns_its_result_and_registers_no_deadline() -> None:
    kit = Toolkit([word_count, char_count])
    call = ToolCallBlock(
        id="c1", name="word_count", arguments='{"text": "退货 政策 return policy"}'
    )
    assert (await kit.call(call, RUN)).content == "4"
    assert kit.governance._deadlines is None  # nothing was timed
    call = ToolCallBlock(id="c2", name="char_count", arguments='{"text": "退货政策"}')
    assert (await kit.call(call, RUN)).content == "4"
    assert kit.governance._deadlines is not None  # the worker-thread call was
