"""Two service replicas on one PostgreSQL and one Redis behave as one service (issue 14,
acceptance 2): two uvicorn servers on 127.0.0.1, each built by ``create_app`` over its own
workspace folder with ``database_url`` and ``redis_url`` pointing at the same real servers
(knowledge in the PostgreSQL store, keyword retrieval), and a scripted chat model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
from service_helpers import ALICE, BOB, CAROL, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.dev.services import LocalPostgres, LocalRedis
from shelfhand.testing import FunctionModel, text, tool_call
from shelfhand.tools.tool import tool

pytestmark = pytest.mark.anyio


@tool(confirm=True)
def create_return(order_id: str, reason: str) -> str:
    """Create a return for an order."""
    return f"RMA-{order_id}"


@tool(rate_limit="2/hour")
def send_sms(text: str) -> str:
    """Send a text message to the customer."""
    return f"sent: {text}"


def replica(
    workspace: Path, model: Any, pg_url: str, redis_url: str, servers: list[ThreadServer]
) -> ThreadServer:
    env = {
        "SHELFHAND_RETRIEVAL_MODE": "keyword",
        "SHELFHAND_ANSWER_RETRIEVAL": "tool",
        "SHELFHAND_DATABASE_URL": pg_url,
        "SHELFHAND_REDIS_URL": redis_url,
    }
    app = App(settings=Settings.load(workspace, env=env), model=model)
    api = create_app(app, config=ServiceConfig(), api_keys=user_contexts())
    for extra in (create_return, send_sms):
        api.state.service.toolkit.add(extra)
    server = start_thread_server(api)
    servers.append(server)
    return server


WORKER = Path(__file__).resolve().parents[1] / "jobs" / "worker_process.py"


@pytest.fixture
def worker(tmp_path: Path, pg_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """One ingest worker (``shelfhand worker``'s code, tests/jobs/worker_process.py) on the
    replicas' database: with ``database_url`` uploads are jobs it runs."""
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SHELFHAND_")},
        "SHELFHAND_RETRIEVAL_MODE": "keyword",
        "SHELFHAND_DATABASE_URL": pg_url,
        "PYTHONPATH": os.pathsep.join(
            [str(WORKER.parents[2] / "src"), os.environ.get("PYTHONPATH", "")]
        ),
    }
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), str(tmp_path / "worker")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    yield proc
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def last_user_text(messages: list[Message]) -> str:
    return next(m.text for m in reversed(messages) if m.role == "user")


class Model:
    """Answers by the last user message: ``slow`` waits for the test, ``退货`` asks for a
    return (needs approval), ``短信`` sends a text (rate limited); a tool result is echoed;
    anything else is answered with what the model saw of the conversation."""

    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        self.seen: list[list[Message]] = []

    async def __call__(self, messages: list[Message], tools: Any) -> Any:
        self.seen.append(messages)
        if messages[-1].role == "tool":
            return text("工具结果：" + messages[-1].tool_results[0].content)
        asked = last_user_text(messages)
        if asked.startswith("slow"):
            self.entered.release()
            await asyncio.to_thread(self.release.wait, 20)
            return text("slow done")
        if asked.startswith("退货"):
            return tool_call("create_return", {"order_id": "A-1001", "reason": "坏了"})
        if asked.startswith("短信"):
            return tool_call("send_sms", {"text": asked})
        users = [m.text for m in messages if m.role == "user"]
        # (no count in words: a number the conversation does not hold, written with no tool
        # run, would make the agent search the documents and ask again)
        return text("我看到了这些消息：" + " / ".join(users))


async def message(c: httpx.AsyncClient, session: str, content: str) -> httpx.Response:
    return await c.post(
        f"/v1/sessions/{session}/messages", json={"content": content, "stream": False}
    )


