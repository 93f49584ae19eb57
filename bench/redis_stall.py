"""Whether a Redis that stops answering holds up the rest of a replica: start a local
``redis-server`` and ``shelfhand serve`` on a workspace with ``redis_url`` pointing at it (no
chat model: the model-free answer path), stop Redis (SIGSTOP) for ``--hold`` seconds while
``--turns`` turns start (each needs its session's claim in Redis), and time ``GET /healthz``
every 100 ms meanwhile.

    python bench/redis_stall.py --workspace WS --key KEY --hold 4 --turns 3

``WS`` holds some documents (``shelfhand ingest --samples -w WS``) and the key (``[[api_keys]]``
in its shelfhand.toml). The tree measured is the one ``python -m shelfhand.cli`` imports
(``PYTHONPATH=<tree>/src``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from shelfhand.dev.services import free_port, start_redis


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workspace", type=Path, required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--hold", type=float, default=4.0)
    ap.add_argument("--turns", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        redis = start_redis(Path(tmp) / "redis")
        assert redis.process is not None
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
        env["SHELFHAND_REDIS_URL"] = redis.url
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "shelfhand.cli",
                "serve",
                "-w",
                str(a.workspace),
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            for _ in range(120):
                try:
                    httpx.get(f"{url}/healthz", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.5)
            headers = {"Authorization": f"Bearer {a.key}"}
            replies: list[tuple[int, float]] = []

            def turn(record: bool) -> None:
                with httpx.Client(base_url=url, headers=headers, timeout=60) as c:
                    session = c.post("/v1/sessions").json()["id"]
                    start = time.perf_counter()
                    r = c.post(
                        f"/v1/sessions/{session}/messages", json={"content": "E-203 是什么故障？"}
                    )
                    if record:
                        replies.append((r.status_code, round(time.perf_counter() - start, 2)))

            turn(False)  # warm
            redis.process.send_signal(signal.SIGSTOP)
            try:
                started = time.perf_counter()
                turns = [threading.Thread(target=turn, args=(True,)) for _ in range(a.turns)]
                for t in turns:
                    t.start()
                worst = 0.0
                while time.perf_counter() - started < a.hold:
                    start = time.perf_counter()
                    httpx.get(f"{url}/healthz", timeout=60)
                    worst = max(worst, time.perf_counter() - start)
                    time.sleep(0.1)
            finally:
                redis.process.send_signal(signal.SIGCONT)
            for t in turns:
                t.join()
            print(
                f"/healthz worst latency while Redis was stopped {a.hold:g} s: {worst:.3f} s; "
                f"the turns (status, s): {sorted(replies)}"
            )
        finally:
            server.terminate()
            server.wait(15)
            redis.stop()


if __name__ == "__main__":
    main()
