"""What a long streamed answer costs ``shelfhand serve``, per tree: the server process's CPU
per streamed piece, its model an OpenAI-compatible server on loopback (this script's) that
streams replies of 4,000 to 64,000 characters in chunks of 4 characters (about a token),
read through a session's SSE message and through the OpenAI-compatible endpoint. Each tree's
server runs from its own ``src`` (``PYTHONPATH``), trees interleaved round by round, the best
round kept.

    python bench/stream_service.py                          # this tree, ~1 min
    python bench/stream_service.py --trees /tmp/before .    # a worktree beside it
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from long_replies import chunk_events, pieces_of, reply
from service_load import KEY, cpu_seconds, start_server, stop_server

SIZES = (4000, 16000, 64000)
QUESTION = "Twenty tips, please."


class _Model(BaseHTTPRequestHandler):
    """The long reply to the benchmark's question; "OK." to anything else the turn asks."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        last = body["messages"][-1].get("content")
        server: Any = self.server
        events = server.long if last == QUESTION else server.short
        server.requests += 1
        server.long_sent += events is server.long
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        self.wfile.write(events)


def start(tree: Path, workspace: Path, model_url: str) -> tuple[Any, str]:
    """``shelfhand serve`` of ``tree`` (:func:`service_load.start_server`), its model the
    server at ``model_url``."""
    env = {
        "PYTHONPATH": str((tree / "src").resolve()),
        "SHELFHAND_MODEL": "m",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "k",
        "SHELFHAND_MODEL_TIMEOUT": "600",
        # the question reaches the model as it is (no search first): the long reply answers it
        "SHELFHAND_ANSWER_RETRIEVAL": "tool",
    }
    return start_server(workspace, "rag", server_env=env)


def one_round(tree: Path, model: Any) -> dict[str, dict[int, float]]:
    """Server CPU seconds per piece, per route and size."""
    out: dict[str, dict[int, float]] = {"session SSE": {}, "OpenAI-compatible": {}}
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start(tree, Path(tmp), model.url)
        headers = {"Authorization": f"Bearer {KEY}"}
        try:
            with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
                warm = client.post("/v1/sessions").json()["id"]  # (first turn: imports, caches)
                client.post(f"/v1/sessions/{warm}/messages", json={"content": "hi", "stream": True})
                for size in SIZES:
                    text = reply(size, "\n")
                    model.long = chunk_events(text)
                    pieces = len(pieces_of(text))
                    for route in out:
                        before = cpu_seconds(proc.pid)
                        if route == "session SSE":
                            session = client.post("/v1/sessions").json()["id"]
                            body = {"content": QUESTION, "stream": True}
                            r = client.post(f"/v1/sessions/{session}/messages", json=body)
                        else:
                            body = {
                                "model": "shelfhand",
                                "stream": True,
                                "messages": [{"role": "user", "content": QUESTION}],
                            }
                            r = client.post("/v1/chat/completions", json=body)
                        spent = cpu_seconds(proc.pid) - before
                        assert r.status_code == 200 and "error" not in r.text[-300:], r.text[-300:]
                        out[route][size] = spent / pieces
        finally:
            stop_server(proc)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trees", nargs="+", type=Path, default=[Path(".")])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    model: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Model)
    model.short, model.requests, model.long_sent = chunk_events("OK."), 0, 0
    model.long = b""  # (set per size; the warm-up turn comes first)
    model.url = f"http://127.0.0.1:{model.server_address[1]}/v1"
    threading.Thread(target=model.serve_forever, daemon=True).start()
    best: dict[Path, dict[str, dict[int, float]]] = {}
    for r in range(a.rounds):
        for tree in a.trees if r % 2 == 0 else list(reversed(a.trees)):
            for route, sizes in one_round(tree, model).items():
                kept = best.setdefault(tree, {}).setdefault(route, {})
                for size, seconds in sizes.items():
                    kept[size] = min(kept.get(size, seconds), seconds)
    names = [str(t) for t in a.trees]
    print(f"server CPU per streamed piece (µs), best of {a.rounds} rounds")
    print(f"(model requests: {model.requests}, long replies among them: {model.long_sent})")
    print("| route | characters | " + " | ".join(names) + " |")
    print("|---" * (2 + len(names)) + "|")
    for route in best[a.trees[0]]:
        for size in SIZES:
            cells = " | ".join(f"{best[t][route][size] * 1e6:.0f}" for t in a.trees)
            print(f"| {route} | {size:,} | {cells} |")


if __name__ == "__main__":
    main()