async def test_two_replicas_on_one_postgresql_and_redis_behave_as_one_service(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
    thread_servers: list[ThreadServer],
    worker: subprocess.Popen[bytes],
) -> None:
    model = Model()
    fn = FunctionModel(model)
    a = replica(tmp_path / "a", fn, pg_url, redis_url, thread_servers)
    b = replica(tmp_path / "b", fn, pg_url, redis_url, thread_servers)
    async with (
        httpx.AsyncClient(base_url=a.url, headers=ALICE, timeout=30) as alice_a,
        httpx.AsyncClient(base_url=b.url, headers=ALICE, timeout=30) as alice_b,
        httpx.AsyncClient(base_url=b.url, headers=CAROL, timeout=30) as carol_b,
        httpx.AsyncClient(base_url=b.url, headers=BOB, timeout=30) as bob_b,
    ):
        # 1. a session created on A continues on B, with its memory
        session = (await alice_a.post("/v1/sessions")).json()["id"]
        first = await message(alice_a, session, "我的订单号是 A-1001")
        assert first.status_code == 200
        second = await message(alice_b, session, "我的订单号是多少？")
        assert second.status_code == 200
        assert second.json()["output"] == (
            "我看到了这些消息：我的订单号是 A-1001 / 我的订单号是多少？"
        )
        third = await message(alice_a, session, "谢谢")  # back on A: it sees B's turn too
        assert third.json()["output"] == (
            "我看到了这些消息：我的订单号是 A-1001 / 我的订单号是多少？ / 谢谢"
        )
        detail = (await alice_b.get(f"/v1/sessions/{session}")).json()
        assert detail["message_count"] == 6 and len(detail["messages"]) == 6

        # 2. a second message to a busy session is 409 from either replica
        with anyio.fail_after(30):
            running = asyncio.create_task(message(alice_a, session, "slow question"))
            assert await anyio.to_thread.run_sync(model.entered.acquire, True, 20)
            for c in (alice_a, alice_b):
                busy = await message(c, session, "again")
                assert busy.status_code == 409 and busy.json()["code"] == "session_busy"
                assert busy.headers["retry-after"] == "1"
            assert (await alice_b.delete(f"/v1/sessions/{session}")).status_code == 409
            model.release.set()
            assert (await running).json()["output"] == "slow done"
        assert (await message(alice_b, session, "free again?")).status_code == 200

        # 3. a rate limit (2/hour per caller) holds across both replicas
        session_b = (await alice_b.post("/v1/sessions")).json()["id"]
        outputs = [
            (await message(c, session_b, f"短信 {n}")).json()["output"]
            for n, c in enumerate((alice_a, alice_b, alice_a))
        ]
        assert outputs[0] == "工具结果：sent: 短信 0"
        assert outputs[1] == "工具结果：sent: 短信 1"
        assert "rate limited: at most 2/hour" in outputs[2]

        # 4. a call paused on A is approved on B (and not by someone else)
        kinds: list[str] = []
        final: dict[str, Any] = {}
        with anyio.fail_after(30):
            async with alice_a.stream(
                "POST", f"/v1/sessions/{session}/messages", json={"content": "退货 A-1001"}
            ) as r:
                async for line in r.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    event = json.loads(line[6:])
                    kinds.append(event["type"])
                    if event["type"] == "approval_required":
                        url = f"/v1/sessions/{session}/approvals/{event['approval_id']}"
                        assert (await carol_b.post(url, json={"approved": True})).status_code == 404
                        assert (await bob_b.post(url, json={"approved": True})).status_code == 404
                        ok = await alice_b.post(url, json={"approved": True})
                        assert ok.status_code == 200 and ok.json()["approved"] is True
                        again = await alice_a.post(url, json={"approved": False})
                        assert again.status_code == 404  # decided once, on any replica
                    if event["type"] == "final":
                        final = event
        assert kinds.index("approval_required") < kinds.index("tool_finished")
        assert final["output"] == "工具结果：RMA-A-1001"

        # 5. tenant isolation through both replicas
        for c in (bob_b, carol_b):
            assert (await c.get(f"/v1/sessions/{session}")).status_code == 404
            assert (await message(c, session, "let me in")).status_code == 404
            assert (await c.get("/v1/sessions")).json()["sessions"] == []
        listed = (await alice_b.get("/v1/sessions")).json()["sessions"]
        assert {s["id"] for s in listed} == {session, session_b}
        # ... and for knowledge (the PostgreSQL store both replicas share)
        doc = "# 退货政策\n\n投影仪 P20 的退货期限是 30 天，凭订单号 RMA 办理。\n".encode()
        # (a job that the worker runs; the upload answers its report once it is done)
        up = await alice_a.post(
            "/v1/knowledge/files", files=[("files", ("退货.md", doc))], timeout=120
        )
        assert up.status_code == 200, up.text
        assert up.json()["added"] == ["t1/退货.md"] and up.json()["job_id"]
        found = await alice_b.get("/v1/knowledge/search", params={"q": "退货期限"})
        assert [r["source"] for r in found.json()["results"]][:1] == ["t1/退货.md"]
        same_tenant = await carol_b.get("/v1/knowledge/search", params={"q": "退货期限"})
        assert same_tenant.json()["results"]  # untagged: the whole tenant t1 reads it
        other_tenant = await bob_b.get("/v1/knowledge/search", params={"q": "退货期限"})
        assert other_tenant.json()["results"] == []
        assert (await bob_b.get("/v1/knowledge/sources")).json()["sources"] == []
        listed_b = (await alice_b.get("/v1/knowledge/sources")).json()["sources"]
        assert [s["source"] for s in listed_b] == ["t1/退货.md"]  # upload records are shared

    # the audit log of both replicas is one table
    for replica_ in (a, b):
        replica_.service.toolkit.governance.audit.flush()
    log = a.service.app.audit_log()
    calls = [(r.tool, r.outcome) for r in log.query(user="alice")]
    log.close()
    assert calls.count(("send_sms", "ok")) == 2 and ("send_sms", "rate_limited") in calls
    assert ("create_return", "ok") in calls


