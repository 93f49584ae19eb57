"""What a reply longer than any reply can be costs a client, per tree: a chat model server on
loopback that sends a JSON body that never ends, a gzip bomb (a completion of 1 GiB in about
1 MiB of gzip), or an event stream that never ends; and an A2A agent whose card never ends.

Each case runs in a child process of its own (``PYTHONPATH`` at the tree's ``src``) whose
address space is capped (``--cap-gb``, 4 by default: a tree that reads the reply whole fails
with ``MemoryError`` instead of taking the machine's memory) and which is killed after
``--seconds``. Reported: how the call ended, its seconds, and the child's peak RSS.

    python bench/reply_bounds.py                                 # this tree
    python bench/reply_bounds.py --trees /tmp/before .           # a worktree beside it
    python bench/reply_bounds.py --trees /tmp/before . --cases gzip_bomb --cap-gb 12
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

CASES = ("endless_json", "gzip_bomb", "endless_stream", "a2a_endless_card")


def _serve(mode: str) -> int:
    """A loopback server answering every request as ``mode`` says; its port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)

    def bomb() -> bytes:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        parts = [packer.compress(b'{"choices":[{"message":{"content":"')]
        block = b" " * 1024**2
        parts += [packer.compress(block) for _ in range(1024)]
        parts += [packer.compress(b'"},"finish_reason":"stop"}]}'), packer.flush()]
        return b"".join(parts)

    payload = bomb() if mode == "gzip_bomb" else b""

    def read_request(conn: socket.socket) -> None:
        # the whole request: a socket closed with some of it unread is reset, not answered
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            body += conn.recv(65536)

    def answer(conn: socket.socket) -> None:
        try:
            read_request(conn)
            if mode == "gzip_bomb":
                head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                head += f"content-encoding: gzip\r\ncontent-length: {len(payload)}\r\n\r\n"
                conn.sendall(head.encode() + payload)
                return
            if mode == "endless_stream":
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
                event = {"choices": [{"index": 0, "delta": {"content": "and again "}}]}
                block = f"data: {json.dumps(event)}\n\n".encode() * 2000
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{")
                block = b" " * 1024**2
            while True:
                conn.sendall(block)
        except OSError:
            pass
        finally:
            conn.close()

    def serve() -> None:
        while True:
            conn, _ = sock.accept()
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return int(sock.getsockname()[1])


async def _call(case: str, url: str) -> str:
    from shelfhand.core.messages import Message

    if case == "a2a_endless_card":
        from shelfhand.providers.a2a_client import RemoteA2AAgent

        async for _ in RemoteA2AAgent(url.removesuffix("/v1"), name="partner").stream("hi"):
            pass
        return "answered"
    from shelfhand.providers.openai_chat import OpenAIChatModel

    model = OpenAIChatModel("m", base_url=url, api_key="k", max_retries=0, timeout=600)
    if case == "endless_stream":
        async for _ in model.stream([Message.user("hi")]):
            pass
    else:
        await model.request([Message.user("hi")])
    return "answered"


def child(case: str, cap_gb: float) -> None:
    """One case in this process (the part measured)."""
    import asyncio

    cap = int(cap_gb * 1024**3)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    mode = "endless_json" if case == "a2a_endless_card" else case
    url = f"http://127.0.0.1:{_serve(mode)}/v1"
    start = time.perf_counter()
    try:
        outcome = asyncio.run(_call(case, url))
    except MemoryError:
        outcome = "MemoryError"
    except Exception as exc:  # the bounded clients' errors
        outcome = f"{type(exc).__name__}: {str(exc)[:90]}"
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"outcome": outcome, "seconds": seconds, "peak_mib": peak}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", default=["."])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--cap-gb", type=float, default=4.0)
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.cap_gb)
        return
    print("| case | tree | how it ended | seconds | peak RSS (MiB) |")
    print("|---|---|---|---|---|")
    for case in a.cases:
        for tree in a.trees:
            env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve() / "src")}
            command = [sys.executable, __file__, "--child", case, "--cap-gb", str(a.cap_gb)]
            try:
                out = subprocess.run(
                    command, env=env, capture_output=True, text=True, timeout=a.seconds
                )
                row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
            except subprocess.TimeoutExpired:
                row = {"outcome": f"still reading after {a.seconds:g} s", "seconds": a.seconds}
            except (IndexError, json.JSONDecodeError):
                row = {"outcome": f"died ({out.returncode})", "seconds": float("nan")}
            peak = row.get("peak_mib")
            shown = f"{peak:,.0f}" if peak is not None else "—"
            print(f"| {case} | {tree} | {row['outcome']} | {row['seconds']:.1f} | {shown} |")


if __name__ == "__main__":
    main()
