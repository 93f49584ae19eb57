"""Uploads as ingest jobs: two service instances on one PostgreSQL queue and a real worker
process (``database_url`` set). Waits are bounded polls of the API."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import (
    ALICE,
    BOB,
    CAROL,
    DORA,
    ThreadServer,
    parse_sse,
    start_thread_server,
    user_contexts,
)

from shelfhand.api import create_app
from shelfhand.api.deps import ServiceConfig
from shelfhand.app import App
from shelfhand.core.settings import Settings

WORKER = Path(__file__).resolve().parents[1] / "jobs" / "worker_process.py"
SRC = Path(__file__).resolve().parents[2] / "src"

FAQ_EN = "# Returns\n\nProjectors can be returned within 30 days when the lamp hours stay low.\n"
FAQ_ZH = "# 退货政策\n\n投影仪在签收后七天内可以无理由退货，灯泡使用时长需低于五十小时。\n"


def _env(pg_url: str) -> dict[str, str]:
    return {"SHELFHAND_DATABASE_URL": pg_url, "SHELFHAND_RETRIEVAL_MODE": "keyword"}


def _server(workspace: Path, pg_url: str, *, job_wait: float = 60.0) -> ThreadServer:
    app = App(settings=Settings.load(workspace, env=_env(pg_url)))
    api = create_app(app, config=ServiceConfig(job_wait=job_wait), api_keys=user_contexts())
    return start_thread_server(api)


@pytest.fixture
def worker_factory(pg_url: str) -> Iterator[Any]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(workspace: Path) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            **_env(pg_url),
            "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
        }
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(workspace)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _poll(client: httpx.Client, url: str, headers: dict[str, str]) -> dict[str, Any]:
    """GET ``url`` until the job is final (bounded: 90 s on a loaded box)."""
    deadline = time.monotonic() + 90
    pause = threading.Event()
    while True:
        body: dict[str, Any] = client.get(url, headers=headers).json()
        if body.get("status") in ("done", "failed"):
            return body
        if time.monotonic() > deadline:
            pytest.fail(f"job not final in time: {body}")
        pause.wait(0.2)


def test_an_upload_through_one_instance_is_searchable_through_another_once_its_job_is_done(
    tmp_path: Path, pg_url: str, thread_servers: list[ThreadServer], worker_factory: Any
) -> None:
    # each instance and the worker with a workspace folder of its own, as on separate machines
    workspace = tmp_path / "worker"
    workspace.mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = _server(tmp_path / "a", pg_url, job_wait=0.5)
    b = _server(tmp_path / "b", pg_url)
    thread_servers.extend([a, b])
    with httpx.Client(timeout=60) as client:
        # no worker yet: the upload is queued and answered 202 with the job to poll
        r = client.post(
            f"{a.url}/v1/knowledge/files",
            headers=ALICE,
            files=[("files", ("退货.md", FAQ_ZH.encode(), "text/markdown"))],
        )
        assert r.status_code == 202, r.text
        job = r.json()
        assert job["status"] == "queued" and job["sources"] == ["t1/退货.md"]
        assert r.headers["location"] == f"/v1/knowledge/jobs/{job['id']}"
        # progress is visible from the other instance; not to another tenant, nor another user
        seen = client.get(f"{b.url}/v1/knowledge/jobs/{job['id']}", headers=ALICE)
        assert seen.status_code == 200 and seen.json()["status"] == "queued"
        assert seen.json()["progress"]["files_total"] == 1
        assert client.get(f"{b.url}/v1/knowledge/jobs/{job['id']}", headers=BOB).status_code == 404
        assert (
            client.get(f"{b.url}/v1/knowledge/jobs/{job['id']}", headers=CAROL).status_code == 404
        )
        listed = client.get(f"{b.url}/v1/knowledge/jobs", headers=ALICE).json()["jobs"]
        assert [j["id"] for j in listed] == [job["id"]]

        worker_factory(workspace)
        done = _poll(client, f"{b.url}/v1/knowledge/jobs/{job['id']}", ALICE)
        assert done["status"] == "done", done
        assert done["result"]["added"] == ["t1/退货.md"] and done["result"]["job_id"] == job["id"]
        assert done["progress"]["phase"] == "done" and done["progress"]["files_done"] == 1
        hits = client.get(
            f"{b.url}/v1/knowledge/search",
            headers=ALICE,
            params={"q": "无理由退货", "mode": "keyword"},
        ).json()["results"]
        assert [h["source"] for h in hits] == ["t1/退货.md"]
        assert (
            client.get(
                f"{b.url}/v1/knowledge/search", headers=BOB, params={"q": "无理由退货"}
            ).json()["results"]
            == []
        )
        # listed through either instance: the upload records are in PostgreSQL too
        for url in (a.url, b.url):
            sources = client.get(f"{url}/v1/knowledge/sources", headers=ALICE).json()["sources"]
            assert [s["source"] for s in sources] == ["t1/退货.md"]

        # with a worker running, an upload answers as an in-process one did (plus job_id)
        r = client.post(
            f"{b.url}/v1/knowledge/files",
            headers=ALICE,
            files=[("files", ("returns.md", FAQ_EN.encode(), "text/markdown"))],
        )
        assert r.status_code == 200, r.text
        assert r.json()["added"] == ["t1/returns.md"] and r.json()["job_id"]

        # and streams progress, then ingest_done, as before
        r = client.post(
            f"{a.url}/v1/knowledge/files",
            headers=ALICE,
            params={"stream": "true"},
            files=[("files", ("returns.md", (FAQ_EN + "\nUpdated.\n").encode(), "text/markdown"))],
        )
        events = parse_sse(r.text)
        assert events[-1]["type"] == "ingest_done", events
        assert events[-1]["updated"] == ["t1/returns.md"]
        assert all(e["type"] == "ingest_progress" for e in events[:-1])

        # deleting through either instance removes it from search
        gone = client.delete(f"{a.url}/v1/knowledge/sources/t1/returns.md", headers=ALICE)
        assert gone.status_code == 204
        hits = client.get(
            f"{b.url}/v1/knowledge/search",
            headers=ALICE,
            params={"q": "lamp hours returned", "mode": "keyword"},
        ).json()["results"]
        assert hits == []


def test_an_unreadable_upload_is_refused_at_once_and_queues_nothing(
    tmp_path: Path, pg_url: str, thread_servers: list[ThreadServer]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    a = _server(workspace, pg_url, job_wait=0.2)
    thread_servers.append(a)
    with httpx.Client(timeout=60) as client:
        r = client.post(
            f"{a.url}/v1/knowledge/files",
            headers=ALICE,
            files=[("files", ("manual.pdf", b"%PDF-1.7 not a pdf", "application/pdf"))],
        )
        assert r.status_code == 422 and r.json()["code"] == "unreadable_document"
        assert client.get(f"{a.url}/v1/knowledge/jobs", headers=ALICE).json()["jobs"] == []
        r = client.post(
            f"{a.url}/v1/knowledge/files",
            headers=ALICE,
            params={"wait": "false"},
            files=[("files", ("faq.md", FAQ_EN.encode(), "text/markdown"))],
        )
        assert r.status_code == 202 and r.json()["status"] == "queued"
        missing = client.get(f"{a.url}/v1/knowledge/jobs/nope", headers=ALICE)
        assert missing.status_code == 404


def test_job_endpoints_answer_503_while_postgresql_is_down_and_recover(
    tmp_path: Path, pg_url: str, pg_server: Any, thread_servers: list[ThreadServer]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    a = _server(workspace, pg_url)
    thread_servers.append(a)
    with httpx.Client(timeout=60) as client:
        assert client.get(f"{a.url}/v1/knowledge/jobs", headers=ALICE).status_code == 200
        pg_server.stop()
        try:
            down = client.get(f"{a.url}/v1/knowledge/jobs", headers=ALICE)
            assert down.status_code == 503, down.text
            assert "PostgreSQL" in down.json()["detail"]
        finally:
            pg_server.start()
        assert client.get(f"{a.url}/v1/knowledge/jobs", headers=ALICE).status_code == 200


def test_a_source_the_caller_may_not_replace_is_refused_before_anything_is_queued(
    tmp_path: Path, pg_url: str, thread_servers: list[ThreadServer]
) -> None:
    from shelfhand.jobs.worker import build_runner, close_runner

    workspace = tmp_path / "ws"
    workspace.mkdir()
    a = _server(workspace, pg_url)
    thread_servers.append(a)
    with httpx.Client(timeout=60) as client:
        r = client.post(
            f"{a.url}/v1/knowledge/files",
            headers=DORA,
            params={"wait": "false"},
            data={"tags": "hr"},
            files=[("files", ("salaries.md", b"# Salaries\n\nConfidential.\n", "text/markdown"))],
        )
        assert r.status_code == 202, r.text
        runner = build_runner(
            App(settings=Settings.load(workspace, env=_env(pg_url))), a.service.jobs
        )
        try:
            assert runner.run(r.json()["id"]).status == "done"  # type: ignore[union-attr]
        finally:
            close_runner(runner)
        before = client.get(f"{a.url}/v1/knowledge/jobs", headers=DORA).json()["jobs"]
        # alice (same tenant, no role hr) may not replace it: 409 at once, no job queued
        r = client.post(
            f"{a.url}/v1/knowledge/files",
            headers=ALICE,
            files=[("files", ("salaries.md", b"# Salaries\n\nPublic now.\n", "text/markdown"))],
        )
        assert r.status_code == 409 and r.json()["code"] == "source_conflict"
        assert client.get(f"{a.url}/v1/knowledge/jobs", headers=ALICE).json()["jobs"] == []
        assert client.get(f"{a.url}/v1/knowledge/jobs", headers=DORA).json()["jobs"] == before


def test_with_no_worker_alive_an_upload_answers_202_at_once_and_readyz_says_so(
    tmp_path: Path, pg_url: str, thread_servers: list[ThreadServer], worker_factory: Any
) -> None:
    """Before, the upload waited the whole job_wait (300 s by default) for a worker that was
    not there, and /readyz said nothing of workers."""
    server = _server(tmp_path / "a", pg_url, job_wait=120)
    thread_servers.append(server)
    files = [("files", ("退货.md", FAQ_ZH.encode(), "text/markdown"))]
    with httpx.Client(base_url=server.url, timeout=60) as client:
        assert "none alive" in client.get("/readyz").json()["workers"]
        started = time.monotonic()
        r = client.post("/v1/knowledge/files", headers=ALICE, files=files)
        assert r.status_code == 202, r.text
        assert time.monotonic() - started < 20  # (not job_wait's 120 s)
        assert "no ingest worker is alive" in r.json()["note"]
        # streamed: one ingest_queued event at once, with the same note
        started = time.monotonic()
        streamed = client.post(
            "/v1/knowledge/files",
            headers=ALICE,
            params={"stream": "true"},
            files=[("files", ("guide.md", b"# Guide\n\nSteps.\n", "text/markdown"))],
        )
        assert streamed.status_code == 200, streamed.text
        assert time.monotonic() - started < 20
        [queued] = parse_sse(streamed.text)
        assert queued["type"] == "ingest_queued" and queued["status"] == "queued"
        assert "no ingest worker is alive" in queued["note"]

        (tmp_path / "worker").mkdir()
        worker_factory(tmp_path / "worker")
        deadline = time.monotonic() + 60
        while client.get("/readyz").json()["workers"] != "1 alive":
            assert time.monotonic() < deadline, "the worker never said it was alive"
            time.sleep(0.3)
        for job_id in (r.json()["id"], queued["id"]):
            done = _poll(client, f"/v1/knowledge/jobs/{job_id}", ALICE)
            assert done["status"] == "done", done
        # with a worker alive, the next upload follows its job to the end, as before
        files = [("files", ("returns.md", FAQ_EN.encode(), "text/markdown"))]
        r = client.post("/v1/knowledge/files", headers=ALICE, files=files)
        assert r.status_code == 200, r.text
        assert r.json()["added"] == ["t1/returns.md"]