async def test_redis_or_postgresql_going_away_is_503_and_the_service_recovers(
    tmp_path: Path,
    pg_url: str,
    redis_url: str,
    pg_server: LocalPostgres,
    redis_server: LocalRedis,
    thread_servers: list[ThreadServer],
) -> None:
    server = replica(tmp_path / "a", FunctionModel(Model()), pg_url, redis_url, thread_servers)
    async with httpx.AsyncClient(base_url=server.url, headers=ALICE, timeout=60) as c:
        session = (await c.post("/v1/sessions")).json()["id"]
        assert (await message(c, session, "hello")).status_code == 200

        redis_server.stop()
        try:
            down = await message(c, session, "hello again")
            assert down.status_code == 503 and down.json()["code"] == "redis_unavailable"
            assert "session lock" in down.json()["detail"] and down.headers["retry-after"]
            # what does not need Redis still answers; readiness says what is missing
            assert (await c.get(f"/v1/sessions/{session}")).status_code == 200
            ready = await c.get("/readyz")
            assert ready.status_code == 503 and ready.json()["store"].startswith("unavailable")
        finally:
            redis_server.start()
        assert (await message(c, session, "back")).status_code == 200  # recovered by itself
        assert (await c.get("/readyz")).status_code == 200

        pg_server.stop()
        try:
            gone = await c.get(f"/v1/sessions/{session}")
            assert gone.status_code == 503 and gone.json()["code"] == "postgresql_unavailable"
            assert "unreachable" in gone.json()["detail"]
        finally:
            pg_server.start()
        back = await c.get(f"/v1/sessions/{session}")
        assert back.status_code == 200 and back.json()["message_count"] == 4


async def test_a_redis_refusing_writes_is_503_with_the_reason_and_the_service_recovers(
    tmp_path: Path, pg_url: str, redis_url: str, thread_servers: list[ThreadServer]
) -> None:
    import redis

    server = replica(tmp_path / "a", FunctionModel(Model()), pg_url, redis_url, thread_servers)
    admin = redis.Redis.from_url(redis_url)
    async with httpx.AsyncClient(base_url=server.url, headers=ALICE, timeout=60) as c:
        session = (await c.post("/v1/sessions")).json()["id"]
        assert (await message(c, session, "hello")).status_code == 200

        # out of memory under maxmemory: Redis answers every write with an error (a 500
        # "internal error" with no trace id before)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", 1)
        try:
            refused = await message(c, session, "hello again")
            completion = await c.post(
                "/v1/chat/completions",
                json={"model": "shelfhand", "messages": [{"role": "user", "content": "hi"}]},
            )
        finally:
            admin.config_set("maxmemory", 0)
            admin.close()
        assert refused.status_code == 503, refused.text
        body = refused.json()
        assert body["code"] == "redis_unavailable" and "maxmemory" in body["detail"]
        assert body["trace_id"] == refused.headers["x-trace-id"] != ""
        assert completion.status_code == 503, completion.text
        assert "maxmemory" in completion.json()["error"]["message"]
        assert (await message(c, session, "back")).status_code == 200  # recovered by itself


async def test_a_postgresql_taking_no_writes_is_503_with_the_reason_and_the_service_recovers(
    tmp_path: Path, pg_url: str, redis_url: str, thread_servers: list[ThreadServer]
) -> None:
    import psycopg

    def read_only(on: bool) -> None:  # as a failover to a standby does (a 500 before)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            if on:
                conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            else:
                conn.execute("SET default_transaction_read_only = off")
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
            conn.execute("SELECT pg_reload_conf()")

    server = replica(tmp_path / "a", FunctionModel(Model()), pg_url, redis_url, thread_servers)
    async with httpx.AsyncClient(base_url=server.url, headers=ALICE, timeout=60) as c:
        session = (await c.post("/v1/sessions")).json()["id"]
        assert (await message(c, session, "hello")).status_code == 200

        read_only(True)
        try:
            await asyncio.sleep(0.5)  # the reload reaches every backend
            replies = [
                await c.post("/v1/sessions"),
                await message(c, session, "hello again"),
                await c.post(
                    "/v1/chat/completions",
                    json={"model": "shelfhand", "messages": [{"role": "user", "content": "hi"}]},
                ),
            ]
        finally:
            read_only(False)
        for reply in replies:
            assert reply.status_code == 503, reply.text
            assert "takes no writes" in reply.text and "password" not in reply.text
            assert reply.headers["retry-after"] and reply.headers["x-trace-id"]
        assert replies[1].json()["code"] == "postgresql_unavailable"
        assert replies[2].json()["error"]["code"] == "postgresql_unavailable"
        await asyncio.sleep(0.5)
        assert (await message(c, session, "back")).status_code == 200  # recovered by itself
        assert (await c.post("/v1/sessions")).status_code == 201


def test_shelfhand_serve_with_an_unreachable_redis_fails_at_start_up_without_the_password(
    tmp_path: Path,
) -> None:
    from service_helpers import start_serve

    from shelfhand.dev.services import free_port

    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    env = {"SHELFHAND_REDIS_URL": url, "SHELFHAND_RETRIEVAL_MODE": "keyword"}
    with pytest.raises(AssertionError, match="exited during start-up") as failed:
        start_serve(tmp_path / "ws", env=env).stop()
    assert "Redis at redis://127.0.0.1" in str(failed.value)
    assert "is unreachable" in str(failed.value) and "s3cret-pw" not in str(failed.value)


def test_without_shared_urls_the_state_stays_in_the_process(tmp_path: Path) -> None:
    from shelfhand.service.turn_lock import LocalTurnLock, RedisTurnLock
    from shelfhand.sessions.store import SqliteSessionStore
    from shelfhand.tools.approvals import Approvals
    from shelfhand.tools.redis_approvals import RedisApprovals

    app = App(settings=Settings.load(tmp_path, env={"SHELFHAND_RETRIEVAL_MODE": "keyword"}))
    try:
        assert isinstance(app.turn_lock(), LocalTurnLock)
        approvals = app.approvals()
        assert type(approvals) is Approvals and not isinstance(approvals, RedisApprovals)
        assert isinstance(app.session_store(), SqliteSessionStore)
        assert app.governance().shared is None
        assert not isinstance(app.turn_lock(), RedisTurnLock)
        assert (tmp_path / "audit.db").is_file()
    finally:
        app.close()
