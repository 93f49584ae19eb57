"""The ``shelfhand`` command line run as a user runs it: a subprocess with a clean
environment (no SHELFHAND_ or OPENAI_ variables from the machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_cli(
    args: list[str],
    workspace: Path,
    server: Any | None = None,
    *,
    stdin: str | None = None,
    cwd: Path | None = None,
    **env_extra: str,
) -> subprocess.CompletedProcess[str]:
    """``shelfhand ARGS`` on ``workspace`` with hashing embeddings; with ``server`` (a chat
    server on 127.0.0.1) as its chat model; ``stdin``: what is typed (``chat``); ``cwd``: the
    folder it runs in."""
    env = cli_env(workspace, server, **env_extra)
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        input=stdin,
        cwd=cwd,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def cli_env(workspace: Path, server: Any | None = None, **env_extra: str) -> dict[str, str]:
    """The environment :func:`run_cli` runs the command line in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_WORKSPACE=str(workspace), SHELFHAND_EMBEDDER="hashing", COLUMNS="200")
    if server is not None:
        env.update(
            SHELFHAND_MODEL="local-model",
            OPENAI_BASE_URL=server.url,
            OPENAI_API_KEY="sk-test-not-a-secret",
        )
    env.update(env_extra)
    return env
