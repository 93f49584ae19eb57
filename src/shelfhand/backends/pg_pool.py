"""A connection pool that works again as soon as PostgreSQL does.

``psycopg_pool`` retries a connection it could not make on a growing back-off (1, 2, 4, 8 ...
seconds, for up to 5 minutes), and a request that finds a pooled connection broken sleeps on
the same back-off (1 s, then 2 s, ...) before it takes the next. So after PostgreSQL came
back, requests kept failing until the next retry fell due: measured with the service on the
embedded server (``bench/pg_outage_recovery.py``), sessions, traces and usage answered 503
for 11.9 s after an outage of 21 s, 17.9 s after one of 41 s and 5.7 s after one of 23 s
(``kill -9``); and with three idle connections left from before a restart with no request
in between, the first request after it took 3.1 s (with six, 503 after the pool's 5 s).

:class:`RecoveringPool` keeps the pool but not its waits:

- a connection the pool could not make is retried once, :data:`GIVE_UP_S` later, then given
  up (``reconnect_timeout``): while PostgreSQL is down, connections are tried for requests
  that wait for one, not on a schedule of their own (none while nothing asks);
- a request that waits for a connection, while the pool has room for more, waits
  :data:`RETRY_S` at a time: each wait asks the pool to connect again, so a request waiting
  when PostgreSQL comes back gets a connection within about :data:`RETRY_S` (the pool grows
  by one attempt at a time: 2 tries a second measured with one request waiting, 3 with four);
- the check before a connection is handed out (:class:`~shelfhand.backends.postgres.IdleCheck`)
  is the pool's own: a connection that fails it is dropped and the next is taken at once, with
  no sleep (a pool holds at most ``max_size`` connections from before a restart; only after
  more failures than that does the request wait :data:`RETRY_S` between tries).

A broken connection is never handed out: every connection is checked as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

__all__ = ["GIVE_UP_S", "RETRY_S", "RecoveringPool"]

RETRY_S = 0.5
"""Seconds a request waits for a connection before it asks the pool to connect again."""

GIVE_UP_S = 0.5
"""Seconds after its first failure the pool gives a connection attempt up (one retry)."""


class RecoveringPool(ConnectionPool[psycopg.Connection[Any]]):
    """A ``ConnectionPool`` that retries without back-off (see the module docstring).

    Args:
        conninfo: The database URL.
        check: Called on a connection before it is handed out; raises when it does not work.
        **kwargs: The other arguments of ``ConnectionPool`` (not ``reconnect_timeout``).
    """

    def __init__(
        self,
        conninfo: str,
        *,
        check: Callable[[psycopg.Connection[Any]], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(conninfo, reconnect_timeout=GIVE_UP_S, **kwargs)
        self._borrow_check = check

    def getconn(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        """A working connection within ``timeout`` seconds (the pool's ``timeout`` when
        ``None``), or ``PoolTimeout``."""
        if timeout is None:
            timeout = self.timeout
        deadline = time.monotonic() + timeout
        failed = 0
        while True:
            conn = self._wait_for_one(deadline, timeout)
            if self._borrow_check is None:
                return conn
            try:
                self._borrow_check(conn)
            except BaseException as exc:
                conn.close()
                self.putconn(conn)
                if not isinstance(exc, Exception):  # cancelled: no next try
                    raise
                # broken (closed by the server, or no answer to the check in time): the
                # pool drops it and makes another; the next one is tried at once
                failed += 1
                if failed > self.max_size:  # not stale ones: new ones fail too
                    time.sleep(max(0.0, min(RETRY_S, deadline - time.monotonic())))
                continue
            return conn

    def wait_connected(self, timeout: float) -> None:
        """Return once the pool has made a connection (asking for one every
        :data:`RETRY_S`), or raise ``PoolTimeout`` after ``timeout`` seconds."""
        self.putconn(self._wait_for_one(time.monotonic() + timeout, timeout))

    def _wait_for_one(self, deadline: float, timeout: float) -> psycopg.Connection[Any]:
        """A connection from the pool, unchecked, by ``deadline``."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PoolTimeout(f"couldn't get a connection after {timeout:.2f} sec")
            full = self.get_stats().get("pool_size", 0) >= self.max_size
            try:  # a full pool cannot grow: waiting again would only lose the turn
                return super().getconn(left if full else min(left, RETRY_S))
            except PoolTimeout:
                continue
