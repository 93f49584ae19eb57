"""What an 800 MB request body with a non-JSON content type and no API key does to
``shelfhand serve``, per tree: the server's RSS polled every 50 ms while the body is sent,
the answer and its time. Before the service counted every body as it arrived, such a body
was read whole (a JSON body was bounded, a ``text/plain`` one was not).

    python bench/hostile_bodies.py --trees <before worktree> .
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

MIB = 1 << 20


def _rss_mb(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) // 1024


def measure(tree: Path, port: int, mib: int) -> str:
    env = {
        **os.environ,
        "PYTHONPATH": str(tree / "src"),
        "SHELFHAND_EMBEDDER": "hashing",
        "SHELFHAND_API_KEYS": json.dumps({"k1": {"tenant": "acme", "user": "alice"}}),
    }
    with tempfile.TemporaryDirectory() as ws:
        server = subprocess.Popen(
            [sys.executable, "-m", "shelfhand.cli", "serve", "-w", ws, "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(240):
                try:
                    if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
            start = peak = _rss_mb(server.pid)
            done = threading.Event()

            def watch() -> None:
                nonlocal peak
                while not done.is_set():
                    peak = max(peak, _rss_mb(server.pid))
                    time.sleep(0.05)

            threading.Thread(target=watch, daemon=True).start()

            def body() -> Iterator[bytes]:
                yield b'{"content":"'
                block = b"a" * MIB
                for _ in range(mib):
                    yield block
                yield b'"}'

            began = time.perf_counter()
            try:
                answer = httpx.post(
                    f"{url}/v1/chat/completions",
                    content=body(),
                    headers={"Content-Type": "text/plain"},
                    timeout=300,
                )
                said = f"{answer.status_code} {answer.json()['error']['code']}"
            except httpx.HTTPError as exc:
                said = f"client error {type(exc).__name__}"
            took = time.perf_counter() - began
            time.sleep(1)
            done.set()
            return f"| {tree} | {said} | {took:.1f} | {start} | {peak} | {_rss_mb(server.pid)} |"
        finally:
            server.terminate()
            server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    parser.add_argument("--mib", type=int, default=800, help="MiB of body sent")
    parser.add_argument("--port", type=int, default=8391)
    args = parser.parse_args()
    print("| tree | answer | s | RSS before MB | peak MB | after MB |")
    print("|---|---|---:|---:|---:|---:|")
    for at, tree in enumerate(args.trees):
        print(measure(tree.resolve(), args.port + at, args.mib), flush=True)


if __name__ == "__main__":
    main()
