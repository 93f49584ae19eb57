"""``shelfhand ask`` never prints a blank answer or a tool call (issue 9.1, 9.4): the real CLI,
the real openai SDK, and a chat-completions server on 127.0.0.1 that plays a script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

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


def test_a_blank_answer_prints_the_passages_best_sentences_and_exits_3(
    tmp_path: Path, server: Any
) -> None:
    assert run(["ingest", str(sample_corpus())], tmp_path, server).returncode == 0
    server.add(
        Reply(body=completion(tool_calls=[RETRIEVE_CALL])),
        Reply(body=completion("")),
        Reply(body=completion("   ")),
    )

    out = run(["ask", "E-203 是什么故障？"], tmp_path, server)

    assert out.returncode == 3, out.stderr
    assert out.stdout.startswith("摘自文档：")
    assert "E-203" in out.stdout and "[1]" in out.stdout
    assert "模型没有给出回答" in out.stdout  # (said in the question's language)
    assert len(server.requests) == 3  # the answer, one nudge, then the fallback


def test_a_text_tool_call_is_run_not_printed(tmp_path: Path, server: Any) -> None:
    assert run(["ingest", str(sample_corpus())], tmp_path, server).returncode == 0
    call = '```json\n{"name": "retrieve", "arguments": {"query": "E-203"}}\n```'
    server.add(Reply(body=completion(call)), Reply(body=completion("E-203 表示灯泡过热 [1]。")))

    out = run(["ask", "E-203 是什么故障？"], tmp_path, server)

    assert out.returncode == 0, out.stderr
    assert "E-203 表示灯泡过热 [1]。" in out.stdout
    assert '"arguments"' not in out.stdout and "```" not in out.stdout
    assert server.requests[1].body["messages"][-1]["role"] == "tool"


def test_chat_never_prints_a_streamed_text_call_and_keeps_steps_apart(
    tmp_path: Path, server: Any
) -> None:
    assert run(["ingest", str(sample_corpus())], tmp_path, server).returncode == 0
    call = 'Checking.\n<tool_call>{"name": "retrieve", "arguments": {"query": "E-203"}}</tool_call>'
    pieces = [call[i : i + 4] for i in range(0, len(call), 4)]
    server.add(
        Reply(sse=[chunk({"role": "assistant", "content": p}) for p in pieces]),
        Reply(sse=[chunk({"content": "Lamp "}), chunk({"content": "overheating [1]."})]),
    )

    out = run(["chat"], tmp_path, server, stdin="What is E-203?\n\n")

    assert out.returncode == 0, out.stderr
    assert "<tool_call" not in out.stdout and '"arguments"' not in out.stdout
    assert "→ retrieve" in out.stdout and "← retrieve ok" in out.stdout
    assert "Checking." in out.stdout and "Lamp overheating [1]." in out.stdout
    assert "Checking.\n" in out.stdout  # the tool step starts on a line of its own


def test_ask_json_carries_the_usage_the_provider_reported(tmp_path: Path, server: Any) -> None:
    assert run(["ingest", str(sample_corpus())], tmp_path, server).returncode == 0
    server.add(
        Reply(body=completion(tool_calls=[RETRIEVE_CALL])),
        Reply(body=completion("E-203 是灯泡过热 [1]。")),
    )
    out = run(["ask", "E-203 是什么故障？", "--retrieval", "tool", "--json"], tmp_path, server)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["output"] == "E-203 是灯泡过热 [1]。"
    assert answer["citations"][0]["index"] == 1
    # each of the two replies reported 12 prompt and 5 completion tokens
    assert answer["usage"] == {
        "input_tokens": 24, "output_tokens": 10, "model_calls": 2, "tool_calls": 1,
        "retrievals": 1,
    }  # fmt: skip
    assert answer["stop_reason"] == "final" and answer["trace_id"]
