"""What watching a long streamed reply costs the event loop, per tree: the OpenAI-compatible
adapter reading it from a server on loopback (``OpenAIChatModel.stream``: the SDK, the
chunks, the loop guard; CPU time of the loop's thread, the server's not counted), the loop
guard alone (``shelfhand.providers.repetition``), the OpenAI-compatible embedder reading a
batch of 64 vectors (``OpenAIEmbedder``: 256 to 3,072 floats each; the calling thread's CPU),
the
call-text gate holding a reply that may be a tool call (``agent.streaming.CallTextGate``,
a reply with a brace when tools are offered) and the append-only answer of the
OpenAI-compatible, Responses and A2A streams (``service.completions.AppendedAnswer``).

Replies of 4,000 to 256,000 characters with no loop, in pieces of 4 characters (about a
token); each tree runs in its own process (``PYTHONPATH`` at its ``src``), trees interleaved
round by round, best of the rounds kept.

    python bench/long_replies.py                                  # this tree, ~20 s
    python bench/long_replies.py --trees /tmp/before .            # a worktree beside it
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

WORDS = [
    "lens",
    "cleaning",
    "cloth",
    "alcohol",
    "dust",
    "brush",
    "projector",
    "screen",
    "filter",
    "fan",
    "light",
    "bulb",
    "gently",
    "wipe",
    "soft",
    "check",
    "power",
    "cable",
    "镜头",
    "风扇",
    "滤网",
    "电源",
]
SIZES = (4000, 16000, 64000, 256000)


def reply(chars: int, line_end: str) -> str:
    """Numbered items of 6–14 random words each, none repeated: no loop to find."""
    rng = random.Random(chars)
    out: list[str] = []
    n = size = 0
    while size < chars:
        n += 1
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 14)))
        item = f"{n}. {words.capitalize()}.{line_end}"
        out.append(item)
        size += len(item)
    return "".join(out)


def pieces_of(text: str) -> list[str]:
    return [text[i : i + 4] for i in range(0, len(text), 4)]


class _Chunks(BaseHTTPRequestHandler):
    """Streams the reply ``server.reply`` as chat-completion chunks of 4 characters."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(self.server.events)  # type: ignore[attr-defined]


def chunk_events(text: str) -> bytes:
    """``text`` as a chat-completions event stream: chunks of 4 characters, a stop chunk,
    ``[DONE]``."""
    out = []
    for piece in pieces_of(text):
        delta = {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        out.append(b"data: " + json.dumps({"id": "c", "model": "m", **delta}).encode() + b"\n\n")
    stop = {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    out.append(b"data: " + json.dumps({"id": "c", "model": "m", **stop}).encode() + b"\n\n")
    return b"".join([*out, b"data: [DONE]\n\n"])


def adapter(sizes: tuple[int, ...]) -> dict[int, float]:
    """Loop-thread CPU seconds of ``OpenAIChatModel.stream`` reading each reply."""
    import asyncio

    from shelfhand.core.messages import Message
    from shelfhand.providers.openai_chat import OpenAIChatModel

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Chunks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"

    async def read(size: int) -> float:
        server.events = chunk_events(reply(size, "\n"))  # type: ignore[attr-defined]
        model = OpenAIChatModel("m", base_url=url, api_key="k", max_retries=0, timeout=600)
        try:
            started = time.thread_time()
            async for _ in model.stream([Message.user("tips")]):
                pass
            return time.thread_time() - started
        finally:
            await model.aclose()

    async def all_sizes() -> dict[int, float]:
        return {size: await read(size) for size in sizes}

    try:
        return asyncio.run(all_sizes())
    finally:
        server.shutdown()


class _Vectors(BaseHTTPRequestHandler):
    """Answers an embeddings request with ``server.bodies[dim]`` (64 vectors)."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = self.server.body  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def embedder(dims: tuple[int, ...]) -> dict[int, float]:
    """Calling-thread CPU seconds of ``OpenAIEmbedder.embed`` for 64 texts, per dimension."""
    from shelfhand.providers.openai_embeddings import OpenAIEmbedder

    rng = random.Random(0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Vectors)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    out: dict[int, float] = {}
    try:
        for dim in dims:
            data = [
                {
                    "object": "embedding",
                    "index": i,
                    "embedding": [rng.uniform(-1, 1) for _ in range(dim)],
                }
                for i in range(64)
            ]
            server.body = json.dumps({"object": "list", "data": data}).encode()  # type: ignore[attr-defined]
            embed = OpenAIEmbedder(model="m", base_url=url, api_key="k", batch_size=64, dim=dim)
            embed.embed(["warm"] * 64)
            started = time.thread_time()
            for _ in range(5):
                embed.embed([f"text {i}" for i in range(64)])
            out[dim] = (time.thread_time() - started) / 5
    finally:
        server.shutdown()
    return out


def child() -> None:
    """One round in this process's tree: seconds per case and size, as JSON."""
    from shelfhand.agent.streaming import CallTextGate
    from shelfhand.providers.repetition import Repetition
    from shelfhand.service.completions import AppendedAnswer

    def guard(pieces: list[str]) -> None:
        watch, parts = Repetition(), []
        for piece in pieces:
            parts.append(piece)
            if watch.looping(piece, parts):
                raise AssertionError("a loop found in a reply with none")

    def gate(pieces: list[str]) -> None:
        held = CallTextGate(active=True)
        for piece in pieces:
            held.feed(piece)

    def appended(pieces: list[str]) -> None:
        answer = AppendedAnswer()
        for piece in pieces:
            answer.add({"type": "text_delta", "text": piece})
        answer.add({"type": "final", "output": "", "citations": []})
        assert len(answer.sent) == sum(map(len, pieces))

    cases = {
        "loop guard, lines": (guard, "\n", ""),
        "loop guard, one paragraph": (guard, " ", ""),
        "call gate, plain text": (gate, "\n", ""),
        "call gate, a held reply": (gate, "\n", 'Config: {"a": 1}\n'),
        "append-only answer": (appended, "\n", ""),
    }
    out: dict[str, dict[int, float]] = {
        "adapter, a streamed reply read": adapter(SIZES),
        "embedder, 64 vectors of this many floats": embedder((256, 1024, 3072)),
    }
    for name, (watch, line_end, head) in cases.items():
        out[name] = {}
        for chars in SIZES:
            pieces = pieces_of(head + reply(chars, line_end))
            started = time.perf_counter()
            watch(pieces)
            out[name][chars] = time.perf_counter() - started
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child()
        return
    best: dict[Path, dict[str, dict[str, float]]] = {}
    for r in range(a.rounds):
        for tree in a.trees if r % 2 == 0 else list(reversed(a.trees)):
            env = {**os.environ, "PYTHONPATH": str((tree / "src").resolve())}
            run = subprocess.run(
                [sys.executable, __file__, "--child"],
                env=env,
                check=True,
                capture_output=True,
                text=True,
            )
            for case, times in json.loads(run.stdout).items():
                kept = best.setdefault(tree, {}).setdefault(case, {})
                for size, seconds in times.items():
                    kept[size] = min(kept.get(size, seconds), seconds)
    names = [str(t) for t in a.trees]
    print("| case | size | " + " | ".join(f"{n} (ms)" for n in names) + " |")
    print("|---" * (2 + len(names)) + "|")
    for case in best[a.trees[0]]:
        for size in best[a.trees[0]][case]:
            cells = " | ".join(f"{best[t][case][size] * 1e3:,.1f}" for t in a.trees)
            print(f"| {case} | {int(size):,} | {cells} |")


if __name__ == "__main__":
    main()
