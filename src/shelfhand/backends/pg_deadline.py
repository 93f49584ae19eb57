"""A deadline for a block of PostgreSQL work on the request path.

A server that stops answering without closing its connections (its processes stopped or
swapped out, a lock it waits on, a network that drops packets) holds a query until TCP
gives up, many minutes later; meanwhile the request waits, and so do its thread and its
pooled connection, and every request after it that reads the store. Measured before this
(a PostgreSQL whose processes got ``SIGSTOP``): a search and a session's message each hung
past the client's 90 s timeout, while new sessions and ``/readyz`` answered 503 in 5 s.

:func:`deadline` watches one block: when it outlives ``seconds``, one watcher thread hangs
up the block's connection (``shutdown`` of its socket), so the call blocked on it fails at
once, the connection is closed (the pool drops it) and the caller gets
:class:`~shelfhand.core.errors.DependencyUnavailableError` saying the server did not answer
in time (the service answers 503). A transaction whose connection is gone is rolled back by
the server, so the block's transaction is never half applied. Long work on purpose (an
import, a bulk ingest, an index build) runs without a deadline.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from shelfhand.backends.urls import redact_url
from shelfhand.core.errors import DependencyUnavailableError

if TYPE_CHECKING:
    import psycopg

__all__ = ["QUERY_DEADLINE_S", "deadline", "hung_up_after"]

logger = logging.getLogger(__name__)

QUERY_DEADLINE_S = 30.0
"""How long a block of work on the request path may wait for PostgreSQL (a search, a
session's read or write, a budget's reservation): far beyond what any of them takes
(milliseconds; a keyword search in SQL at 1M chunks, 1 to 4 s), short of a client's
patience."""


class _Watch:
    """One watched block: ``done`` once it has ended, ``fired`` once it was hung up (the
    lock orders the two: a block that has ended is never hung up)."""

    __slots__ = ("conn", "done", "fired", "lock")

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.done = False
        self.fired = False
        self.lock = threading.Lock()

    def hang_up(self) -> None:
        with self.lock:
            if self.done:
                return
            self.fired = True
            try:
                # a duplicate of the connection's socket: shutting it down ends the
                # connection for every descriptor of it (the blocked call reads its end),
                # and closing the duplicate leaves the connection's own descriptor to it
                with socket.socket(fileno=os.dup(self.conn.pgconn.socket)) as dup:
                    dup.shutdown(socket.SHUT_RDWR)
            except Exception:  # closed meanwhile: nothing left to hang up
                logger.debug("could not hang up a PostgreSQL connection", exc_info=True)


class _Watcher:
    """The deadlines of the blocks being watched, and the thread that keeps them."""

    def __init__(self) -> None:
        self._due: list[tuple[float, int, _Watch]] = []
        self._changed = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, watch: _Watch, seconds: float) -> None:
        with self._changed:
            heapq.heappush(self._due, (time.monotonic() + seconds, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="shelfhand-pg-deadlines", daemon=True
                )
                self._thread.start()
            elif self._due[0][2] is watch:  # the soonest now: the thread waits less
                self._changed.notify()

    def _run(self) -> None:
        due = self._due
        while True:
            with self._changed:
                while due and due[0][2].done:  # ended in time: forgotten
                    heapq.heappop(due)
                if not due:
                    self._changed.wait()
                    continue
                left = due[0][0] - time.monotonic()
                if left > 0:
                    self._changed.wait(left)
                    continue
                watch = heapq.heappop(due)[2]
            watch.hang_up()


_watcher = _Watcher()


@contextmanager
def hung_up_after(conn: psycopg.Connection[Any], seconds: float) -> Iterator[_Watch]:
    """Hang up ``conn`` if the block still runs after ``seconds`` (then the block's call on
    it fails, and ``conn`` is closed when the block ends); the watch says whether it was
    (``fired``)."""
    watch = _Watch(conn)
    _watcher.add(watch, seconds)
    try:
        yield watch
    finally:
        with watch.lock:
            watch.done = True
        if watch.fired:
            conn.close()  # its socket is shut: the pool drops a closed connection


@contextmanager
def deadline(conn: psycopg.Connection[Any], seconds: float | None, url: str) -> Iterator[None]:
    """Run the block on ``conn`` within ``seconds`` (``None``: no deadline), or hang up
    ``conn`` and raise :class:`DependencyUnavailableError` (see the module docstring)."""
    if seconds is None:
        yield
        return
    with hung_up_after(conn, seconds) as watch:
        try:
            yield
        except BaseException as exc:
            if watch.fired:
                raise DependencyUnavailableError(
                    f"PostgreSQL at {redact_url(url)} did not answer within {seconds:g} s; "
                    "try again shortly",
                    dependency="postgresql",
                ) from exc
            raise
