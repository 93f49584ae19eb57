"""Real servers on 127.0.0.1 for the service tests.

Two kinds: ``shelfhand serve`` as a user runs it (a subprocess, configured by environment and
a scripted-model file), and the same FastAPI app in a uvicorn thread of the test process
(for fakes a subprocess cannot hold, such as a model that waits for the test).
"""

from __future__ import annotations

import json
import os
import queue
import re
import select
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shelfhand.core.context import UserContext

KEYS: dict[str, dict[str, Any]] = {
    "key-alice": {"tenant": "t1", "user": "alice", "roles": ["user"]},
    "key-carol": {"tenant": "t1", "user": "carol", "roles": ["user"]},
    "key-bob": {"tenant": "t2", "user": "bob", "roles": ["user"]},
    "key-dora": {"tenant": "t1", "user": "dora", "roles": ["hr"]},
}
ALICE = {"Authorization": "Bearer key-alice"}
CAROL = {"Authorization": "Bearer key-carol"}
BOB = {"Authorization": "Bearer key-bob"}
DORA = {"Authorization": "Bearer key-dora"}

STARTED = re.compile(r"Uvicorn running on (http://127\.0\.0\.1:\d+)")


def user_contexts() -> dict[str, UserContext]:
    return {
        k: UserContext(tenant_id=v["tenant"], user_id=v["user"], roles=v["roles"])
        for k, v in KEYS.items()
    }


@dataclass
class ServeProcess:
    """A running ``shelfhand serve``; ``log`` collects its output lines."""

    process: subprocess.Popen[str]
    url: str
    workspace: Path
    log: list[str] = field(default_factory=list)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_serve(
    workspace: Path,
    *,
    script: Any | None = None,
    env: Mapping[str, str] | None = None,
    args: tuple[str, ...] = (),
    cwd: Path | None = None,
) -> ServeProcess:
    """Start ``shelfhand serve --port 0`` and wait (bounded) for uvicorn's start-up line;
    with ``cwd``, in that folder, which Python does not search for modules (as with the
    ``shelfhand`` command: ``python -P``)."""
    workspace.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    full_env.update(
        {
            "SHELFHAND_EMBEDDER": "hashing",
            "SHELFHAND_API_KEYS": json.dumps(KEYS),
            "PYTHONUNBUFFERED": "1",
        }
    )
    if script is not None:
        path = workspace / "script.json"
        path.write_text(json.dumps(script, ensure_ascii=False), encoding="utf-8")
        full_env["SHELFHAND_MODEL"] = f"scripted:{path}"
    full_env.update(env or {})
    process = subprocess.Popen(
        [
            sys.executable,
            *(("-P",) if cwd is not None else ()),
            "-m",
            "shelfhand.cli",
            "serve",
            "-w",
            str(workspace),
            "--port",
            "0",
            *args,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        env=full_env,
        cwd=cwd,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    log: list[str] = []

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            log.append(line)
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    while True:
        try:
            line = lines.get(timeout=60)
        except queue.Empty:
            process.kill()
            raise AssertionError(
                "shelfhand serve did not start within 60 s:\n" + "".join(log)
            ) from None
        if line is None:
            raise AssertionError("shelfhand serve exited during start-up:\n" + "".join(log))
        if found := STARTED.search(line):
            return ServeProcess(process=process, url=found.group(1), workspace=workspace, log=log)


@dataclass
class ThreadServer:
    url: str
    api: Any
    server: Any
    thread: threading.Thread

    @property
    def service(self) -> Any:
        return self.api.state.service

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)


def start_thread_server(api: Any) -> ThreadServer:
    """Serve a FastAPI app from a uvicorn thread on a socket that already listens, so
    clients may connect at once (they queue until the lifespan has started)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(api, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    return ThreadServer(url=f"http://127.0.0.1:{port}", api=api, server=server, thread=thread)


def pg_keyword_settings(workspace: Path, pg_url: str) -> Any:
    """The settings of a workspace whose knowledge store is PostgreSQL at ``pg_url``,
    searched by keyword (no embedding to wait for)."""
    from shelfhand.core.settings import Settings

    env = {"SHELFHAND_DATABASE_URL": pg_url, "SHELFHAND_RETRIEVAL_MODE": "keyword"}
    return Settings.load(workspace, env=env)


def serve_without_model(settings: Any, thread_servers: list[ThreadServer]) -> ThreadServer:
    """The service of ``settings`` with no chat model and :func:`user_contexts`' keys, in a
    uvicorn thread (stopped by the test's ``thread_servers`` fixture)."""
    from shelfhand.api import ServiceConfig, create_app
    from shelfhand.app import App

    api = create_app(
        App(settings=settings, model=None), config=ServiceConfig(), api_keys=user_contexts()
    )
    server = start_thread_server(api)
    thread_servers.append(server)
    return server


def parse_sse(text: str) -> list[dict[str, Any]]:
    """Events of an SSE body: each ``data`` decoded, with ``_event`` and ``_id`` added."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            key, _, value = line.partition(": ")
            fields[key] = value
        data = json.loads(fields["data"])
        data["_event"] = fields.get("event")
        data["_id"] = int(fields["id"])
        events.append(data)
    return events


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def ask_turn(url: str, who: dict[str, str], question: str) -> dict[str, Any]:
    """One non-streamed chat turn in a new session, as ``who``: the reply's JSON."""
    import httpx

    with httpx.Client(base_url=url, headers=who, timeout=60) as c:
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": question, "stream": False})
    assert r.status_code == 200, r.text
    return dict(r.json())


def send_until_answered(
    server: ThreadServer, path: str, headers: dict[str, str], most_mib: int, start: bytes = b""
) -> tuple[bytes, int]:
    """POST a chunked body of ``start`` and up to ``most_mib`` MiB more (no length said up
    front), and stop sending once the server answers: the answer's first bytes, and the MiB
    sent."""
    host, port = server.url.removeprefix("http://").split(":")
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    framed = b"100000\r\n" + b"a" * 1024**2 + b"\r\n"  # 1 MiB a chunk
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n{head}\r\n".encode()
        )
        if start:
            sock.sendall(f"{len(start):x}\r\n".encode() + start + b"\r\n")
        sent = 0
        try:
            while sent < most_mib and not select.select([sock], [], [], 0)[0]:
                sock.sendall(framed)
                sent += 1
        except OSError:  # the server answered and closed
            pass
        return sock.recv(65536), sent
