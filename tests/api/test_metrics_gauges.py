"""``/metrics`` gauges read at scrape time: chunks waiting for their embeddings, and the ingest
jobs waiting for a worker or running on the job queue (PostgreSQL)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from service_helpers import ALICE, BOB, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter

ADMIN_KEY = {"Authorization": "Bearer key-root"}
FAQ = "# 退货\n\n拆封后 7 天内可退货。\n\n## Returns\n\nUnopened items can be returned within 30 days.\n"


def keys() -> dict[str, UserContext]:
    return {
        **user_contexts(),
        "key-root": UserContext(tenant_id="t1", user_id="root", roles=["admin"]),
    }


def gauges(url: str) -> dict[str, float]:
    """The ``shelfhand_pending_embeddings`` and ``shelfhand_queue_jobs`` samples, by line."""
    scraped = httpx.get(f"{url}/metrics", headers=ADMIN_KEY, timeout=30)
    assert scraped.status_code == 200, scraped.text
    found: dict[str, float] = {}
    for line in scraped.text.splitlines():
        if line.startswith(("shelfhand_pending_embeddings", "shelfhand_queue_jobs")):
            name, value = line.rsplit(" ", 1)
            found[name] = float(value)
    return found


class DownEmbedder(HashingEmbedder):
    """An embedding service that is down: uploaded chunks stay pending (keyword-searchable)."""

    def embed(self, texts: Sequence[str]) -> Any:
        raise ConnectionError("embedding service unreachable")


def test_chunks_waiting_for_their_embeddings_are_a_gauge(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    settings = Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"any": DownEmbedder()}))
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys()))
    thread_servers.append(server)
    assert gauges(server.url)["shelfhand_pending_embeddings"] == 0
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        files = [("files", ("退货.md", FAQ.encode(), "text/markdown"))]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
    chunks = server.service.kb.count_chunks()
    assert chunks > 0
    assert gauges(server.url)["shelfhand_pending_embeddings"] == chunks


def _server(workspace: Path, pg_url: str) -> ThreadServer:
    env = {"SHELFHAND_DATABASE_URL": pg_url, "SHELFHAND_RETRIEVAL_MODE": "keyword"}
    app = App(settings=Settings.load(workspace, env=env))
    return start_thread_server(create_app(app, config=ServiceConfig(job_wait=0.2), api_keys=keys()))


def test_the_job_queue_depth_counts_jobs_waiting_for_a_worker(
    tmp_path: Path, pg_url: str, thread_servers: list[ThreadServer]
) -> None:
    server = _server(tmp_path, pg_url)
    thread_servers.append(server)
    empty = gauges(server.url)
    assert empty['shelfhand_queue_jobs{status="todo"}'] == 0
    assert empty['shelfhand_queue_jobs{status="doing"}'] == 0
    assert empty["shelfhand_pending_embeddings"] == 0  # keyword-only: nothing to embed

    def upload(who: dict[str, str]) -> int:
        with httpx.Client(base_url=server.url, headers=who, timeout=60) as c:
            files = [("files", ("退货.md", FAQ.encode(), "text/markdown"))]
            return c.post("/v1/knowledge/files", files=files).status_code

    with ThreadPoolExecutor(2) as pool:  # two tenants at once, no worker running
        assert list(pool.map(upload, [ALICE, BOB])) == [202, 202]
    queued = gauges(server.url)
    assert queued['shelfhand_queue_jobs{status="todo"}'] == 2
    assert queued['shelfhand_queue_jobs{status="doing"}'] == 0


def test_a_scrape_while_postgresql_is_down_serves_the_rest_without_the_queue_gauges(
    tmp_path: Path, pg_url: str, pg_server: Any, thread_servers: list[ThreadServer]
) -> None:
    server = _server(tmp_path, pg_url)
    thread_servers.append(server)
    assert 'shelfhand_queue_jobs{status="todo"}' in gauges(server.url)
    pg_server.stop()
    try:
        scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN_KEY, timeout=60)
    finally:
        pg_server.start()
    assert scraped.status_code == 200, scraped.text
    assert "shelfhand_turns_total" in scraped.text or "shelfhand_breaker_state" in scraped.text
    assert "shelfhand_queue_jobs{" not in scraped.text  # unreadable now: left out, not 0
    assert 'shelfhand_queue_jobs{status="todo"}' in gauges(server.url)  # back with PostgreSQL


def test_a_paused_reranker_and_the_query_embedder_are_breaker_gauges(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    env = {
        "SHELFHAND_EMBEDDER": "hashing",
        "SHELFHAND_RERANK": "endpoint",
        "SHELFHAND_RERANK_URL": "http://127.0.0.1:9",  # nothing listens: every ranking fails
    }
    app = App(
        settings=Settings.load(tmp_path, env=env),
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys()))
    thread_servers.append(server)

    def states() -> dict[str, str]:
        scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN_KEY, timeout=30).text
        return {
            line.split('"')[1]: line.rsplit(" ", 1)[1]
            for line in scraped.splitlines()
            if line.startswith('shelfhand_breaker_state{breaker="knowledge: ')
        }

    assert states() == {"knowledge: query embedding": "0.0", "knowledge: rerank": "0.0"}
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        files = [("files", ("退货.md", FAQ.encode(), "text/markdown"))]
        assert c.post("/v1/knowledge/files", files=files).status_code in (200, 201, 202)
        for _ in range(3):
            found = c.get("/v1/knowledge/search", params={"q": "退货 returned"})
            assert found.status_code == 200 and found.json()["results"]
    assert states() == {"knowledge: query embedding": "0.0", "knowledge: rerank": "2.0"}
