"""A ``BaseHTTPRequestHandler`` served on 127.0.0.1 in a thread, for tests that need a real
HTTP peer (a refusing API, a healthy one)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextlib.contextmanager
def serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """Serve ``handler`` on a free port of 127.0.0.1; yields the port, stops on leaving."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class Refusing(BaseHTTPRequestHandler):
    """Answers every GET with 401 and no body (an API refusing a token)."""

    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass
