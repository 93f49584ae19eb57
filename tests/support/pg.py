"""PostgreSQL for store tests that run on SQLite and on PostgreSQL alike."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest


@contextmanager
def pg_pool(request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """A connection pool on a fresh database (the ``pg_url`` fixture) and its URL; the pool
    is closed after."""
    from shelfhand.backends.postgres import open_pool

    url = request.getfixturevalue("pg_url")
    pool = open_pool(url, max_size=2)
    try:
        yield pool, url
    finally:
        pool.close()
