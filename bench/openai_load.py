"""``/v1/chat/completions`` against the session API: the same streamed turns, one server.

Starts ``shelfhand serve`` on 127.0.0.1 (a fresh workspace, the scripted model, the hashing
embedder, the sample corpus uploaded), then alternates rounds of N concurrent clients:

* ``session_api``: each client has a session and posts ``{"content", "stream": true}`` to
  ``/v1/sessions/{id}/messages``, reading the SSE stream to its ``final`` event;
* ``chat_completions``: each client posts OpenAI-style requests with ``stream: true`` and
  ``user`` set to its own conversation key (one server-side session per client, as above),
  reading the ``chat.completion.chunk`` stream to ``[DONE]``.

Rounds alternate (A B, B A, A B ...) so machine noise hits both alike; the report gives turns/s
and latency percentiles per path over all its rounds, and the ratios.

    python bench/openai_load.py                               # 50 clients, 3 x 5 s per path
    python bench/openai_load.py --clients 50 --rounds 3 --seconds 5 --scenario text

Bounded on purpose: loopback only, at most 200 clients, 10 s a round and 5 rounds.
Goal: chat completions within 10 % of the session API (throughput and p50).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from service_load import RawClient, one_session, start_server, upload_corpus

MAX_CLIENTS = 200
MAX_SECONDS = 10.0
MAX_ROUNDS = 5


async def session_client(
    host: str, port: int, stop_at: float, latencies: list[float], errors: list[str], n: int
) -> None:
    await one_session(host, port, stop_at, latencies, errors)  # service_load's own client


async def completions_client(
    host: str, port: int, stop_at: float, latencies: list[float], errors: list[str], n: int
) -> None:
    client = RawClient(host, port)
    conversation = f"bench-{n}-{time.perf_counter_ns()}"  # a fresh session per round
    try:
        turn = 0
        while time.perf_counter() < stop_at:
            turn += 1
            payload = {
                "model": "shelfhand",
                "stream": True,
                "stream_options": {"include_usage": True},
                "user": conversation,
                "messages": [{"role": "user", "content": f"保修期多久？#{turn}"}],
            }
            started = time.perf_counter()
            status, body = await client.post("/v1/chat/completions", payload)
            if status != 200 or not body.endswith(b"data: [DONE]\n\n"):
                errors.append(str(status))
            else:
                latencies.append(time.perf_counter() - started)
    finally:
        client.close()


PATHS = {"session_api": session_client, "chat_completions": completions_client}


async def one_round(url: str, path: str, clients: int, seconds: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    stop_at = started + seconds
    run = PATHS[path]
    await asyncio.gather(
        *(run(host, int(port), stop_at, latencies, errors, i) for i in range(clients))
    )
    return {"latencies": latencies, "errors": errors, "seconds": time.perf_counter() - started}


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ms = sorted(x * 1000 for r in rounds for x in r["latencies"])
    seconds = sum(r["seconds"] for r in rounds)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 1) if ms else float("nan")

    return {
        "turns": len(ms),
        "turns_per_s": round(len(ms) / seconds, 1),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "mean_ms": round(statistics.fmean(ms), 1) if ms else float("nan"),
        "errors": sum(len(r["errors"]) for r in rounds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0, help="per round")
    parser.add_argument("--rounds", type=int, default=3, help="per path")
    parser.add_argument("--scenario", choices=["text", "rag"], default="rag")
    args = parser.parse_args()
    clients = max(1, min(args.clients, MAX_CLIENTS))
    seconds = max(1.0, min(args.seconds, MAX_SECONDS))
    rounds = max(1, min(args.rounds, MAX_ROUNDS))
    results: dict[str, list[dict[str, Any]]] = {p: [] for p in PATHS}
    with tempfile.TemporaryDirectory(prefix="shelfhand-openai-load-") as tmp:
        proc, url = start_server(Path(tmp), args.scenario)
        try:
            if args.scenario == "rag":
                upload_corpus(url)
            for path in PATHS:  # warm-up, not counted
                asyncio.run(one_round(url, path, 2, 0.5))
            for r in range(rounds):  # A B, B A, A B, ...: a drifting load hits both alike
                for path in list(PATHS)[:: 1 if r % 2 == 0 else -1]:
                    results[path].append(asyncio.run(one_round(url, path, clients, seconds)))
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    report = {p: summary(r) for p, r in results.items()}
    base, ours = report["session_api"], report["chat_completions"]
    report["ratios"] = {
        "throughput": round(ours["turns_per_s"] / base["turns_per_s"], 3),
        "p50": round(ours["p50_ms"] / base["p50_ms"], 3),
        "p95": round(ours["p95_ms"] / base["p95_ms"], 3),
    }
    report["setup"] = {
        "clients": clients,
        "seconds_per_round": seconds,
        "rounds_per_path": rounds,
        "scenario": args.scenario,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(["python", "bench/openai_load.py", *sys.argv[1:]]),
    }
    print(json.dumps(report, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
