"""``shelfhand ask`` and ``shelfhand chat`` with a configured model: the real openai SDK talking
to a chat-completions server on 127.0.0.1 that plays a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from shelfhand.knowledge.base import sample_corpus
from support.chat_server import Reply, chunk, completion  # see conftest.py

RETRIEVE_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "retrieve", "arguments": json.dumps({"query": "E-203"})},
}


def run(
    args: list[str], workspace: Path, server: Any, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_WORKSPACE=str(workspace),
        SHELFHAND_EMBEDDER="hashing",
        SHELFHAND_MODEL="local-model",
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY="sk-test-not-a-secret",
        COLUMNS="200",
    )
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_ask_with_a_model_calls_retrieve_and_prints_the_cited_answer(
    tmp_path: Path, server: Any
) -> None:
    ingest = run(["ingest", str(sample_corpus())], tmp_path, server)
    assert ingest.returncode == 0, ingest.stderr
    server.add(
        Reply(body=completion(tool_calls=[RETRIEVE_CALL])),
        Reply(body=completion("E-203 表示灯泡过热 [1]。")),
    )
    out = run(["ask", "E-203 是什么故障？"], tmp_path, server)
    assert out.returncode == 0, out.stderr
    assert "E-203 表示灯泡过热 [1]。" in out.stdout
    assert "[1] Lumen Series Troubleshooting Manual" in out.stdout
    assert len(server.requests) == 2
    first, second = (r.body for r in server.requests)
    assert any(t["function"]["name"] == "retrieve" for t in first["tools"])
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert "灯泡过热" in tool_message["content"]
    assert "sk-test-not-a-secret" not in out.stdout + out.stderr


def test_chat_streams_the_reply_and_shows_tool_steps(tmp_path: Path, server: Any) -> None:
    assert run(["ingest", str(sample_corpus())], tmp_path, server).returncode == 0
    call_deltas = [
        chunk(
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "retrieve", "arguments": ""},
                    }
                ],
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"E-203"}'}}]}),
    ]
    server.add(
        Reply(sse=call_deltas),
        Reply(
            sse=[
                chunk({"role": "assistant", "content": "Lamp "}),
                chunk({"content": "overheating [1]."}),
            ]
        ),
    )
    out = run(["chat"], tmp_path, server, stdin="What is E-203?\n\n")
    assert out.returncode == 0, out.stderr
    assert "→ retrieve" in out.stdout and "← retrieve ok" in out.stdout
    assert "Lamp overheating [1]." in out.stdout
    assert "troubleshooting-manual.pdf" in out.stdout
    assert server.requests[0].body.get("stream") is True


def test_a_model_provider_error_is_a_clear_message_not_a_traceback(
    tmp_path: Path, server: Any
) -> None:
    server.add(Reply(status=400, body={"error": {"message": "model 'local-model' does not exist"}}))
    out = run(["ask", "hello"], tmp_path, server)
    assert out.returncode == 1
    assert "does not exist" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("answer", "created"), [("y", True), ("n", False)])
def test_confirm_tools_ask_at_the_terminal(answer: str, created: bool) -> None:
    from shelfhand import Agent, Toolkit, tool
    from shelfhand.cli.chat import console_approvals
    from shelfhand.testing import ScriptedModel, text, tool_call

    done: list[str] = []

    @tool(confirm=True)
    def create_return(order_id: str) -> str:
        """Create a return."""
        done.append(order_id)
        return "RMA-1"

    class FakeConsole:
        def __init__(self) -> None:
            self.prompts: list[str] = []

        def input(self, prompt: str) -> str:
            self.prompts.append(prompt)
            return answer

    console = FakeConsole()
    model = ScriptedModel([tool_call("create_return", {"order_id": "SO-1"}), text("ok")])
    agent = Agent(model=model, toolkit=Toolkit([create_return]))
    result = agent.run_sync("return it", approvals=console_approvals(console))
    assert "create_return" in console.prompts[0] and "SO-1" in console.prompts[0]
    # as the terminal shows it: "[y/N]" is text, not a markup tag that Rich would drop
    from rich.console import Console

    shown = Console(width=200, no_color=True).render_str(console.prompts[0]).plain
    assert shown.endswith("? [y/N] ") and '{"order_id": "SO-1"}' in shown
    assert done == (["SO-1"] if created else [])
    assert result.messages[2].tool_results[0].is_error is (not created)
