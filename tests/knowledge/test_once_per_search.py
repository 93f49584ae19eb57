"""A derived index looks for other processes' writes once per search, not once per side of it
(shelfhand.knowledge.stores.outbox.OncePerSearch), and never skips a look a search needs."""

from __future__ import annotations

import threading
import time

import pytest

from shelfhand.knowledge.stores.outbox import OncePerSearch, search_start


class Checks:
    def __init__(self, *, seconds: float = 0.0, fail: int = 0) -> None:
        self.count = 0
        self.seconds = seconds
        self.fail = fail

    def __call__(self) -> None:
        self.count += 1
        if self.seconds:
            time.sleep(self.seconds)
        if self.fail:
            self.fail -= 1
            raise ConnectionError("the store is down")


def in_search(fn: OncePerSearch, calls: int = 1, started: float | None = None) -> None:
    token = search_start.set(time.monotonic() if started is None else started)
    try:
        for _ in range(calls):
            fn()
    finally:
        search_start.reset(token)


def test_outside_a_search_every_call_looks() -> None:
    checks = Checks()
    once = OncePerSearch(checks)
    for _ in range(3):
        once()
    assert checks.count == 3


def test_within_a_search_only_the_first_call_looks_and_the_next_search_looks_again() -> None:
    checks = Checks()
    once = OncePerSearch(checks)
    in_search(once, calls=3)
    assert checks.count == 1
    in_search(once, calls=3)
    assert checks.count == 2


def test_a_look_that_began_before_the_search_does_not_count_for_it() -> None:
    checks = Checks()
    once = OncePerSearch(checks)
    once()  # outside any search, before the search below began
    in_search(once)
    assert checks.count == 2


def test_a_search_begun_while_an_older_look_ran_looks_itself() -> None:
    checks = Checks()
    once = OncePerSearch(checks)
    begun = time.monotonic()
    time.sleep(0.01)
    in_search(once, started=begun)  # looks: began after `begun`
    in_search(once, started=time.monotonic() + 1)  # a search begun after that look finished
    assert checks.count == 2


def test_concurrent_sides_of_one_search_share_one_look() -> None:
    checks = Checks(seconds=0.05)
    once = OncePerSearch(checks)
    started = time.monotonic()
    threads = [threading.Thread(target=in_search, args=(once, 1, started)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert checks.count == 1


def test_a_failed_look_counts_for_nothing() -> None:
    checks = Checks(fail=1)
    once = OncePerSearch(checks)
    token = search_start.set(time.monotonic())
    try:
        with pytest.raises(ConnectionError):
            once()
        once()  # looks again: the first failed
    finally:
        search_start.reset(token)
    assert checks.count == 2
