"""How a turn's answer was made, where an operator looks: two callers of two tenants ask at
once, one's answer is the model's, the other's is a refusal the answer check replaced with
the passages' sentences. The second turn's trace says so (``outcome`` in ``/v1/traces`` and
``shelfhand trace``, ``shelfhand.answer.*`` on its turn span), the first's does not, and
``/metrics`` counts one fallback by its reason."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
from service_helpers import ALICE, BOB, ThreadServer, parse_sse, start_thread_server
from service_helpers import user_contexts as service_users

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.context import UserContext
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.testing import FunctionModel, text, tool_call

POLICY = "# 售后政策\n\n拆封后七天内可退货。\n\n整机保修一年，电池保修六个月。".encode()
ADMIN_T2 = {"Authorization": "Bearer key-admin-t2"}


def reply(messages: list[Message], tools: Any) -> object:
    """Search first; then answer the return question, refuse the warranty one."""
    returns = "退" in next(m.text for m in messages if m.role == "user")
    if not any(r.name == "retrieve" for m in messages for r in m.tool_results):
        return tool_call("retrieve", {"query": "退货" if returns else "电池 保修"})
    return text("拆封后七天内可退 [1]。" if returns else "抱歉，我无法回答这个问题。")


def serve(workspace: Path, servers: list[ThreadServer]) -> ThreadServer:
    settings = Settings.load(
        workspace, env={"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_ANSWER_RETRIEVAL": "tool"}
    )
    app = App(
        settings=settings,
        model=FunctionModel(reply),  # type: ignore[arg-type]
        router=EmbeddingRouter({"any": HashingEmbedder()}),
    )
    keys = {
        **service_users(),
        "key-admin-t2": UserContext(tenant_id="t2", user_id="ops", roles=["admin"]),
    }
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=keys))
    servers.append(server)
    return server


def ask(server: ThreadServer, who: dict[str, str], question: str, got: dict[str, Any]) -> None:
    with httpx.Client(base_url=server.url, headers=who, timeout=30) as c:
        up = c.post("/v1/knowledge/files", files={"files": ("policy.md", POLICY, "text/markdown")})
        assert up.status_code in (200, 201, 202), up.text
        session = c.post("/v1/sessions").json()["id"]
        r = c.post(f"/v1/sessions/{session}/messages", json={"content": question, "stream": True})
        assert r.status_code == 200, r.text
        got[question] = (r.headers["X-Trace-Id"], parse_sse(r.text)[-1])


def test_a_replaced_answer_shows_in_its_trace_and_the_metrics_and_a_kept_one_does_not(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    server = serve(tmp_path, thread_servers)
    got: dict[str, Any] = {}
    askers = [
        threading.Thread(target=ask, args=(server, ALICE, "拆封后多久可以退货？", got)),
        threading.Thread(target=ask, args=(server, BOB, "电池保修多久？", got)),
    ]
    for t in askers:
        t.start()
    for t in askers:
        t.join(60)
    kept_id, kept = got["拆封后多久可以退货？"]
    replaced_id, replaced = got["电池保修多久？"]
    assert kept["fallback_reason"] == "" and kept["output"] == "拆封后七天内可退 [1]。"
    assert replaced["fallback_reason"] == "refusal" and replaced["extractive"]
    assert "六个月" in replaced["output"]

    (kept_row,) = httpx.get(f"{server.url}/v1/traces", headers=ALICE).json()["traces"]
    (replaced_row,) = httpx.get(f"{server.url}/v1/traces", headers=BOB).json()["traces"]
    assert (kept_row["trace_id"], kept_row["outcome"]) == (kept_id, "")
    assert (replaced_row["trace_id"], replaced_row["outcome"]) == (replaced_id, "refusal")

    def turn_attributes(trace_id: str, who: dict[str, str]) -> dict[str, Any]:
        spans = httpx.get(f"{server.url}/v1/traces/{trace_id}", headers=who).json()["spans"]
        (turn,) = [s for s in spans if s["name"] == "turn"]
        return dict(turn["attributes"])

    kept_turn = turn_attributes(kept_id, ALICE)
    assert "shelfhand.answer.fallback_reason" not in kept_turn
    assert kept_turn["shelfhand.answer.grounded"] is True
    assert kept_turn["shelfhand.answer.unsupported_sentences"] == 0
    assert kept_turn["shelfhand.answer.passages"] == [kept["citations"][0]["chunk_id"]]
    replaced_turn = turn_attributes(replaced_id, BOB)
    assert replaced_turn["shelfhand.answer.fallback_reason"] == "refusal"
    assert replaced_turn["shelfhand.answer.extractive"] is True
    assert httpx.get(f"{server.url}/v1/traces/{replaced_id}", headers=ALICE).status_code == 404
    for outcome, found in (("refusal", [replaced_id]), ("any", [replaced_id]), ("off_topic", [])):
        listed = httpx.get(f"{server.url}/v1/traces", params={"outcome": outcome}, headers=ADMIN_T2)
        assert [t["trace_id"] for t in listed.json()["traces"]] == found
    assert httpx.get(f"{server.url}/v1/traces?outcome=any", headers=ALICE).json()["traces"] == []

    scraped = httpx.get(f"{server.url}/metrics", headers=ADMIN_T2).text.splitlines()
    fallbacks = [line for line in scraped if line.startswith("shelfhand_answer_fallbacks_total")]
    assert fallbacks == ['shelfhand_answer_fallbacks_total{reason="refusal"} 1.0']
    server.stop()

    out = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "trace", "--tenant", "t2", "--outcome", "any"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path), "COLUMNS": "200"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(replaced_id) and out.stdout.rstrip().endswith("refusal")
    tree = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "trace", replaced_id, "--tenant", "t2"],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path), "COLUMNS": "200"},
    )  # fmt: skip
    assert tree.returncode == 0, tree.stderr
    (turn_line,) = [line for line in tree.stdout.splitlines() if " turn  (" in line]
    assert turn_line.endswith("fallback refusal, extractive")
    assert "  售后政策" in tree.stdout  # each hit with its title
    assert "· the answer rests on t2/policy.md::0" in tree.stdout
