"""``shelfhand search`` with rerank settings, run as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def shelfhand(*args: str, workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    full_env.update(env, SHELFHAND_WORKSPACE=str(workspace), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def test_a_failing_reranker_still_answers_and_says_why(tmp_path: Path) -> None:
    env = {"SHELFHAND_RETRIEVAL_MODE": "keyword"}
    assert shelfhand("ingest", "--samples", workspace=tmp_path, env=env).returncode == 0
    broken = {**env, "SHELFHAND_RERANK": "endpoint", "SHELFHAND_RERANK_URL": "http://127.0.0.1:9"}
    out = shelfhand("search", "E-203 是什么故障？", "-k", "2", workspace=tmp_path, env=broken)
    assert out.returncode == 0, out.stderr
    assert "[1]" in out.stdout and "E-203" in out.stdout
    assert "fused order kept" in out.stdout and "unreachable" in out.stdout


def test_rerank_endpoint_without_a_url_stops_start_up(tmp_path: Path) -> None:
    out = shelfhand("search", "x", workspace=tmp_path, env={"SHELFHAND_RERANK": "endpoint"})
    assert out.returncode == 2
    assert "SHELFHAND_RERANK_URL" in out.stderr and "Traceback" not in out.stderr
