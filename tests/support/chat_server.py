"""A real chat-completions server on 127.0.0.1 that answers from a per-test script."""

from __future__ import annotations

import json
import select
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD = "__hold__"
"""Put in ``Reply.sse`` (or set ``Reply.hold``) to stall until the test ends."""


@dataclass
class Reply:
    """One scripted HTTP answer: a JSON body, or server-sent events."""

    status: int = 200
    body: Any = None
    sse: list[Any] | None = None
    done: bool = True
    headers: dict[str, str] = field(default_factory=dict)
    hold: bool = False
    ascii: bool = False
    """JSON with every non-ASCII character as a ``\\u`` escape (how half of a surrogate
    pair can be sent: valid JSON, but no text)."""


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ChatServer:
    """Records every request and plays back ``replies`` in order."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self.release = threading.Event()
        self.disconnects = 0
        """Held requests whose client closed the connection while the server stalled."""
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.handle_error = lambda request, address: None  # type: ignore[method-assign]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def add(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def next_reply(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self.replies:
                return self.replies.popleft()
        return Reply(status=500, body={"error": {"message": "the test scripted no reply"}})

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def _handler_for(server: ChatServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                body = {"object": "list", "data": [{"id": "local", "object": "model"}]}
                data = json.dumps(body).encode("utf-8")
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_error(404)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode("utf-8")
            received = Received(
                path=self.path,
                headers={k.lower(): v for k, v in self.headers.items()},
                body=json.loads(raw) if raw else {},
            )
            reply = server.next_reply(received)
            if reply.hold:
                self._hold()
                return
            if reply.sse is not None:
                self._send_events(reply)
            else:
                self._send_json(reply)

        def _send_json(self, reply: Reply) -> None:
            data = json.dumps(reply.body, ensure_ascii=reply.ascii).encode("utf-8")
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in reply.headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _send_events(self, reply: Reply) -> None:
            self.send_response(reply.status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            events = [*reply.sse, *(["[DONE]"] if reply.done else [])]  # type: ignore[misc]
            for event in events:
                if event == HOLD:
                    self._hold()
                    return
                payload = (
                    event if isinstance(event, str) else json.dumps(event, ensure_ascii=reply.ascii)
                )
                self.wfile.write(f"data: {payload}\n\n".encode())
                self.wfile.flush()

        def _hold(self) -> None:
            """Stall until the test ends or the client hangs up (counted in ``disconnects``)."""
            conn: socket.socket = self.connection
            for _ in range(200):  # at most 10 s
                if server.release.wait(0.05):
                    return
                readable, _, _ = select.select([conn], [], [], 0)
                if readable:
                    try:
                        closed = conn.recv(1, socket.MSG_PEEK) == b""
                    except OSError:
                        closed = True
                    if closed:
                        with server._lock:
                            server.disconnects += 1
                        return

    return Handler


# --- wire-format builders for tests -------------------------------------------------
def completion(
    content: Any = "", *, tool_calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "qwen2.5-7b-instruct",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen2.5-7b-instruct",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
