"""``shelfhand serve`` as a team runs it: a real uvicorn process on 127.0.0.1, httpx clients.

The model is a scripted file (``SHELFHAND_MODEL=scripted:<path>``): each user message gets
a ``retrieve`` call, then an answer citing passage [1].
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import ALICE, BOB, CAROL, ServeProcess, parse_sse, start_serve

from shelfhand.knowledge.base import sample_corpus

pytestmark = pytest.mark.slow

RAG_SCRIPT = {
    "cycle": True,
    "turns": [
        {"tool_call": "retrieve", "arguments": {"query": "整机保修期 warranty period"}},
        "整机保修期为 12 个月 [1]。",
    ],
}
# RAG_SCRIPT plays the model's own retrieve call: no up-front retrieval before it (the default,
# ``both``, is covered by test_service_answer_retrieval.py)
TOOL_MODE = {"SHELFHAND_ANSWER_RETRIEVAL": "tool"}


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    server = start_serve(
        tmp_path_factory.mktemp("ws") / "workspace",
        script=RAG_SCRIPT,
        env=TOOL_MODE,
        args=("--max-upload-mb", "0.05"),
    )
    yield server
    server.stop()


def client(serve: ServeProcess, headers: dict[str, str] | None = None) -> httpx.Client:
    return httpx.Client(base_url=serve.url, headers=headers or {}, timeout=30)


def upload(c: httpx.Client, *paths: Path, stream: bool = False) -> httpx.Response:
    files = [("files", (p.name, p.read_bytes(), "application/octet-stream")) for p in paths]
    return c.post("/v1/knowledge/files", files=files, params={"stream": stream})


def found(c: httpx.Client, term: str) -> list[str]:
    """Sources of the caller's search results whose passage contains ``term``."""
    r = c.get("/v1/knowledge/search", params={"q": term, "top_k": 20})
    assert r.status_code == 200, r.text
    return [hit["source"] for hit in r.json()["results"] if term in hit["text"]]


def test_upload_then_chat_streams_tool_steps_citations_and_answer_in_order(
    serve: ServeProcess,
) -> None:
    samples = sample_corpus()
    with client(serve, ALICE) as c:
        r = upload(c, samples / "warranty-policy-v1.md", samples / "returns-policy.md", stream=True)
        assert r.status_code == 200, r.text
        progress = parse_sse(r.text)
        assert [e["type"] for e in progress][-1] == "ingest_done"
        assert any(e["type"] == "ingest_progress" and e["total"] == 2 for e in progress)
        assert sorted(progress[-1]["added"]) == ["t1/returns-policy.md", "t1/warranty-policy-v1.md"]

        sources = c.get("/v1/knowledge/sources").json()["sources"]
        assert {s["source"] for s in sources} >= {"t1/warranty-policy-v1.md"}
        assert all(s["chunks"] > 0 for s in sources)

        session = c.post("/v1/sessions", json={}).json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": "投影仪保修期多久？"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        trace_id = r.headers["x-trace-id"]
        events = parse_sse(r.text)

    kinds = [e["type"] for e in events]
    first_text = kinds.index("text_delta")
    assert kinds[:3] == ["tool_started", "tool_finished", "citations"]
    assert set(kinds[first_text:-1]) == {"text_delta"} and kinds[-1] == "final"
    assert [e["_id"] for e in events] == list(range(1, len(events) + 1))
    assert all(e["_event"] == e["type"] and e["trace_id"] == trace_id for e in events)
    final = events[-1]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == final["output"]
    assert final["output"] == "整机保修期为 12 个月 [1]。"
    first = final["citations"][0]
    assert first["index"] == 1 and first["source"].startswith("t1/") and first["text"]
    assert any("12 个月" in c["text"] for c in final["citations"])
    assert final["session_id"] == session and final["message_count"] == 4


