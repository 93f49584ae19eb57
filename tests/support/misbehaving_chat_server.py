"""A chat-completions endpoint on a raw loopback socket that can misbehave the way real model
servers do: hang without a byte, cut a chunked stream mid-answer, or send malformed JSON."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections import deque


def _chunk(text: str) -> str:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }
    return json.dumps(body)


def _done() -> str:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "fake",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    return json.dumps(body)


class FakeModelServer:
    """Plays ``modes`` in order, one per request: ``hang``, ``cut``, ``garbage`` or ``ok``.

    ``hanging`` is set while the server holds a request without answering;
    ``closed_while_hanging`` when a client closes a connection the server was holding.
    """

    def __init__(self) -> None:
        self.modes: deque[str] = deque()
        self.hanging = threading.Event()
        self.closed_while_hanging = threading.Event()
        self.release = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self._sock.settimeout(0.05)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"

    def stop(self) -> None:
        self.release.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        while not self.release.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        # a client that gives up (a garbage stream is a 502 at once) may close first
        with conn, contextlib.suppress(ConnectionResetError, BrokenPipeError):
            if not self._read_request(conn):
                return
            mode = self.modes.popleft() if self.modes else "ok"
            if mode == "hang":
                self._hang(conn)
                return
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            conn.sendall(head.encode())
            if mode == "cut":
                self._send_chunk(conn, f"data: {_chunk('Hello, the answer is')}\n\n")
                conn.shutdown(socket.SHUT_RDWR)  # no terminating chunk: the stream is cut
                return
            if mode == "garbage":
                self._send_chunk(conn, "data: {this is not json\n\n")
            else:
                self._send_chunk(conn, f"data: {_chunk('All good.')}\n\n")
                self._send_chunk(conn, f"data: {_done()}\n\n")
            self._send_chunk(conn, "data: [DONE]\n\n")
            conn.sendall(b"0\r\n\r\n")

    def _hang(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        self.hanging.set()
        while not self.release.is_set():
            try:
                if conn.recv(1024) == b"":
                    self.closed_while_hanging.set()
                    return
            except TimeoutError:
                continue
            except OSError:
                self.closed_while_hanging.set()
                return

    @staticmethod
    def _send_chunk(conn: socket.socket, text: str) -> None:
        data = text.encode()
        conn.sendall(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    @staticmethod
    def _read_request(conn: socket.socket) -> bool:
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return False
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            part = conn.recv(65536)
            if not part:
                return False
            body += part
        return True
