"""A team's own Python tools in ``shelfhand serve`` (setting ``tools``): imported from the
folder the service runs in, offered per caller, each call seeing its own caller, and an
answer stating what the tool returned kept by the answer check; a mistake in the setting
stops the service before it listens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from service_helpers import ALICE, BOB, KEYS, ask_turn, start_serve, write

from support.loopback import Refusing, serving

pytestmark = pytest.mark.slow

DESK = '''
"""The after-sales desk's own tools."""
import threading

from shelfhand import UserContext, tool

BOTH_CALLS = threading.Barrier(2, timeout=20)


@tool(read_only=True, timeout=30)
def order_status(ctx: UserContext, order_id: str) -> dict:
    """Look up one of the caller's orders.

    Args:
        order_id: The order number, e.g. SO-1001.
    """
    BOTH_CALLS.wait()  # returns only when the other caller's call is running too
    return {"order": order_id, "tenant": ctx.tenant_id, "user": ctx.user_id}
'''

SCRIPT = {
    "cycle": True,
    "turns": [
        {"tool_call": "order_status", "arguments": {"order_id": "SO-1001"}},
        "订单 SO-1001 已发货。",
    ],
}


def test_two_callers_call_the_teams_tool_at_once_and_each_sees_only_itself(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    write(project / "desk_tools.py", DESK)
    # the default answer retrieval (``both``): the documents are searched first, find
    # nothing, and the answer stands on what the tool returned
    env = {"SHELFHAND_TOOLS": "desk_tools"}
    server = start_serve(tmp_path / "workspace", script=SCRIPT, env=env, cwd=project)
    try:
        with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
            listed = c.get("/v1/tools").json()
        # the same arguments from two callers: two calls (single-flight is per caller), at once
        with ThreadPoolExecutor(2) as pool:
            alice, bob = pool.map(
                lambda who: ask_turn(server.url, who, "我的订单 SO-1001 到哪了？"), (ALICE, BOB)
            )
    finally:
        server.stop()
    assert "order_status" in json.dumps(listed)
    for reply, (tenant, user) in ((alice, ("t1", "alice")), (bob, ("t2", "bob"))):
        assert [s["name"] for s in reply["tool_steps"]] == ["retrieve", "order_status"]
        step = reply["tool_steps"][1]
        assert not step["is_error"], step
        assert json.loads(step["content"]) == {"order": "SO-1001", "tenant": tenant, "user": user}
        assert reply["output"] == "订单 SO-1001 已发货。" and reply["fallback_reason"] == ""
        assert [s["tool"] for s in reply["grounding"]["sentences"]] == ["order_status"]


def test_a_tools_setting_that_cannot_be_imported_stops_the_service_before_it_listens(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    write(project / "desk_tools.py", "raise RuntimeError('DESK_DB_URL is not set')\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_EMBEDDER="hashing",
        SHELFHAND_API_KEYS=json.dumps(KEYS),
        SHELFHAND_TOOLS="desk_tools",
    )
    serve = ["serve", "-w", str(tmp_path / "ws"), "--port", "0"]
    out = subprocess.run(
        [sys.executable, "-P", "-m", "shelfhand.cli", *serve],
        capture_output=True,
        text=True,
        env=env,
        cwd=project,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2, out.stderr
    assert (
        "error: tools: importing 'desk_tools' failed: RuntimeError: DESK_DB_URL is not set "
        f"({project / 'desk_tools.py'}, line 1)"
    ) in out.stderr
    assert "Traceback" not in out.stderr and "Uvicorn running" not in out.stderr + out.stdout


STOCK = '''
"""The warehouse's own tool: its API takes a token in the query string."""
import os

import httpx

from shelfhand import tool


@tool(read_only=True, retries=0)
def query_stock(sku: str) -> str:
    """How many units of a product the warehouse holds."""
    url = os.environ["WAREHOUSE_URL"]
    reply = httpx.get(url, params={"sku": sku, "token": "wh-s3cr3t-77"}, timeout=5)
    reply.raise_for_status()  # 401: names the URL, the token included
    return reply.text
'''


def test_the_services_log_shows_no_token_a_teams_tool_sent(tmp_path: Path) -> None:
    """httpx logs each request's URL at INFO (the service's default level), and governance
    the tool's error: both name the token; the log line is redacted, the model and the user
    read the failure without it."""
    project = tmp_path / "project"
    write(project / "stock_tools.py", STOCK)
    script = {
        "cycle": True,
        "turns": [{"tool_call": "query_stock", "arguments": {"sku": "SKU2024-011"}}, "稍后再试。"],
    }
    with serving(Refusing) as port:
        env = {"SHELFHAND_TOOLS": "stock_tools", "WAREHOUSE_URL": f"http://127.0.0.1:{port}/s"}
        server = start_serve(tmp_path / "workspace", script=script, env=env, cwd=project)
        try:
            reply = ask_turn(server.url, ALICE, "SKU2024-011 还有库存吗？")
        finally:
            server.stop()
    step = next(s for s in reply["tool_steps"] if s["name"] == "query_stock")
    assert step["is_error"] and "token=[REDACTED]" in step["content"]
    # why, as people may read it: the exception's class, not its message
    assert step["failure"] == "failed: HTTPStatusError"
    log = "\n".join(server.log)
    assert "HTTP Request: GET" in log and "raised HTTPStatusError" in log
    assert "wh-s3cr3t-77" not in log and "wh-s3cr3t-77" not in json.dumps(reply)
