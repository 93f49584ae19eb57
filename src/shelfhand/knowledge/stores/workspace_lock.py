"""One writer per workspace, across processes: an ``flock`` on ``<workspace>/writer.lock``.

``shelfhand serve`` holds the lock for as long as it runs (uploads go through its API); a
command-line ``ingest`` or ``forget`` holds it while it writes. A second writer gets
:class:`~shelfhand.core.errors.WorkspaceBusyError` saying who holds the workspace::

    workspace ./kb is served by PID 4242 (shelfhand serve): upload through the API
    (POST /v1/knowledge/files), or stop the server first
    another ingest (PID 4243) is running on workspace ./kb: wait for it to finish, or pass
    --wait SECONDS

The kernel releases an ``flock`` when its holder exits, however it exits (``kill -9``
included), so a stale lock file never blocks anyone; the PID written into it is only for the
message.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Literal

from shelfhand.core.errors import WorkspaceBusyError

logger = logging.getLogger(__name__)

__all__ = ["LOCK_FILE", "WorkspaceLock", "busy_message"]

LOCK_FILE = "writer.lock"
Role = Literal["serve", "ingest", "forget"]
_POLL_SECONDS = 0.2


def busy_message(workspace: Path, holder: str, pid: int | None, wanted: str) -> str:
    """What to tell someone who wants to ``wanted`` a workspace that ``holder`` writes."""
    who = f"PID {pid}" if pid else "another process"
    if holder == "serve":
        return (
            f"workspace {workspace} is served by {who} (shelfhand serve): upload through the "
            "API (POST /v1/knowledge/files), or stop the server first"
        )
    if holder in ("ingest", "forget"):
        if wanted == "serve":
            then = "wait for it to finish, then start the server"
        else:
            then = "wait for it to finish, or pass --wait SECONDS"
        return f"another {holder} ({who}) is running on workspace {workspace}: {then}"
    return f"workspace {workspace} is locked by {who} ({workspace / LOCK_FILE}): try again later"


class WorkspaceLock:
    """The writer lock of one workspace.

    Args:
        workspace: The workspace folder (created if missing).
        role: What the holder does (``serve``, ``ingest`` or ``forget``); written into the
            lock file for the messages others get.
    """

    def __init__(self, workspace: Path, role: Role) -> None:
        self.workspace = Path(workspace)
        self.role: Role = role
        self._file: IO[str] | None = None
        self._guard = threading.Lock()

    @property
    def held(self) -> bool:
        return self._file is not None

    def acquire(
        self, *, wait: float = 0.0, on_wait: Callable[[str], None] | None = None
    ) -> WorkspaceLock:
        """Take the lock, waiting up to ``wait`` seconds for the holder to let go.

        Args:
            wait: Seconds to wait; 0 fails at once if the lock is taken.
            on_wait: Called once with the busy message when it starts waiting.

        Raises:
            WorkspaceBusyError: Someone else still holds it.
        """
        with self._guard:
            if self._file is not None:
                return self
            self.workspace.mkdir(parents=True, exist_ok=True)
            path = self.workspace / LOCK_FILE
            file = path.open("a+", encoding="utf-8")
            deadline = time.monotonic() + max(0.0, wait)
            told = False
            while True:
                try:
                    fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    holder, pid = _read_holder(path)
                    message = busy_message(self.workspace, holder, pid, self.role)
                    if time.monotonic() >= deadline:
                        file.close()
                        raise WorkspaceBusyError(message, holder=holder, pid=pid) from None
                    if on_wait is not None and not told:
                        on_wait(message)
                        told = True
                    time.sleep(_POLL_SECONDS)
            file.seek(0)
            file.truncate()
            file.write(json.dumps({"pid": os.getpid(), "role": self.role, "since": time.time()}))
            file.flush()
            self._file = file
            logger.debug("workspace %s locked for %s", self.workspace, self.role)
            return self

    def release(self) -> None:
        """Let go (idempotent). The holder's PID is cleared so no one reads a stale one."""
        with self._guard:
            file, self._file = self._file, None
            if file is None:
                return
            try:
                file.seek(0)
                file.truncate()
                file.flush()
            finally:
                fcntl.flock(file.fileno(), fcntl.LOCK_UN)
                file.close()

    @staticmethod
    def is_free(workspace: Path) -> bool:
        """Whether no process holds the workspace's writer lock right now (a snapshot)."""
        path = Path(workspace) / LOCK_FILE
        if not path.exists():
            return True
        with path.open("a+", encoding="utf-8") as file:
            try:
                fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(file.fileno(), fcntl.LOCK_UN)
            return True

    def __enter__(self) -> WorkspaceLock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _read_holder(path: Path) -> tuple[str, int | None]:
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
        pid = info.get("pid")
        return str(info.get("role", "")), int(pid) if pid else None
    except (OSError, ValueError, TypeError, AttributeError):
        return "", None
