"""A bounded loopback load test: N concurrent chat sessions streamed over SSE, through the
dev cluster's round-robin port, on 1 and on 2 replicas (issue 14, acceptance 3).

Everything is real and local: PostgreSQL + Redis (``shelfhand.devservices``), ``shelfhand
serve`` processes (``shelfhand.devcluster``) behind the round-robin proxy, and an
OpenAI-compatible chat server on loopback (this script, one process of its own) that streams
a fixed answer of ``--tokens`` tokens at ``--token-ms`` per token, as a model would. Each client
creates a session and posts ``--turns`` messages with ``stream: true``, reading every event.

Per replica count: turns/s, time to the first ``text_delta`` and to the end of the turn
(p50/p95, ms), errors (any status other than 200 or a stream without ``final``).

    python bench/load_sse.py [--clients 50] [--turns 2] [--replicas 1,2] [--tokens 40]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from shelfhand.devcluster import RoundRobinProxy, start_dev_cluster
from shelfhand.devservices import free_port

KEY = "bench-key"


def fake_model_server(port: int, tokens: int, token_ms: float) -> None:
    """Serve /v1/chat/completions on ``port``: a streamed answer of ``tokens`` tokens."""
    api = FastAPI()
    words = [f"word{i} " for i in range(tokens)]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body = {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "fake",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {json.dumps(body)}\n\n"

    @api.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "fake", "object": "model"}]}

    @api.post("/v1/chat/completions")
    async def complete(request: Request) -> Any:
        body = await request.json()
        if not body.get("stream"):
            await asyncio.sleep(tokens * token_ms / 1000)
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "fake",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "".join(words)},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 10,
                        "completion_tokens": tokens,
                        "total_tokens": 10 + tokens,
                    },
                }
            )

        async def events() -> Any:
            yield chunk({"role": "assistant", "content": ""})
            for word in words:
                await asyncio.sleep(token_ms / 1000)
                yield chunk({"content": word})
            yield chunk({}, "stop")
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    uvicorn.run(api, host="127.0.0.1", port=port, log_level="warning")


async def one_client(
    client: httpx.AsyncClient, turns: int, first: list[float], total: list[float], errors: list[str]
) -> None:
    r = await client.post("/v1/sessions", json={"title": "load"})
    if r.status_code != 201:
        errors.append(f"create {r.status_code}")
        return
    sid = r.json()["id"]
    for n in range(turns):
        t0 = time.perf_counter()
        got_text = False
        done = False
        try:
            async with client.stream(
                "POST",
                f"/v1/sessions/{sid}/messages",
                json={"content": f"question {n}: what does E-203 mean?", "stream": True},
            ) as resp:
                if resp.status_code != 200:
                    errors.append(f"message {resp.status_code}")
                    return
                event = ""
                async for line in resp.aiter_lines():
                    if line.startswith("event:"):
                        event = line[6:].strip()
                    elif line.startswith("data:"):
                        if event == "text_delta" and not got_text:
                            got_text = True
                            first.append((time.perf_counter() - t0) * 1000)
                        if event == "final":
                            done = True
        except httpx.HTTPError as exc:
            errors.append(type(exc).__name__)
            return
        if not done:
            errors.append("no final event")
            return
        total.append((time.perf_counter() - t0) * 1000)


async def load(url: str, clients: int, turns: int) -> dict[str, Any]:
    first: list[float] = []
    total: list[float] = []
    errors: list[str] = []
    limits = httpx.Limits(max_connections=clients + 5, max_keepalive_connections=0)
    headers = {"Authorization": f"Bearer {KEY}"}
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=300, limits=limits
    ) as client:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(one_client(client, turns, first, total, errors) for _ in range(clients))
        )
        wall = time.perf_counter() - t0

    def pct(values: list[float], q: float) -> float:
        if not values:
            return float("nan")
        return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]

    return {
        "turns": len(total),
        "turns_per_s": len(total) / wall,
        "first_text_ms_p50": pct(first, 50),
        "first_text_ms_p95": pct(first, 95),
        "turn_ms_p50": pct(total, 50),
        "turn_ms_p95": pct(total, 95),
        "errors": len(errors),
        "error_kinds": sorted(set(errors)),
        "wall_s": wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--replicas", default="1,2")
    parser.add_argument("--tokens", type=int, default=40)
    parser.add_argument("--token-ms", type=float, default=20.0)
    parser.add_argument("--folder", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    model_port = free_port()
    model = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve-model",
            str(model_port),
            str(args.tokens),
            str(args.token_ms),
        ]
    )
    rows = []
    try:
        folder = args.folder or Path(tempfile.mkdtemp(prefix="shelfhand-load-"))
        env = {
            "SHELFHAND_MODEL": "fake",
            "OPENAI_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
            "OPENAI_API_KEY": "unused",
            "SHELFHAND_RETRIEVAL_MODE": "keyword",
            "SHELFHAND_API_KEYS": json.dumps(
                {KEY: {"tenant": "t1", "user": "load", "roles": ["user"]}}
            ),
        }
        for n in (int(x) for x in args.replicas.split(",")):
            cluster = start_dev_cluster(folder / f"r{n}", replicas=n, workers=0, extra_env=env)
            try:

                async def run(cluster: Any = cluster) -> dict[str, Any]:
                    proxy = RoundRobinProxy([("127.0.0.1", p) for p in cluster.replica_ports])
                    port = await proxy.start()
                    try:
                        await load(f"http://127.0.0.1:{port}", 2, 1)  # warm-up
                        return await load(f"http://127.0.0.1:{port}", args.clients, args.turns)
                    finally:
                        await proxy.close()

                row = {"replicas": n, **asyncio.run(run())}
                rows.append(row)
            finally:
                cluster.stop()
    finally:
        model.terminate()
        model.wait(10)
    load_avg = os.getloadavg()
    if args.json:
        print(json.dumps({"rows": rows, "loadavg": load_avg}, indent=2))
        return
    print(
        f"{args.clients} clients x {args.turns} turns, answer {args.tokens} tokens x "
        f"{args.token_ms:g} ms; load average {load_avg[0]:.1f}"
    )
    print("| replicas | turns/s | first text p50 / p95 ms | turn p50 / p95 ms | errors |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['replicas']} | {r['turns_per_s']:.1f} | {r['first_text_ms_p50']:.0f} / "
            f"{r['first_text_ms_p95']:.0f} | {r['turn_ms_p50']:.0f} / {r['turn_ms_p95']:.0f} | "
            f"{r['errors']} {' '.join(r['error_kinds'])} |"
        )


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--serve-model":
        fake_model_server(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
    else:
        main()
