"""Leases: a call's reservation of tokens is held until the call settles, or, if it never does
(its process was killed mid-call), until its lease ends, when the book gives it back. Before,
such a reservation (the model's whole context window) stayed counted until its period ended:
a day, or a month, of budget lost for each call in flight at a crash. The same on every book:
in memory, ``budgets.db``, PostgreSQL and Redis."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_budgets import ALICE, WINDOW

from shelfhand.core.errors import BudgetExceededError
from shelfhand.core.results import Usage
from shelfhand.usage.budgets import (
    BudgetBook,
    BudgetLimits,
    BudgetPolicy,
    LocalBudgetBook,
    TurnMeter,
    period_key,
)
from shelfhand.usage.sql_budgets import SqliteBudgetBook

POLICY = BudgetPolicy(tenant=BudgetLimits(tokens_per_day=2 * WINDOW))
KEY = f"tenant:acme:tokens_per_day:{period_key('day', time.time())[0]}"


@pytest.fixture(params=["memory", "sqlite", "postgresql", "redis"])
def book(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BudgetBook]:
    kind = request.param
    if kind == "memory":
        yield LocalBudgetBook()
        return
    where = {
        "sqlite": lambda: str(tmp_path / "budgets.db"),
        "postgresql": lambda: request.getfixturevalue("pg_url"),
        "redis": lambda: request.getfixturevalue("redis_url"),
    }[kind]()
    with opened_book(kind, where) as opened:
        yield opened


def wait_until(until: float) -> None:
    time.sleep(max(0.0, until - time.time()) + 0.05)


def test_a_lease_past_its_time_is_given_back_and_the_budget_can_be_spent_again(
    book: BudgetBook,
) -> None:
    crashed = TurnMeter(book, POLICY, ALICE, lease=0.5)  # (a process killed mid-call)
    crashed.reserve(WINDOW)
    crashed.reserve(WINDOW)
    ends = time.time() + 0.5
    with pytest.raises(BudgetExceededError):
        TurnMeter(book, POLICY, ALICE).reserve(WINDOW)
    assert book.used(KEY) == 2 * WINDOW
    held, until = book.reserved(KEY)
    assert held == 2 * WINDOW and until == pytest.approx(ends, abs=0.2)
    wait_until(ends)
    assert book.used(KEY) == 0  # read: the leases past their time are not counted
    assert book.reserved(KEY) == (0, None)
    again = TurnMeter(book, POLICY, ALICE)
    again.settle(again.reserve(WINDOW), Usage(input_tokens=30, output_tokens=10))
    again.reserve(WINDOW)
    assert book.used(KEY) == 40 + WINDOW


def test_a_call_that_outlives_its_lease_is_counted_in_full_when_it_settles(
    book: BudgetBook,
) -> None:
    slow = TurnMeter(book, POLICY, ALICE, lease=0.3)
    held = slow.reserve(WINDOW)
    wait_until(time.time() + 0.3)
    other = TurnMeter(book, POLICY, ALICE)
    other_held = other.reserve(WINDOW)  # gives the slow call's lease back first
    assert book.used(KEY) == WINDOW
    slow.settle(held, Usage(input_tokens=90, output_tokens=10))  # what it spent, added
    assert book.used(KEY) == WINDOW + 100
    other.settle(other_held, Usage(input_tokens=5, output_tokens=5))
    assert book.used(KEY) == 110
    slow.close()  # settled already: nothing more to give back
    assert book.used(KEY) == 110


def test_a_settled_call_of_unknown_usage_keeps_its_reservation_after_the_lease_time(
    book: BudgetBook,
) -> None:
    meter = TurnMeter(book, POLICY, ALICE, lease=0.3)
    meter.settle(meter.reserve(WINDOW), None)  # the provider reported no usage
    released = meter.reserve(WINDOW)
    meter.settle(released, Usage(input_tokens=0, output_tokens=0))
    wait_until(time.time() + 0.3)
    assert book.used(KEY) == WINDOW  # counted as reserved, and no lease left to give back
    TurnMeter(book, POLICY, ALICE).reserve(WINDOW)
    with pytest.raises(BudgetExceededError):
        TurnMeter(book, POLICY, ALICE).reserve(WINDOW)


@pytest.mark.parametrize("store", ["sqlite", "postgresql", "redis"])
def test_the_reservations_of_a_process_killed_mid_call_are_given_back(
    store: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """A real second process reserves two calls' tokens (the whole budget), then is killed
    with SIGKILL before it settles: the budget is spent until its leases end, then free."""
    if store == "sqlite":
        where = str(tmp_path / "budgets.db")
        opened = f"SqliteBudgetBook({where!r})"
    elif store == "postgresql":
        where = request.getfixturevalue("pg_url")
        opened = f"PgBudgetBook(open_pool({where!r}), url={where!r})"
    else:
        where = request.getfixturevalue("redis_url")
        opened = f"RedisBudgetBook(redis.Redis.from_url({where!r}))"
    script = textwrap.dedent(
        f"""
        import time
        import redis
        from shelfhand.backends.postgres import open_pool
        from shelfhand.core.context import UserContext
        from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, TurnMeter
        from shelfhand.usage.pg import PgBudgetBook
        from shelfhand.usage.redis_budgets import RedisBudgetBook
        from shelfhand.usage.sql_budgets import SqliteBudgetBook
        book = {opened}
        policy = BudgetPolicy(tenant=BudgetLimits(tokens_per_day={2 * WINDOW}))
        meter = TurnMeter(book, policy, UserContext(tenant_id="acme", user_id="alice"), lease=2)
        meter.reserve({WINDOW})
        meter.reserve({WINDOW})
        print(time.time() + 2, flush=True)
        time.sleep(60)
        """
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        ends = float(child.stdout.readline())
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=30)
    with opened_book(store, where) as book:
        with pytest.raises(BudgetExceededError) as refused:
            TurnMeter(book, POLICY, ALICE).reserve(WINDOW)
        assert refused.value.used == 2 * WINDOW
        wait_until(ends)
        TurnMeter(book, POLICY, ALICE).reserve(WINDOW)
        assert book.used(KEY) == WINDOW


@contextlib.contextmanager
def opened_book(store: str, where: str) -> Iterator[BudgetBook]:
    if store == "sqlite":
        book = SqliteBudgetBook(where)
        yield book
        book.close()
        return
    if store == "redis":
        import redis

        from shelfhand.usage.redis_budgets import RedisBudgetBook

        client = redis.Redis.from_url(where)
        yield RedisBudgetBook(client)
        client.close()
        return
    from shelfhand.backends.postgres import open_pool
    from shelfhand.usage.pg import PgBudgetBook

    pool = open_pool(where)
    yield PgBudgetBook(pool, url=where)
    pool.close()


def test_calls_settling_while_their_leases_are_given_back_count_exactly_what_they_spent(
    book: BudgetBook,
) -> None:
    """Eight threads, each making calls that settle before, at or after their lease's end
    while the others' reservations give late leases back: once every call has settled, the
    counter holds exactly what they spent, neither a reservation given back twice nor a
    settlement lost (and, in PostgreSQL, no deadlock between the two)."""
    policy = BudgetPolicy(tenant=BudgetLimits(tokens_per_day=10**9))
    rng = random.Random(7)
    waits = [[rng.uniform(0, 0.06) for _ in range(12)] for _ in range(8)]
    errors: list[BaseException] = []

    def calls(mine: list[float]) -> None:
        try:
            meter = TurnMeter(book, policy, ALICE, lease=0.03)
            for i, wait in enumerate(mine):
                held = meter.reserve(WINDOW)
                time.sleep(wait)
                meter.settle(held, Usage(input_tokens=i, output_tokens=1))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(w,)) for w in waits]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert book.used(KEY) == 8 * sum(i + 1 for i in range(12))


def test_the_services_lease_is_the_budget_lease_setting(tmp_path: Path) -> None:
    from shelfhand.app import App
    from shelfhand.core.settings import Settings

    (tmp_path / "shelfhand.toml").write_text(
        f"[budgets.tenant]\ntokens_per_day = {2 * WINDOW}\n", encoding="utf-8"
    )
    budgets = App(settings=Settings.load(tmp_path, env={"SHELFHAND_BUDGET_LEASE": "1"})).budgets()
    assert budgets is not None
    try:
        crashed = budgets.meter(ALICE, "trace-1")
        crashed.reserve(WINDOW)
        crashed.reserve(WINDOW)
        ends = time.time() + 1
        with pytest.raises(BudgetExceededError):
            budgets.meter(ALICE, "trace-2").reserve(WINDOW)
        wait_until(ends)
        budgets.meter(ALICE, "trace-3").reserve(WINDOW)
    finally:
        budgets.book.close()


def test_shelfhand_usage_says_what_calls_in_flight_hold_and_when_it_is_given_back(
    tmp_path: Path,
) -> None:
    """After a crash, the budget a killed call still holds is told apart from what was spent:
    ``shelfhand usage`` and its JSON (as ``GET /v1/usage``) say how much, and until when."""
    (tmp_path / "shelfhand.toml").write_text(
        f"[budgets.tenant]\ntokens_per_day = {2 * WINDOW}\n", encoding="utf-8"
    )
    with opened_book("sqlite", str(tmp_path / "budgets.db")) as book:
        spent = TurnMeter(book, POLICY, ALICE)
        spent.settle(spent.reserve(WINDOW), Usage(input_tokens=90, output_tokens=10))
        TurnMeter(book, POLICY, ALICE).reserve(WINDOW)  # a call whose process is gone
    env = {**os.environ, "SHELFHAND_WORKSPACE": str(tmp_path)}
    run = [sys.executable, "-m", "shelfhand.cli", "usage", "--tenant", "acme"]
    out = subprocess.run([*run, "--json"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    (tenant,) = json.loads(out.stdout)["budgets"]
    assert (tenant["used"], tenant["reserved"]) == (100 + WINDOW, WINDOW)
    assert time.time() + 800 < tenant["reserved_until"] < time.time() + 901
    table = subprocess.run(run, capture_output=True, text=True, env=env, timeout=120).stdout
    assert f"tenant acme tokens_per_day: {WINDOW} of it reserved by model calls in flight" in table


@pytest.mark.anyio
async def test_a_settlement_cancelled_as_it_is_written_still_counts_and_the_turns_end_does_not_release_it(
    tmp_path: Path,
) -> None:
    """A turn's caller leaves just as its model call answered: the settlement is being
    written from a worker thread (the book waits on its file), the turn is cancelled, and its
    end releases the reservations it still holds. The answered call counts what it used, not
    zero (the settlement ended the reservation before its write began)."""
    import asyncio

    from shelfhand.core import metering

    with opened_book("sqlite", str(tmp_path / "budgets.db")) as book:
        meter = TurnMeter(book, POLICY, ALICE)
        held = await metering.reserve(meter, WINDOW)
        writing = asyncio.ensure_future(
            metering.settle(meter, held, Usage(input_tokens=70, output_tokens=30))
        )
        await asyncio.sleep(0)  # the write has begun
        writing.cancel()
        meter.close()  # the turn's end
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        deadline = time.monotonic() + 5
        while book.used(KEY) != 100 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        assert book.used(KEY) == 100
        assert book.reserved(KEY) == (0, None)
