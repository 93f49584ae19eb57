"""Traces of service turns over HTTP: the tree under the turn in ``/v1/traces/{id}``, scoped
to the caller (another tenant, or another user who is no admin, gets 404), the turn's usage
in the SSE ``final`` event equal to the sum of its model calls, and an incoming
``traceparent`` honoured."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from service_helpers import ALICE, BOB, CAROL, ThreadServer, parse_sse, start_thread_server
from service_helpers import user_contexts as service_users

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import ScriptedModel, text, tool_call

ADMIN = {"Authorization": "Bearer key-admin"}
CALLER_SPAN = "b7ad6b7169203331"
CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"


def serve(workspace: Path, servers: list[ThreadServer], **env: str) -> ThreadServer:
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "退货 政策"}), text("拆封后七天内可退 [1]。")]
    )
    settings = Settings.load(
        workspace,
        env={"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool", **env},
    )
    app = App(settings=settings, model=model, router=EmbeddingRouter({"any": HashingEmbedder()}))
    keys = {
        **service_users(),
        "key-admin": UserContext(tenant_id="t1", user_id="ops", roles=["admin"]),
    }
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys))
    servers.append(server)
    return server


def one_turn(c: httpx.Client, **headers: str) -> tuple[str, list[dict[str, Any]]]:
    up = c.post(
        "/v1/knowledge/files",
        files={
            "files": ("policy.md", "# 退货政策\n\n拆封后七天内可退货。".encode(), "text/markdown")
        },
    )
    assert up.status_code in (200, 201, 202), up.text
    session = c.post("/v1/sessions").json()["id"]
    reply = c.post(
        f"/v1/sessions/{session}/messages",
        json={"content": "退货政策是什么？", "stream": True},
        headers=headers,
    )
    assert reply.status_code == 200, reply.text
    return reply.headers["X-Trace-Id"], parse_sse(reply.text)


def test_a_turn_trace_is_the_tree_under_the_turn_for_its_owner_and_404_for_others(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        trace_id, events = one_turn(c)
        final = events[-1]
        assert final["type"] == "final"
        trace = c.get(f"/v1/traces/{trace_id}")
        assert trace.status_code == 200, trace.text
        body = trace.json()
        spans = body["spans"]
        by_id = {s["span_id"]: s for s in spans}
        (turn,) = [s for s in spans if s["name"] == "turn"]
        assert turn["parent_id"] == ""
        (run,) = [s for s in spans if s["name"].startswith("invoke_agent ")]
        assert run["parent_id"] == turn["span_id"]
        steps = sorted(
            (s for s in spans if s["parent_id"] == run["span_id"]), key=lambda s: s["start_ns"]
        )
        assert [s["attributes"]["gen_ai.operation.name"] for s in steps] == [
            "chat", "execute_tool", "chat",
        ]  # fmt: skip
        (retrieval,) = [s for s in spans if s["name"] == "retrieval"]
        assert by_id[retrieval["parent_id"]]["name"] == "execute_tool retrieve"
        assert retrieval["attributes"]["gen_ai.retrieval.documents"][0]["source"].endswith(
            "policy.md"
        )
        assert turn["attributes"]["gen_ai.conversation.id"] == final["session_id"]

        # the turn's usage is the sum of its model calls'
        chats = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "chat"]
        usage = final["usage"]
        assert usage["model_calls"] == len(chats) == 2
        assert usage["output_tokens"] == sum(
            s["attributes"]["gen_ai.usage.output_tokens"] for s in chats
        )
        assert usage["input_tokens"] == sum(
            s["attributes"]["gen_ai.usage.input_tokens"] for s in chats
        )
        assert (usage["tool_calls"], usage["retrievals"]) == (1, 1)
        assert [t["trace_id"] for t in c.get("/v1/traces").json()["traces"]] == [trace_id]
        # message contents are not recorded by default
        assert "退货政策是什么" not in trace.text and "七天内可退 [1]" not in trace.text

    for other in (BOB, CAROL):  # another tenant; a colleague who is no admin
        r = httpx.get(f"{server.url}/v1/traces/{trace_id}", headers=other, timeout=30)
        assert r.status_code == 404
        listed = httpx.get(f"{server.url}/v1/traces", headers=other, timeout=30)
        assert listed.json()["traces"] == []
    admin = httpx.get(f"{server.url}/v1/traces/{trace_id}", headers=ADMIN, timeout=30)
    assert admin.status_code == 200
    assert admin.json()["user_id"] == "alice"


def test_an_incoming_traceparent_names_the_trace_and_parents_the_turn(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        trace_id, _ = one_turn(c, traceparent=f"00-{CALLER_TRACE}-{CALLER_SPAN}-01")
        assert trace_id == CALLER_TRACE
        spans = c.get(f"/v1/traces/{trace_id}").json()["spans"]
        (turn,) = [s for s in spans if s["name"] == "turn"]
        assert turn["parent_id"] == CALLER_SPAN


def test_with_tracing_off_nothing_is_stored_and_the_reply_still_has_its_usage(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers, SHELFHAND_TRACING="off")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        trace_id, events = one_turn(c)
        assert events[-1]["usage"]["model_calls"] == 2
        r = c.get(f"/v1/traces/{trace_id}")
        assert (r.status_code, r.json()["code"]) == (404, "tracing_off")
    assert not (tmp_path / "traces.db").exists()


@pytest.mark.parametrize("stream", [False])
def test_a_json_reply_carries_the_turn_usage(
    tmp_path: Path, thread_servers: list[ThreadServer], stream: bool
) -> None:
    server = serve(tmp_path, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        session = c.post("/v1/sessions").json()["id"]
        reply = c.post(
            f"/v1/sessions/{session}/messages", json={"content": "退货？", "stream": stream}
        ).json()
        assert reply["usage"]["model_calls"] == 2
        assert reply["usage"]["tool_calls"] == 1


@pytest.mark.parametrize("tracing", ["stored", "off"])
def test_metrics_count_turns_model_and_tool_calls_for_admins_only(
    tmp_path: Path, thread_servers: list[ThreadServer], tracing: str
) -> None:
    server = serve(tmp_path, thread_servers, SHELFHAND_TRACING=tracing)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        one_turn(c)
        assert c.get("/metrics").status_code == 403
    scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN, timeout=30)
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    lines = set(scraped.text.splitlines())
    assert 'shelfhand_turns_total{status="ok"} 1.0' in lines
    assert 'shelfhand_model_calls_total{model="scripted",status="ok"} 2.0' in lines
    assert 'shelfhand_tool_calls_total{outcome="ok",tool="retrieve"} 1.0' in lines
    assert 'shelfhand_retrieval_seconds_count{mode="hybrid"} 1.0' in lines
    assert "shelfhand_pending_embeddings 0.0" in lines or any(
        line.startswith("shelfhand_pending_embeddings ") for line in lines
    )


def test_a_turn_left_out_by_sampling_has_no_trace_and_is_still_in_the_metrics(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers, SHELFHAND_TRACE_SAMPLE_RATIO="0")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        trace_id, events = one_turn(c)
        assert events[-1]["type"] == "final"
        assert c.get(f"/v1/traces/{trace_id}").status_code == 404
        assert c.get("/v1/traces").json()["traces"] == []
    lines = set(httpx.get(f"{server.url}/metrics", headers=ADMIN, timeout=30).text.splitlines())
    assert 'shelfhand_turns_total{status="ok"} 1.0' in lines
    assert 'shelfhand_tool_calls_total{outcome="ok",tool="retrieve"} 1.0' in lines


def test_the_usage_ledger_reports_by_day_and_model_per_user_and_for_admins(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        _, events = one_turn(c)
        turn_usage = events[-1]["usage"]
        (row,) = c.get("/v1/usage").json()["usage"]
        assert row["model"] == "scripted" and row["turns"] == 1
        assert row["output_tokens"] == turn_usage["output_tokens"]
        assert (row["model_calls"], row["tool_calls"], row["retrievals"]) == (2, 1, 1)
    assert httpx.get(f"{server.url}/v1/usage", headers=CAROL, timeout=30).json()["usage"] == []
    assert httpx.get(f"{server.url}/v1/usage", headers=BOB, timeout=30).json()["usage"] == []
    tenant = httpx.get(f"{server.url}/v1/usage", headers=ADMIN, timeout=30).json()["usage"]
    assert [r["turns"] for r in tenant] == [1]
    server.stop()

    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "usage", "--tenant", "t1", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path)},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    (cli_row,) = json.loads(out.stdout)["usage"]
    assert cli_row["turns"] == 1 and cli_row["model"] == "scripted"
