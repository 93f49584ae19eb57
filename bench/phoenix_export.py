"""Export shelfhand's spans to Arize Phoenix over OTLP/HTTP and find them through its API.

Starts ``phoenix serve`` (from its own virtual environment: Phoenix pins many packages) on
127.0.0.1 with a temporary working folder and no network use, runs a few traced agent turns
(a retrieval and two tool calls, one denied) exporting through
:func:`shelfhand.providers.otel.otlp_processor`, then reads the spans back from Phoenix's REST
API and checks that every span arrived with its name, parent and GenAI attributes.

    /work/venvs/phoenix/bin/pip install arize-phoenix        # once
    python bench/phoenix_export.py --phoenix /work/venvs/phoenix/bin/phoenix

Exits non-zero when a span is missing or malformed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from shelfhand import Agent, Toolkit, UserContext, retrieve_tool, tool
from shelfhand.core.tracing import Tracer
from shelfhand.knowledge import KnowledgeBase, sample_corpus
from shelfhand.providers.otel import otlp_processor
from shelfhand.testing import ScriptedModel, hashing_router, text, tool_call

ALICE = UserContext(tenant_id="acme", user_id="alice")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@tool(read_only=True)
def order_status(order_id: str) -> str:
    """The status of an order."""
    return f"{order_id}: shipped"


@tool(permission="admin")
def refund(order_id: str) -> str:
    """Refund an order (admins only)."""
    return "refunded"


def start_phoenix(phoenix: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = dict(
        os.environ,
        PHOENIX_PORT=str(port),
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_GRPC_PORT=str(free_port()),
        PHOENIX_WORKING_DIR=str(folder),
        PHOENIX_TELEMETRY_ENABLED="false",
        DO_NOT_TRACK="1",
    )
    log = open(folder / "phoenix.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([phoenix, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("phoenix exited:\n" + (folder / "phoenix.log").read_text())
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    proc.kill()
    raise RuntimeError("phoenix did not start within 180 s")


async def traced_turns(kb: KnowledgeBase, tracer: Tracer, turns: int) -> list[str]:
    trace_ids = []
    for i in range(turns):
        model = ScriptedModel(
            [
                tool_call("retrieve", {"query": "退货政策"}),
                [tool_call("order_status", {"order_id": f"A-{i}"}), tool_call("refund", {"order_id": f"A-{i}"})],
                text("七天内可退 [1]。"),
            ]
        )  # fmt: skip
        toolkit = Toolkit([retrieve_tool(kb), order_status, refund])
        agent = Agent(name="support", model=model, toolkit=toolkit)
        trace_id = os.urandom(16).hex()
        with tracer.root("turn", trace_id=trace_id, tenant_id="acme", user_id="alice"):
            await agent.run("退货政策是什么？", context=ALICE, trace_id=trace_id)
        trace_ids.append(trace_id)
    return trace_ids


def phoenix_spans(url: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000}
        if cursor:
            params["cursor"] = cursor
        r = httpx.get(f"{url}/v1/projects/default/spans", params=params, timeout=30)
        r.raise_for_status()
        body = r.json()
        found.extend(body.get("data", []))
        cursor = body.get("next_cursor")
        if not cursor:
            return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--phoenix", default="/work/venvs/phoenix/bin/phoenix")
    ap.add_argument("--turns", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="shelfhand-phoenix-") as tmp:
        folder = Path(tmp)
        proc, url = start_phoenix(a.phoenix, folder)
        try:
            kb = KnowledgeBase(folder / "ws", hashing_router())
            kb.ingest([sample_corpus()], tenant_id="acme")
            exporter = otlp_processor(url)
            started = time.perf_counter()
            trace_ids = asyncio.run(traced_turns(kb, Tracer([exporter]), a.turns))
            exporter.close()  # flushes the batch processor
            exported_s = time.perf_counter() - started
            spans: list[dict[str, Any]] = []
            deadline = time.monotonic() + 60
            expected = 9 * a.turns  # turn, invoke_agent, 3 chat, 3 execute_tool, retrieval
            while time.monotonic() < deadline:
                spans = [
                    s for s in phoenix_spans(url) if s["context"]["trace_id"] in set(trace_ids)
                ]
                if len(spans) >= expected:
                    break
                time.sleep(0.5)
            kb.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    names = sorted({s["name"] for s in spans})
    print(f"exported {a.turns} turns in {exported_s:.2f} s; Phoenix has {len(spans)} of them")
    print("span names:", ", ".join(names))
    by_id = {s["context"]["span_id"]: s for s in spans}
    problems = []
    if len(spans) != expected:
        problems.append(f"expected {expected} spans, found {len(spans)}")
    for s in spans:
        attributes = s.get("attributes", {})
        if s["name"] != "turn" and s.get("parent_id") not in by_id:
            problems.append(f"{s['name']}: parent {s.get('parent_id')} not found")
        if s["name"].startswith("chat ") and "gen_ai.usage.output_tokens" not in attributes:
            problems.append(f"{s['name']}: no gen_ai.usage.output_tokens")
        if s["name"] == "execute_tool refund" and s.get("status_code") != "ERROR":
            problems.append("the denied refund is not an error span")
    if problems:
        print("PROBLEMS:\n  " + "\n  ".join(problems[:20]))
        sys.exit(1)
    print("every span found, each under its parent, with its GenAI attributes")


if __name__ == "__main__":
    main()
