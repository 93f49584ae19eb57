"""Writes done again once Redis answers (:class:`shelfhand.backends.redis.Redo`), on a real
Redis: one that Redis refuses (a key of another type) is dropped with a warning, not kept to
fail every write after it, and the writes behind it are done."""

from __future__ import annotations

import logging

import pytest

from shelfhand.backends.redis import Redo, open_redis


def test_a_write_redis_refuses_is_dropped_and_the_next_ones_are_done(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = open_redis(redis_url)
    try:
        client.set("shelfhand:test:text", "not a hash")
        redo = Redo("the test", expire_after=60)
        # a write that got no answer earlier, which Redis now answers with WRONGTYPE
        redo.add("refused", lambda: client.hincrby("shelfhand:test:text", "n", 1))
        redo.add("behind it", lambda: client.set("shelfhand:test:behind", "done"))

        with caplog.at_level(logging.WARNING, logger="shelfhand.backends.redis"):
            answer = redo.send(
                lambda: client.incr("shelfhand:test:count"), key="now", if_unanswered=lambda: 0
            )

        assert answer == 1
        assert client.get("shelfhand:test:behind") == "done"
        assert not redo  # nothing waits: the refused write is not tried forever
        assert "Redis refused a write done again; it is dropped (refused)" in caplog.text
        assert "WRONGTYPE" in caplog.text
    finally:
        client.delete("shelfhand:test:text", "shelfhand:test:behind", "shelfhand:test:count")
        client.close()
