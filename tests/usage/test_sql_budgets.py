"""Budget counters in SQL: the workspace's ``budgets.db`` and PostgreSQL hold the line as the
in-process book does, across two books (two processes on one workspace, two replicas on one
PostgreSQL), and a restart forgets nothing. Before, the embedded service counted in memory
(a restart gave every caller the day's budget again) and a PostgreSQL deployment without
Redis counted per replica."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_budgets import ALICE, POLICY, WINDOW, run_concurrently

from shelfhand.core.errors import BudgetExceededError, DependencyUnavailableError
from shelfhand.core.results import Usage
from shelfhand.usage.budgets import BudgetLimits, BudgetPolicy, Charge, TurnMeter, period_key
from shelfhand.usage.sql_budgets import SqliteBudgetBook

DAY_KEY = f"tenant:acme:tokens_per_day:{period_key('day', time.time())[0]}"


@pytest.fixture
def pg_pools(pg_url: str) -> Iterator[list[Any]]:
    """Two pools on one new database: two replicas."""
    from shelfhand.backends.postgres import open_pool

    pools = [open_pool(pg_url), open_pool(pg_url)]
    yield pools
    for pool in pools:
        pool.close()


def pg_books(pools: list[Any], url: str) -> list[Any]:
    from shelfhand.usage.pg import PgBudgetBook

    return [PgBudgetBook(pool, url=url) for pool in pools]


@pytest.mark.anyio
async def test_twenty_runs_on_two_books_of_one_file_never_spend_past_five_calls(
    tmp_path: Path,
) -> None:
    books = [SqliteBudgetBook(tmp_path / "budgets.db") for _ in range(2)]
    try:
        done, refused, entered = await run_concurrently(books)
        assert (done, refused, entered) == (5, 15, 5)
        assert books[1].used(DAY_KEY) == 5 * WINDOW
    finally:
        for book in books:
            book.close()


@pytest.mark.anyio
async def test_twenty_runs_on_two_replicas_counting_in_postgresql_never_spend_past_it(
    pg_url: str, pg_pools: list[Any]
) -> None:
    books = pg_books(pg_pools, pg_url)
    done, refused, entered = await run_concurrently(books)
    assert (done, refused, entered) == (5, 15, 5)
    assert books[0].used(DAY_KEY) == books[1].used(DAY_KEY) == 5 * WINDOW


def test_a_restart_remembers_what_was_used_and_a_settled_call_gives_the_rest_back(
    tmp_path: Path,
) -> None:
    book = SqliteBudgetBook.for_workspace(tmp_path)
    meter = TurnMeter(book, POLICY, ALICE)
    meter.settle(meter.reserve(WINDOW), Usage(input_tokens=10, output_tokens=5))
    unsettled = meter.reserve(WINDOW)
    assert unsettled and book.used(DAY_KEY) == 15 + WINDOW
    meter.close()  # a call that failed: its reservation is released
    book.close()

    again = SqliteBudgetBook.for_workspace(tmp_path)  # the service started again
    try:
        assert again.used(DAY_KEY) == 15
        for _ in range(4):
            TurnMeter(again, POLICY, ALICE).reserve(WINDOW)
        with pytest.raises(BudgetExceededError) as refused:
            TurnMeter(again, POLICY, ALICE).reserve(WINDOW)
        assert refused.value.used == 15 + 4 * WINDOW
    finally:
        again.close()


def test_an_ended_period_counts_from_zero_and_one_refused_charge_adds_nothing(
    tmp_path: Path,
) -> None:
    policy = BudgetPolicy(user=BudgetLimits(turns_per_minute=2))
    book = SqliteBudgetBook(tmp_path / "budgets.db")
    try:
        now = 1_800_000_030.0  # 30 s into a minute
        for _ in range(2):
            TurnMeter(book, policy, ALICE).start_turn(now)
        with pytest.raises(BudgetExceededError) as refused:
            TurnMeter(book, policy, ALICE).start_turn(now)
        assert refused.value.reset_at == 1_800_000_060.0
        TurnMeter(book, policy, ALICE).start_turn(now + 30)  # the next minute

        # all or nothing: the second charge does not fit, so the first is not added either
        fits = Charge(key="a", amount=5, limit=10, reset_at=now + 60, budget="b", scope="s")
        over = Charge(key="b", amount=5, limit=4, reset_at=now + 60, budget="b", scope="s")
        assert book.take([fits, over], now) == over
        assert counter(book, "a") == 0
        assert book.take([fits], now) is None and book.take([fits], now) is None
        assert book.take([fits], now) == fits  # 10 of 10
        # the next period: the counter is taken from zero again
        assert book.take([replace(fits, reset_at=now + 120)], now + 61) is None
        assert counter(book, "a") == 5
    finally:
        book.close()


def counter(book: SqliteBudgetBook, key: str) -> int:
    with book.database.connection() as conn:
        return int(
            conn.execute("SELECT used FROM budget_counters WHERE key = ?", (key,)).fetchone()[0]
        )


def test_two_processes_on_one_workspace_take_exactly_the_budget(tmp_path: Path) -> None:
    """Two writers at once, each taking one unit at a time until refused: together they take
    the limit, never more (a real second process, not a thread)."""
    script = textwrap.dedent(
        f"""
        import sys
        from shelfhand.usage.budgets import Charge
        from shelfhand.usage.sql_budgets import SqliteBudgetBook
        book = SqliteBudgetBook({str(tmp_path / "budgets.db")!r})
        took = 0
        while True:
            c = Charge(key="k", amount=1, limit=300, reset_at=4e9, budget="b", scope="s")
            if book.take([c], 1e9) is not None:
                break
            took += 1
        print(took)
        """
    )
    SqliteBudgetBook(tmp_path / "budgets.db").close()  # (the schema, before both start)
    procs = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    took = [int(p.communicate(timeout=120)[0]) for p in procs]
    assert sum(took) == 300, took
    book = SqliteBudgetBook(tmp_path / "budgets.db")
    try:
        with book.database.connection() as conn:
            assert conn.execute("SELECT used FROM budget_counters").fetchall() == [(300,)]
    finally:
        book.close()


def test_postgresql_out_of_reach_refuses_the_call_and_settles_once_it_is_back(
    pg_url: str, pg_pools: list[Any], pg_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    (book, _) = pg_books(pg_pools, pg_url)
    meter = TurnMeter(book, POLICY, ALICE)
    held = meter.reserve(WINDOW)
    pg_server.stop()
    try:
        with pytest.raises(DependencyUnavailableError):
            TurnMeter(book, POLICY, ALICE).reserve(WINDOW)  # no unmetered call
        with caplog.at_level(logging.WARNING, logger="shelfhand.usage.sql_budgets"):
            meter.settle(held, Usage(input_tokens=10, output_tokens=5))  # returns
        assert "the reservations stay counted" in caplog.text
    finally:
        pg_server.start()
    assert book.used(DAY_KEY) == WINDOW  # meanwhile an overcount, never an overspend
    # the book's next write sends the settlement first
    TurnMeter(book, POLICY, ALICE).reserve(WINDOW)
    assert book.used(DAY_KEY) == 15 + WINDOW


def test_the_embedded_services_budgets_survive_a_restart(tmp_path: Path) -> None:
    from shelfhand.app import App
    from shelfhand.core.settings import Settings

    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\nmodel_calls_per_day = 2\n", encoding="utf-8"
    )

    def started() -> Any:
        budgets = App(settings=Settings.load(tmp_path, env={})).budgets()
        assert budgets is not None
        return budgets

    first = started()
    assert isinstance(first.book, SqliteBudgetBook)
    TurnMeter(first.book, first.policy, ALICE).reserve(100)
    first.book.close()
    again = started()  # the service started again: one call of the two is left
    TurnMeter(again.book, again.policy, ALICE).reserve(100)
    with pytest.raises(BudgetExceededError):
        TurnMeter(again.book, again.policy, ALICE).reserve(100)
    again.book.close()
