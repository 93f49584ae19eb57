"""A chat-completions endpoint on a raw loopback socket that can misbehave the way real model
servers do: hang without a byte, cut a chunked stream mid-answer, send malformed JSON, or
send more than any reply can be (a body that never ends, a compressed bomb)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import zlib
from collections import deque


def _body(kind: str, choice: dict[str, object]) -> str:
    """A chat completion (``kind`` ``chat.completion``) or chunk with its one ``choice``."""
    body = {"id": "chatcmpl-1", "object": kind, "created": 1, "model": "fake"}
    return json.dumps({**body, "choices": [{"index": 0, **choice}]})


def _chunk(text: str) -> str:
    return _body("chat.completion.chunk", {"delta": {"content": text}, "finish_reason": None})


def _done() -> str:
    return _body("chat.completion.chunk", {"delta": {}, "finish_reason": "stop"})


def _usage(prompt: int, completion: int) -> str:
    """The last chunk of a stream asked with ``stream_options.include_usage``."""
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "fake"}
    usage = {"prompt_tokens": prompt, "completion_tokens": completion}
    return json.dumps(
        {**body, "choices": [], "usage": {**usage, "total_tokens": prompt + completion}}
    )


SLOW_WORDS = 100
"""The words of a ``slow`` stream, one each 20 ms; its usage: 50 tokens in, one a word out."""


def _completion(text: str) -> bytes:
    message = {"role": "assistant", "content": text}
    return _body("chat.completion", {"message": message, "finish_reason": "stop"}).encode()


def _compressed(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


def _bomb(inflated_mib: int) -> bytes:
    """A gzip body of a completion whose text is ``inflated_mib`` MiB of spaces (a few KiB)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    head, tail = _completion("@").split(b"@")
    parts = [packer.compress(head)]
    block = b" " * 1024**2
    parts += [packer.compress(block) for _ in range(inflated_mib)]
    parts += [packer.compress(tail), packer.flush()]
    return b"".join(parts)


class FakeModelServer:
    """Plays ``modes`` in order, one per request: ``hang``, ``cut``, ``garbage``, ``ok`` or
    ``slow`` (streamed; ``slow``: :data:`SLOW_WORDS` words, one each 20 ms, then its usage); ``endless_stream`` (chunks that never end), ``endless_event`` (one event
    that never ends), ``endless_json`` (a JSON body that never ends), ``bomb`` (a completion of 64 MiB, gzipped into a few KiB), ``declared_huge``
    (a ``Content-Length`` of 1 GiB, then nothing), ``gzip`` and ``deflate_raw`` (a completion
    compressed so, as some servers send it: raw deflate, without its zlib wrapper).

    ``hanging`` is set while the server holds a request without answering;
    ``closed_while_hanging`` when a client closes a connection the server was holding.
    ``requests`` counts the requests read; ``accept_encodings`` holds each one's
    ``Accept-Encoding``.
    """

    def __init__(self) -> None:
        self.modes: deque[str] = deque()
        self.requests = 0
        self.accept_encodings: list[str] = []
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
            head = self._read_request(conn)
            if head is None:
                return
            self.requests += 1
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"accept-encoding:"):
                    self.accept_encodings.append(line.split(b":", 1)[1].strip().decode())
            mode = self.modes.popleft() if self.modes else "ok"
            if mode == "hang":
                self._hang(conn)
                return
            if mode in ("endless_json", "bomb", "declared_huge", "gzip", "deflate_raw"):
                self._whole(conn, mode)
                return
            if mode == "endless_event":  # one event that never ends
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: ")
                block = b"x" * 1024**2
                while True:  # until the client hangs up
                    conn.sendall(block)
            if mode == "endless_stream":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
                events = f"data: {_chunk('and again ')}\n\n".encode() * 1000
                while True:  # until the client hangs up
                    conn.sendall(events)
            head = (
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
            )
            conn.sendall(head.encode())
            if mode == "cut":
                self._send_chunk(conn, f"data: {_chunk('Hello, the answer is')}\n\n")
                conn.shutdown(socket.SHUT_RDWR)  # no terminating chunk: the stream is cut
                return
            if mode == "slow":  # until the client hangs up (a broken pipe ends it)
                for _ in range(SLOW_WORDS):
                    self._send_chunk(conn, f"data: {_chunk('word ')}\n\n")
                    time.sleep(0.02)
                self._send_chunk(conn, f"data: {_done()}\n\n")
                self._send_chunk(conn, f"data: {_usage(50, SLOW_WORDS)}\n\n")
            elif mode == "garbage":
                self._send_chunk(conn, "data: {this is not json\n\n")
            else:
                self._send_chunk(conn, f"data: {_chunk('All good.')}\n\n")
                self._send_chunk(conn, f"data: {_done()}\n\n")
            self._send_chunk(conn, "data: [DONE]\n\n")
            conn.sendall(b"0\r\n\r\n")

    def _whole(self, conn: socket.socket, mode: str) -> None:
        """A reply that is not streamed (each mode as the class says)."""
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
        if mode == "endless_json":
            conn.sendall(f"{head}\r\n".encode() + _completion("@").split(b"@")[0])
            block = b"x" * 1024**2
            while True:  # until the client hangs up
                conn.sendall(block)
        if mode == "declared_huge":
            conn.sendall(f"{head}Content-Length: {1024**3}\r\n\r\n".encode())
            self._hang(conn)
            return
        if mode == "bomb":
            body, encoding = _bomb(64), "gzip"
        elif mode == "gzip":
            body, encoding = _compressed(_completion("Packed small."), 31), "gzip"
        else:
            body, encoding = _compressed(_completion("Packed raw."), -15), "deflate"
        conn.sendall(
            f"{head}Content-Encoding: {encoding}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )

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
    def _read_request(conn: socket.socket) -> bytes | None:
        """The request's head, once its body is read; ``None`` if the client hung up."""
        conn.settimeout(10)
        data = b""
        while b"\r\n\r\n" not in data:
            part = conn.recv(65536)
            if not part:
                return None
            data += part
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        while len(body) < length:
            part = conn.recv(65536)
            if not part:
                return None
            body += part
        return head
