"""examples/openai_client.py and examples/a2a_two_services.py run, and do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_example(name: str, *args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / name), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr
    return out.stdout


def test_the_openai_client_example_gets_cited_answers_usage_steps_and_one_session(
    tmp_path: Path,
) -> None:
    lines = run_example("openai_client.py", str(tmp_path))
    assert "models: ['shelfhand']" in lines
    assert (
        "answer: 整机保修期为自购买之日起 12 个月 [1]。\n\n来源：\n[1] 明光投影仪保修政策" in lines
    )
    assert "> running `retrieve`" in lines and "streamed usage:" in lines
    sessions = {line.split(":")[0] for line in lines.splitlines() if line.startswith("session ")}
    assert len(sessions) == 1  # the same `user` continued one session


def test_the_two_services_example_delegates_over_a2a_with_the_remote_citation() -> None:
    pytest.importorskip("a2a", reason="the a2a extra is not installed")
    lines = run_example("a2a_two_services.py")
    assert "front desk: 文档团队答复：整机保修期为自购买之日起 12 个月 [1]。" in lines
    assert "delegated to: ['docs_team']" in lines
    assert "[1] projector/warranty-policy-v1.md" in lines
