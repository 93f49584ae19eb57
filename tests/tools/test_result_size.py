"""A tool's result the model reads is at most ``max_result_chars`` long (the toolkit's 100,000
by default, a tool's own when it sets one): a tool that returned 50 MB (a log, a table dump)
put 50 MB into the transcript, the session store and every step's answer check (4.4 s a
run). The rest is cut, with a line saying how long the result was; an error's message too.
A result that cannot be written as JSON says why (a list nested 5,000 deep was reported as
pydantic's "Circular reference detected")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, Toolkit, UserContext, tool
from shelfhand.app import App
from shelfhand.core.context import RunContext
from shelfhand.core.errors import ConfigurationError, InvalidArgumentError
from shelfhand.core.messages import ToolCallBlock
from shelfhand.core.settings import Settings
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.tools.governance import CUT_RESULT, cut_result
from shelfhand.tools.policy import GovernancePolicy

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
BOB = UserContext(tenant_id="globex", user_id="bob")
BIG = "日志行 token=abc 1,2,3\n" * 200_000  # 4.2 million characters


@tool(read_only=True)
def dump_log(day: str) -> str:
    """The day's whole log."""
    return BIG


@tool(read_only=True, max_result_chars=300)
def short_log(day: str) -> str:
    """The day's log, its first 300 characters read."""
    return BIG


def call(name: str, **arguments: Any) -> ToolCallBlock:
    return ToolCallBlock(id="call-1", name=name, arguments=json.dumps(arguments or {"day": "1"}))


async def test_a_huge_result_reaches_the_model_and_the_transcript_cut_with_its_length() -> None:
    agent = Agent(
        model=ScriptedModel([tool_call("dump_log", {"day": "2026-12-05"}), text("看过了。")]),
        toolkit=Toolkit([dump_log]),
    )
    result = await agent.run("今天的日志里有什么？", context=ALICE)

    (read,) = [r for m in result.messages for r in m.tool_results]
    assert read.content == BIG[:100_000] + CUT_RESULT.format(total=len(BIG), shown=100_000)
    assert read.content.endswith("the first 100,000 are shown.]") and not read.is_error
    assert result.output == "看过了。"


async def test_the_tools_own_limit_wins_and_none_means_no_limit() -> None:
    run = RunContext(user=ALICE)
    kit = Toolkit([dump_log, short_log], policy=GovernancePolicy(max_result_chars=None))
    whole = await kit.call(call("dump_log"), run)
    short = await kit.call(call("short_log"), run)
    assert whole.content == BIG
    assert short.content == cut_result(BIG, 300) and len(short.content) < 400

    tight = Toolkit([dump_log], policy=GovernancePolicy(max_result_chars=50))
    assert (await tight.call(call("dump_log"), run)).content == cut_result(BIG, 50)


async def test_a_result_under_the_limit_is_left_as_it_is() -> None:
    @tool(read_only=True)
    def small(day: str) -> dict[str, int]:
        """A small count."""
        return {"lines": 3}

    kit = Toolkit([small], policy=GovernancePolicy(max_result_chars=11))
    assert (await kit.call(call("small"), RunContext(user=ALICE))).content == '{"lines":3}'


async def test_an_error_with_a_huge_message_is_cut_for_the_model_and_told_in_a_line() -> None:
    @tool(read_only=True, retries=0)
    def explode(day: str) -> str:
        """Fails with a huge message."""
        raise ValueError("bad row: " + "x" * 500_000)

    kit = Toolkit([explode], policy=GovernancePolicy(max_result_chars=1000))
    result = await kit.call(call("explode"), RunContext(user=ALICE))
    assert result.is_error and result.content.startswith("tool explode failed: ValueError: bad row")
    assert len(result.content) < 1100 and "500,0" in result.content  # its length told
    assert result.failure == "failed: ValueError"


async def test_a_cached_result_is_kept_cut() -> None:
    calls = {"n": 0}

    @tool(read_only=True, cache_ttl=60)
    def cached_log(day: str) -> str:
        """The day's log (cached)."""
        calls["n"] += 1
        return BIG

    kit = Toolkit([cached_log], policy=GovernancePolicy(max_result_chars=100))
    run = RunContext(user=ALICE)
    first = await kit.execute(call("cached_log"), run)
    second = await kit.execute(call("cached_log"), run)
    assert second.replayed and calls["n"] == 1
    assert first.result.content == second.result.content == cut_result(BIG, 100)


async def test_two_callers_at_once_each_read_their_own_result() -> None:
    @tool(read_only=True)
    async def tenant_log(ctx: UserContext, day: str) -> str:
        """The caller's log for a day."""
        await anyio.sleep(0.01)
        return (f"{ctx.tenant_id} " * 100_000) if ctx.tenant_id == "acme" else "globex: quiet day"

    kit = Toolkit([tenant_log], policy=GovernancePolicy(max_result_chars=1000))
    got: dict[str, str] = {}

    async def one(user: UserContext) -> None:
        got[user.tenant_id] = (await kit.call(call("tenant_log"), RunContext(user=user))).content

    async with anyio.create_task_group() as tg:
        tg.start_soon(one, ALICE)
        tg.start_soon(one, BOB)
    assert got["acme"].startswith("acme acme") and "globex" not in got["acme"]
    assert got["acme"].endswith("the first 1,000 are shown.]")
    assert got["globex"] == "globex: quiet day"


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


async def test_a_result_that_cannot_be_json_says_why() -> None:
    loop: dict[str, Any] = {"name": "a"}
    loop["self"] = loop

    @tool(read_only=True)
    def deep(day: str) -> list[Any]:
        """A result nested 5,000 levels deep."""
        return _nested(5000)

    @tool(read_only=True)
    def circular(day: str) -> dict[str, Any]:
        """A result that contains itself."""
        return loop

    @tool(read_only=True)
    def fine(day: str) -> list[Any]:
        """A result nested 100 levels deep."""
        return _nested(100)

    kit = Toolkit([deep, circular, fine])
    run = RunContext(user=ALICE)
    too_deep = await kit.call(call("deep"), run)
    assert too_deep.is_error and "nested too deeply" in too_deep.content
    assert "Circular" not in too_deep.content
    assert too_deep.failure.startswith("failed: its result could not be written as JSON")
    itself = await kit.call(call("circular"), run)
    assert itself.is_error and "contains itself" in itself.content
    assert (await kit.call(call("fine"), run)).content == "[" * 100 + "[]" + "]" * 100


def test_bad_limits_are_refused_at_once() -> None:
    with pytest.raises(InvalidArgumentError, match="max_result_chars"):
        GovernancePolicy(max_result_chars=0)
    with pytest.raises(InvalidArgumentError, match="max_result_chars"):

        @tool(max_result_chars=-1)
        def nothing() -> str:
            """Nothing."""
            return ""


async def test_the_setting_reaches_the_apps_toolkits(tmp_path: Path) -> None:
    env = {"SHELFHAND_TOOL_RESULT_CHARS": "500"}
    app = App(settings=Settings.load(tmp_path / "ws", env=env))
    assert app.governance().policy.max_result_chars == 500
    kit = Toolkit([dump_log], governance=app.governance())
    assert (await kit.call(call("dump_log"), RunContext(user=ALICE))).content == cut_result(
        BIG, 500
    )
    with pytest.raises(ConfigurationError, match="SHELFHAND_TOOL_RESULT_CHARS"):
        Settings.load(tmp_path / "ws", env={"SHELFHAND_TOOL_RESULT_CHARS": "0"})