def test_a_json_reply_carries_tool_steps_citations_and_the_trace_id(serve: ServeProcess) -> None:
    with client(serve, ALICE) as c:
        # its own document (the module's server is shared: the test passes run alone too)
        assert upload(c, sample_corpus() / "warranty-policy-v1.md").status_code == 200
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(
            f"/v1/sessions/{session}/messages",
            json={"content": "How long is the warranty?", "stream": False},
            headers={"X-Trace-Id": "trace-from-the-client-0001"},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        detail = c.get(f"/v1/sessions/{session}").json()
    assert r.headers["x-trace-id"] == body["trace_id"] == "trace-from-the-client-0001"
    assert [s["name"] for s in body["tool_steps"]] == ["retrieve"]
    assert body["tool_steps"][0]["is_error"] is False
    assert body["citations"][0]["label"]
    assert [m["role"] for m in detail["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert detail["title"] == "How long is the warranty?"
    assert detail["last_trace_id"] == "trace-from-the-client-0001"


def test_two_tenants_cannot_see_each_others_sessions_or_documents(
    serve: ServeProcess, tmp_path: Path
) -> None:
    secret = tmp_path / "secret-plan.md"
    secret.write_text("# 内部计划\n\n代号 ZEBRA-42 的新品将在明年三月发布。\n", encoding="utf-8")
    with client(serve, ALICE) as alice, client(serve, BOB) as bob, client(serve, CAROL) as carol:
        assert upload(alice, secret).status_code == 200
        mine = alice.post("/v1/sessions", json={"title": "alice only"}).json()["id"]
        assert found(alice, "ZEBRA-42")

        assert bob.get(f"/v1/sessions/{mine}").status_code == 404
        assert carol.get(f"/v1/sessions/{mine}").status_code == 404  # same tenant, other user
        r = bob.post(f"/v1/sessions/{mine}/messages", json={"content": "hi", "stream": False})
        assert r.status_code == 404
        assert bob.delete(f"/v1/sessions/{mine}").status_code == 404
        assert mine not in {s["id"] for s in bob.get("/v1/sessions").json()["sessions"]}

        assert not found(bob, "ZEBRA-42")
        assert all(
            not s["source"].startswith("t1/")
            for s in bob.get("/v1/knowledge/sources").json()["sources"]
        )
        assert bob.delete("/v1/knowledge/sources/t1/secret-plan.md").status_code == 404

        # bob's chat retrieves with bob's identity: alice's passages never reach his answer
        session = bob.post("/v1/sessions").json()["id"]
        reply = bob.post(
            f"/v1/sessions/{session}/messages", json={"content": "ZEBRA-42?", "stream": False}
        ).json()
        assert all(c["source"].startswith("t2/") for c in reply["citations"])
        assert alice.get(f"/v1/sessions/{mine}").status_code == 200
        assert found(carol, "ZEBRA-42")


def test_requests_without_a_known_api_key_get_401(serve: ServeProcess) -> None:
    with client(serve) as c:
        r = c.get("/v1/sessions")
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
        assert "Authorization: Bearer" in r.json()["detail"] and r.json()["trace_id"]
        assert c.get("/v1/sessions", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.post("/v1/knowledge/files", files=[("files", ("a.md", b"# a"))]).status_code == 401
        assert c.get("/healthz").status_code == 200 and c.get("/").status_code == 200


def test_invalid_input_gets_422_with_a_clear_message(serve: ServeProcess) -> None:
    with client(serve, ALICE) as c:
        session = c.post("/v1/sessions").json()["id"]
        url = f"/v1/sessions/{session}/messages"
        for body in ({"content": ""}, {}, {"content": "hi", "stream": "maybe"}, {"content": 3}):
            r = c.post(url, json=body)
            assert r.status_code == 422, body
            assert r.json()["code"] == "invalid_input" and r.json()["detail"][0]["loc"]
        r = c.post(url, json={"content": "hi", "extra": 1})
        assert r.status_code == 422 and "extra" in r.json()["detail"][0]["loc"]
        assert c.get("/v1/knowledge/search", params={"q": "x", "top_k": 0}).status_code == 422
        assert c.get("/v1/knowledge/search").status_code == 422
        assert (
            c.post(
                url, content=b"{not json", headers={"content-type": "application/json"}
            ).status_code
            == 422
        )


def test_rejected_uploads_leave_the_knowledge_base_unchanged(
    serve: ServeProcess, tmp_path: Path
) -> None:
    good = tmp_path / "good-one.md"
    good.write_text("# 好文件\n\n独特词 KIWI-77。\n", encoding="utf-8")
    empty = tmp_path / "empty.md"
    empty.write_text("", encoding="utf-8")
    big = tmp_path / "big.txt"
    big.write_text("x " * 40_000, encoding="utf-8")  # 80 KB > --max-upload-mb 0.05
    with client(serve, ALICE) as c:
        before = c.get("/v1/knowledge/sources").json()["sources"]
        r = upload(c, good, empty)
        assert r.status_code == 422 and "empty.md" in r.json()["detail"]
        r = c.post("/v1/knowledge/files", files=[("files", ("tool.exe", b"MZ"))])
        assert r.status_code == 415 and ".md" in r.json()["detail"]
        r = upload(c, good, big)
        assert r.status_code == 413 and "big.txt" in r.json()["detail"]
        r = c.post("/v1/knowledge/files", files=[("files", ("../../etc/.hidden.md", b"# x"))])
        assert r.status_code == 422
        assert c.get("/v1/knowledge/sources").json()["sources"] == before
        assert not found(c, "KIWI-77")
        staging = serve.workspace / "uploads" / ".staging"
        assert not staging.exists() or not any(staging.iterdir())

        assert upload(c, good).status_code == 200
        assert found(c, "KIWI-77")
        assert c.delete("/v1/knowledge/sources/t1/good-one.md").status_code == 204
        assert not found(c, "KIWI-77")


def test_a_session_survives_a_server_restart(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    first = start_serve(workspace, script=RAG_SCRIPT, env=TOOL_MODE)
    try:
        with client(first, ALICE) as c:
            session = c.post("/v1/sessions").json()["id"]
            r = c.post(
                f"/v1/sessions/{session}/messages", json={"content": "保修多久？", "stream": False}
            )
            assert r.status_code == 200
    finally:
        first.stop()
    second = start_serve(workspace, script=RAG_SCRIPT, env=TOOL_MODE)
    try:
        with client(second, ALICE) as c:
            detail = c.get(f"/v1/sessions/{session}").json()
            assert (
                detail["message_count"] == 4
                and detail["messages"][0]["content"][0]["text"] == "保修多久？"
            )
            r = c.post(
                f"/v1/sessions/{session}/messages", json={"content": "光源呢？", "stream": False}
            )
            assert r.status_code == 200
            assert c.get(f"/v1/sessions/{session}").json()["message_count"] == 8
    finally:
        second.stop()


def test_model_timeout_is_504_and_provider_failure_is_502(tmp_path: Path) -> None:
    script = [
        {"error": "timeout", "message": "provider did not answer in 60 s"},
        {"error": "provider", "status": 503, "message": "upstream unavailable"},
        {"tool_call": "retrieve", "arguments": {"query": "保修"}},
        {"error": "provider", "status": 500, "message": "upstream broke mid-turn"},
        "恢复正常。",
    ]
    # tool mode: the model is the turn's first step, so its failure can still be the status
    server = start_serve(tmp_path / "workspace", script=script, env=TOOL_MODE)
    try:
        with client(server, ALICE) as c:
            session = c.post("/v1/sessions").json()["id"]
            url = f"/v1/sessions/{session}/messages"
            r = c.post(url, json={"content": "a", "stream": False})
            assert r.status_code == 504 and r.json()["code"] == "model_timeout"
            assert "60 s" in r.json()["detail"] and r.json()["trace_id"] == r.headers["x-trace-id"]
            r = c.post(url, json={"content": "b", "stream": True})
            assert r.status_code == 502 and r.json()["code"] == "model_error"
            r = c.post(url, json={"content": "c", "stream": True})  # fails after streaming began
            assert r.status_code == 200
            events = parse_sse(r.text)
            assert [e["type"] for e in events][:2] == ["tool_started", "tool_finished"]
            assert events[-1]["type"] == "error" and events[-1]["status"] == 502
            assert "mid-turn" in events[-1]["message"]
            detail = c.get(f"/v1/sessions/{session}").json()
            assert detail["state"] == "failed" and detail["message_count"] == 0
            assert detail["last_trace_id"] == r.headers["x-trace-id"]
            ok = c.post(url, json={"content": "d", "stream": False})
            assert ok.status_code == 200 and ok.json()["output"] == "恢复正常。"
            assert c.get(f"/v1/sessions/{session}").json()["state"] == "idle"
    finally:
        server.stop()
    assert any("model_timeout" in line for line in server.log)


def run_serve_until_exit(workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    full_env.update({"SHELFHAND_EMBEDDER": "hashing", **env})
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "serve", "-w", str(workspace), "--port", "0"],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=60,
        check=False,
    )


def test_serve_refuses_to_start_without_api_keys_or_with_a_stdio_mcp_server(
    tmp_path: Path,
) -> None:
    out = run_serve_until_exit(tmp_path, {})
    assert out.returncode == 2 and "SHELFHAND_API_KEYS" in out.stderr
    assert "--allow-anonymous" in out.stderr and "Traceback" not in out.stderr

    (tmp_path / "mcp.json").write_text(
        '{"mcpServers": {"clock": {"command": "uvx", "args": ["mcp-server-time"]}}}',
        encoding="utf-8",
    )
    out = run_serve_until_exit(
        tmp_path, {"SHELFHAND_API_KEYS": '{"k": {"tenant": "t", "user": "u"}}'}
    )
    assert out.returncode == 2 and "stdio" in out.stderr and "'clock'" in out.stderr
    assert "Traceback" not in out.stderr
