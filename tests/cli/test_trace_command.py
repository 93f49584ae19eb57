"""``shelfhand trace``: lists a tenant's turns and prints one turn's tree with times, tokens,
tool outcomes and the retrieved passages with their scores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio

from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.core.tracing import Tracer, enter, leave
from shelfhand.testing import ScriptedModel, text, tool_call
from shelfhand.traces import SqliteTraceStore, StoreRecorder
from support.knowledge import sample_kb

ALICE = UserContext(tenant_id="acme", user_id="alice")


@tool(permission="admin")
def refund(order_id: str) -> str:
    """Refund an order."""
    return "refunded"


def shelfhand(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["SHELFHAND_WORKSPACE"] = str(workspace)
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_trace_lists_turns_and_prints_a_tree_with_times_and_scores(tmp_path: Path) -> None:
    with sample_kb(tmp_path) as kb:
        recorder = StoreRecorder(SqliteTraceStore(kb.workspace / "traces.db"))
        tracer = Tracer([recorder])
        model = ScriptedModel(
            [
                [
                    tool_call("retrieve", {"query": "退货政策"}),
                    tool_call("refund", {"order_id": "A1"}),
                ],
                text("七天内可退 [1]。"),
            ]
        )
        agent = Agent(name="support", model=model, toolkit=Toolkit([retrieve_tool(kb), refund]))

        async def turn() -> None:
            root = tracer.start_root("turn", trace_id="1" * 32, tenant_id="acme", user_id="alice")
            token = enter(root)
            await agent.run("退货？", context=ALICE, trace_id=root.trace_id)
            leave(root, token)

        anyio.run(turn)
        recorder.close()
        workspace = kb.workspace

    listed = shelfhand("trace", "--tenant", "acme", workspace=workspace)
    assert listed.returncode == 0, listed.stderr
    assert "1" * 32 in listed.stdout and "alice" in listed.stdout

    shown = shelfhand("trace", "1" * 32, "--tenant", "acme", workspace=workspace)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split("ms", 1)[1].strip().startswith("turn")
    assert any("invoke_agent support" in line for line in lines)
    assert any("execute_tool refund" in line and "✗ denied" in line for line in lines)
    assert any("retrieval" in line and "query '退货政策'" in line for line in lines)
    assert any(line.strip().startswith("- 0.") for line in lines)  # a hit with its score

    other = shelfhand("trace", "1" * 32, "--tenant", "other", workspace=workspace)
    assert other.returncode == 1
    assert "no trace" in other.stderr + other.stdout
