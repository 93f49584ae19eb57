"""A turn of the service without a chat model leaves an audit record, as a model's
``retrieve`` call does: the caller, the question, the outcome and the turn's trace id — for
two callers of different tenants at once, each with their own."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from service_helpers import ALICE, BOB, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter


def test_model_free_turns_of_two_tenants_are_audited_each_as_its_caller(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    settings = Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, model=None, router=EmbeddingRouter({"any": HashingEmbedder()}))
    server = start_thread_server(create_app(app, api_keys=user_contexts()))
    thread_servers.append(server)
    doc = "# 故障代码\n\n## E-203\n\nE-203：灯泡过热。请关机冷却，并清理风扇。\n".encode()
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        assert c.post("/v1/knowledge/files", files=[("files", ("e.md", doc))]).status_code == 200

    def ask(who: dict[str, str], question: str) -> httpx.Response:
        with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
            session = c.post("/v1/sessions").json()["id"]
            return c.post(f"/v1/sessions/{session}/messages", json={"content": question})

    with ThreadPoolExecutor(2) as pool:
        alice, bob = pool.map(ask, [ALICE, BOB], ["E-203 是什么故障？", "保修期多久？"])
    assert alice.status_code == bob.status_code == 200
    audit = server.service.toolkit.audit_log
    assert audit is not None
    audit.flush()
    records = {r.trace_id: r for r in audit.query(tool="retrieve")}
    mine = records[alice.headers["X-Trace-Id"]]
    theirs = records[bob.headers["X-Trace-Id"]]
    assert (mine.tenant, mine.user, mine.outcome, mine.agent) == ("t1", "alice", "ok", "knowledge")
    assert (theirs.tenant, theirs.user) == ("t2", "bob")
    assert "E-203" in str(mine.arguments) and "保修" in str(theirs.arguments)
