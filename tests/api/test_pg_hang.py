"""A PostgreSQL that stops answering without closing its connections (its processes
stopped with SIGSTOP: to a client, a server stuck or behind a network that drops packets).
Before, a search and a session's message each hung past the client's 90 s timeout. Now,
with ``pg_timeout`` at 2 s, two callers of two tenants asking at once both get 503 within
seconds, the server stays healthy, and both get answers again once PostgreSQL resumes."""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
from service_helpers import ALICE, BOB, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.dev.services import LocalPostgres
from shelfhand.knowledge.types import Document
from support.knowledge import text_document

TEXT = "投影仪保修期为12个月。The projector warranty lasts twelve months."


@contextmanager
def stopped(server: LocalPostgres) -> Iterator[None]:
    """The server's processes stopped (SIGSTOP) for the block, then resumed."""
    pid = int((server.data / "postmaster.pid").read_text().split("\n", 1)[0])
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    for p in processes:
        p.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        for p in processes:
            with contextlib.suppress(psutil.Error):  # (gone meanwhile)
                p.send_signal(signal.SIGCONT)


def _document(tenant: str) -> Document:
    # (a document id is the store's, across tenants)
    return text_document(f"{tenant}/warranty.md", TEXT, title="Warranty", tenant_id=tenant)


def test_two_callers_get_503_within_the_timeout_while_postgresql_hangs_then_answers(
    tmp_path: Path, pg_url: str, pg_server: LocalPostgres, thread_servers: list[ThreadServer]
) -> None:
    env = {
        "SHELFHAND_DATABASE_URL": pg_url,
        "SHELFHAND_RETRIEVAL_MODE": "keyword",
        "SHELFHAND_EMBEDDER": "hashing",
        "SHELFHAND_PG_TIMEOUT": "2",
    }
    settings = Settings.load(tmp_path, env=env)
    with App(settings=settings).open_knowledge() as kb:
        kb.ingest_documents([_document("t1"), _document("t2")])  # alice's and bob's
    api = create_app(
        App(settings=settings, model=None), config=ServiceConfig(), api_keys=user_contexts()
    )
    server = start_thread_server(api)
    thread_servers.append(server)
    clients = [httpx.Client(base_url=server.url, headers=h, timeout=60) for h in (ALICE, BOB)]
    sessions = [c.post("/v1/sessions").json()["id"] for c in clients]

    def search(client: httpx.Client) -> tuple[int, float, str]:
        started = time.monotonic()
        r = client.get("/v1/knowledge/search", params={"q": "保修期"})
        return r.status_code, time.monotonic() - started, r.text

    def ask(pair: tuple[httpx.Client, str]) -> tuple[int, float, str]:
        client, session = pair
        started = time.monotonic()
        r = client.post(f"/v1/sessions/{session}/messages", json={"content": "保修期？"})
        return r.status_code, time.monotonic() - started, r.text

    try:
        assert ["warranty.md" in search(c)[2] for c in clients] == [True, True]
        with stopped(pg_server), ThreadPoolExecutor(2) as pool:
            searches = list(pool.map(search, clients))
            asked = list(pool.map(ask, zip(clients, sessions, strict=True)))
            health = clients[0].get("/healthz")
        for status, took, body in searches + asked:
            assert status == 503, body
            assert took < 15, (took, body)  # (before: no answer within 90 s)
            assert "PostgreSQL" in body
        assert any("did not answer within 2 s" in body for _, _, body in searches)
        assert health.status_code == 200

        deadline = time.monotonic() + 30
        results = [search(c) for c in clients]
        while any(r[0] != 200 for r in results) and time.monotonic() < deadline:
            time.sleep(0.5)
            results = [search(c) for c in clients]
        assert [r[0] for r in results] == [200, 200]
        assert all("warranty.md" in r[2] for r in results), results
        answered = [ask(p) for p in zip(clients, sessions, strict=True)]
        assert [a[0] for a in answered] == [200, 200], answered
        assert all("warranty.md" in a[2] for a in answered)
    finally:
        for c in clients:
            c.close()
