"""A 0.3 A2A client (``a2a-sdk`` 0.3, in its own interpreter) still talks to our server.

The 0.3 and 1.x SDKs cannot share one environment, so this runs only where
``SHELFHAND_A2A03_PYTHON`` names a Python with ``a2a-sdk==0.3.*`` and ``httpx`` installed
(e.g. ``python -m venv /tmp/a2a03 && /tmp/a2a03/bin/pip install 'a2a-sdk[http-server]==0.3.26'``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("a2a", reason="the a2a extra is not installed")

from service_helpers import ThreadServer
from test_openai_endpoint import retrieve_then_quote, serve, with_documents

from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call

PYTHON = os.environ.get("SHELFHAND_A2A03_PYTHON", "")
CLIENT = Path(__file__).resolve().parents[1] / "support" / "a2a_v03_client.py"


def ask_as_0_3(server: ThreadServer, question: str) -> dict[str, str]:
    """What the 0.3 client (its own interpreter) printed: the card's version, the answer
    text and the task's state."""
    out = subprocess.run(
        [PYTHON, str(CLIENT), server.url, "key-alice", question],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    found: dict[str, str] = json.loads(out.stdout.strip().splitlines()[-1])
    return found


@pytest.mark.skipif(not PYTHON, reason="SHELFHAND_A2A03_PYTHON is not set")
def test_an_a2a_0_3_client_gets_a_cited_answer(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = with_documents(
        serve(tmp_path, FunctionModel(retrieve_then_quote), thread_servers), tmp_path
    )
    result = ask_as_0_3(server, "投影仪保修多久？")
    assert result["state"] == "completed"
    assert "ALPHA-7" in result["answer"] and "OMEGA-9" not in result["answer"]


@pytest.mark.skipif(not PYTHON, reason="SHELFHAND_A2A03_PYTHON is not set")
def test_an_a2a_0_3_client_gets_the_checked_answer_alone(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    """The model says 36 months where the passage says 12: the check replaces its answer, and
    the artifact's last chunk replaces what streamed (``append`` false), which the 0.3 SDK
    follows too: its task holds the checked answer alone."""
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "投影仪保修"}), text("保修 36 个月 [1]。")]
    )
    server = with_documents(serve(tmp_path, model, thread_servers), tmp_path)
    answer = ask_as_0_3(server, "投影仪保修多久？")["answer"]
    assert "12 个月" in answer and "36" not in answer and "已被替换" not in answer
