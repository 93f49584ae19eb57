"""``shelfhand ask --json``: the answer with its citations and the run's usage, through the
real openai SDK and a chat-completions server on 127.0.0.1 that reports usage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shelfhand.knowledge.base import sample_corpus
from support.chat_server import Reply, completion

RETRIEVE_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "retrieve", "arguments": json.dumps({"query": "E-203"})},
}


def run(args: list[str], workspace: Path, server: Any) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_WORKSPACE=str(workspace),
        SHELFHAND_EMBEDDER="hashing",
        SHELFHAND_MODEL="local-model",
        OPENAI_BASE_URL=server.url,
        OPENAI_API_KEY="sk-test-not-a-secret",
    )
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


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
