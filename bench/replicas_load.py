"""Load on 1 vs 2 ``shelfhand serve`` replicas sharing PostgreSQL and Redis (issue 14).

Starts a local PostgreSQL 18 and redis-server (``shelfhand.dev.services``), then for each
replica count: that many ``shelfhand serve`` processes on 127.0.0.1 with ``database_url`` and
``redis_url`` set (sessions, memory and audit in PostgreSQL; the turn lock and governance in
Redis; keyword retrieval; the scripted model answering at once). N client sessions, spread
round-robin over the replicas by the client (no proxy in the path), stream chat turns over SSE
for a fixed time, as in ``bench/service_load.py`` (whose client this reuses). A one-process row
without PostgreSQL or Redis is the baseline.

    python bench/replicas_load.py [--sessions 50] [--seconds 10]

Bounded on purpose: loopback only, at most 200 sessions and 20 s per row.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from service_load import (
    KEY,
    MAX_SECONDS,
    MAX_SESSIONS,
    SCRIPTS,
    cpu_seconds,
    free_port,
    one_session,
)

from shelfhand.dev.services import start_postgres, start_redis


def start_replica(
    workspace: Path, env_extra: dict[str, str]
) -> tuple[subprocess.Popen[bytes], str]:
    workspace.mkdir(parents=True, exist_ok=True)
    script = workspace / "script.json"
    script.write_text(json.dumps(SCRIPTS["text"], ensure_ascii=False), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(
        SHELFHAND_EMBEDDER="hashing",
        SHELFHAND_RETRIEVAL_MODE="keyword",
        SHELFHAND_MODEL=f"scripted:{script}",
        SHELFHAND_API_KEYS=json.dumps({KEY: {"tenant": "bench", "user": "load"}}),
        **env_extra,
    )
    port = free_port()
    cmd = [sys.executable, "-m", "shelfhand.cli", "serve", "-w", str(workspace)]
    cmd += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else b""
            raise RuntimeError("replica exited:\n" + err.decode(errors="replace"))
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("replica did not start within 90 s")


async def drive(urls: list[str], sessions: int, seconds: float) -> dict[str, Any]:
    targets = [u.removeprefix("http://").split(":") for u in urls]
    for host, port in targets:  # warm up every replica
        await one_session(host, int(port), time.perf_counter() + 0.5, [], [])
    latencies: list[float] = []
    errors: list[str] = []
    started = time.perf_counter()
    stop_at = started + seconds
    await asyncio.gather(
        *(
            one_session(targets[i % len(targets)][0], int(targets[i % len(targets)][1]),
                        stop_at, latencies, errors)
            for i in range(sessions)
        )
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    ms = sorted(x * 1000 for x in latencies)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 1) if ms else float("nan")

    return {
        "turns": len(ms),
        "turns_per_s": round(len(ms) / elapsed, 1),
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "errors": len(errors),
        "error_kinds": sorted(set(errors))[:5],
    }


def run_row(
    folder: Path, replicas: int, env_extra: dict[str, str], sessions: int, seconds: float
) -> dict[str, Any]:
    procs: list[subprocess.Popen[bytes]] = []
    try:
        urls = []
        for n in range(replicas):
            proc, url = start_replica(folder / f"ws-{replicas}-{n}", env_extra)
            procs.append(proc)
            urls.append(url)
        before = sum(cpu_seconds(p.pid) for p in procs)
        result = asyncio.run(drive(urls, sessions, seconds))
        cpu = sum(cpu_seconds(p.pid) for p in procs) - before
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    result["server_cpu_ms_per_turn"] = round(cpu * 1000 / max(1, result["turns"]), 2)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=50)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    sessions = max(1, min(args.sessions, MAX_SESSIONS))
    seconds = max(1.0, min(args.seconds, MAX_SECONDS))
    rows: list[tuple[str, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory(prefix="shelfhand-replicas-") as tmp:
        folder = Path(tmp)
        rows.append(("1 process, embedded, no Redis", run_row(folder, 1, {}, sessions, seconds)))
        redis = start_redis(folder / "redis")
        pg = start_postgres(folder / "pg")
        try:
            shared = {
                "SHELFHAND_DATABASE_URL": pg.create_database("bench"),
                "SHELFHAND_REDIS_URL": redis.url,
            }
            for replicas in (1, 2):
                label = f"{replicas} replica{'s' if replicas > 1 else ''}, PostgreSQL + Redis"
                rows.append((label, run_row(folder, replicas, shared, sessions, seconds)))
        finally:
            pg.stop()
            redis.stop()
    print(
        f"shelfhand serve replicas, {os.cpu_count()} CPUs, {sessions} SSE sessions, {seconds:g} s per row"
    )
    print(
        f"{'setup':36} {'turns/s':>8} {'p50 ms':>8} {'p95 ms':>8} {'errors':>6} {'srv CPU ms/turn':>15}"
    )
    for label, r in rows:
        print(
            f"{label:36} {r['turns_per_s']:>8} {r['p50_ms']:>8} {r['p95_ms']:>8} "
            f"{r['errors']:>6} {r['server_cpu_ms_per_turn']:>15}"
        )
    print("RESULT " + json.dumps([{"setup": label, **r} for label, r in rows]))


if __name__ == "__main__":
    main()
