"""Model flags of ``ask`` and ``chat`` reach the request (real openai SDK, server on 127.0.0.1)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from support.chat_server import Reply, chunk, completion  # see conftest.py


def run(
    args: list[str], workspace: Path, server: Any, stdin: str = "", **env_extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_WORKSPACE=str(workspace),
        SHELFHAND_MODEL="local-model",
        OPENAI_BASE_URL=server.url,
        COLUMNS="200",
        **env_extra,
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


def test_ask_flags_win_over_the_environment(tmp_path: Path, server: Any) -> None:
    server.add(Reply(body=completion("你好！")))

    out = run(
        ["ask", "你好", "--max-tokens", "64", "--temperature", "0.2", "--tool-choice", "none"],
        tmp_path,
        server,
        SHELFHAND_MAX_TOKENS="999",
    )

    assert out.returncode == 0, out.stderr
    body = server.requests[0].body
    assert (body["max_tokens"], body["temperature"]) == (64, 0.2)
    assert "tools" not in body  # tool_choice none: nothing offered


def test_chat_sends_the_tool_mode_and_max_tokens(tmp_path: Path, server: Any) -> None:
    server.add(Reply(sse=[chunk({"content": '{"tool": "none", "answer": "hi there"}'})]))

    # (with tools to choose from: with nothing indexed and no other tool, a chat offers none,
    # and there is no choice to constrain)
    flags = ["--demo-tools", "--max-tokens", "32", "--tool-mode", "constrained"]
    out = run(["chat", *flags], tmp_path, server, "hello\n\n")

    assert out.returncode == 0, out.stderr
    body = server.requests[0].body
    assert body["max_tokens"] == 32 and "response_format" in body
    assert "hi there" in out.stdout and '"tool"' not in out.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [(["--temperature", "5"], "temperature"), (["--tool-mode", "xml"], "tool_mode")],
)
def test_an_invalid_flag_fails_before_any_request(
    tmp_path: Path, server: Any, flags: list[str], message: str
) -> None:
    out = run(["ask", "hi", *flags], tmp_path, server)

    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert server.requests == []
