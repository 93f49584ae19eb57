"""What the job tests share: an app on a workspace and a database, and small documents."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings

SCRIPT = Path(__file__).with_name("worker_process.py")
SRC = Path(__file__).resolve().parents[2] / "src"

ALICE = UserContext(tenant_id="acme", user_id="alice", roles=("support",))

FAQ_EN = (
    "# Returns\n\nProjectors can be returned within 30 days of delivery when the lamp hours "
    "stay under 50.\n"
)
FAQ_ZH = "# 退货政策\n\n投影仪在签收后七天内可以无理由退货，灯泡使用时长需低于五十小时。\n"


def job_env(pg_url: str, *, mode: str = "keyword") -> dict[str, str]:
    return {"SHELFHAND_DATABASE_URL": pg_url, "SHELFHAND_RETRIEVAL_MODE": mode}


def make_app(workspace: Path, pg_url: str, *, mode: str = "keyword") -> App:
    workspace.mkdir(parents=True, exist_ok=True)
    env = job_env(pg_url, mode=mode)
    if mode != "keyword":
        env["SHELFHAND_EMBEDDER"] = "hashing"
    return App(settings=Settings.load(workspace, env=env))


class Workers:
    """Worker processes started by a test, all stopped when it ends."""

    def __init__(self, workspace: Path, pg_url: str) -> None:
        self.workspace = workspace
        self.env = {
            **os.environ,
            **job_env(pg_url),
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(
        self, *hold: Path, each: bool = False, concurrency: int = 1
    ) -> subprocess.Popen[bytes]:
        args = ["--concurrency", str(concurrency)]
        if hold:
            args += ["--hold-each" if each else "--hold-after-stored", *map(str, hold)]
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), str(self.workspace), *args],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(30)
            if proc.stderr is not None:
                proc.stderr.close()


def wait_for(check: Callable[[], bool], what: str, proc: subprocess.Popen[bytes]) -> None:
    """Poll ``check`` for up to 90 s (a loaded 2-core box); fail with the worker's log."""
    deadline = time.monotonic() + 90
    pause = threading.Event()
    while not check():
        if proc.poll() is not None and proc.returncode not in (0, -9):
            err = proc.stderr.read().decode() if proc.stderr else ""
            pytest.fail(f"worker exited {proc.returncode} while waiting for {what}:\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        pause.wait(0.1)
