"""Budgets: a model call reserves the most it can use before it is made and settles after,
so 20 concurrent runs against a budget of 5 calls' worth of tokens never spend past it, in
one process and across two replicas counting in Redis."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest

from shelfhand import Agent, UserContext
from shelfhand.agent.budget import estimate_tokens
from shelfhand.core import metering
from shelfhand.core.auth import load_key_budgets
from shelfhand.core.errors import BudgetExceededError, ConfigurationError, ModelProviderError
from shelfhand.core.events import TextDelta
from shelfhand.core.messages import Message
from shelfhand.core.metering import metered, unmetered
from shelfhand.core.results import Usage
from shelfhand.core.settings import read_toml
from shelfhand.models.base import ModelResponse
from shelfhand.testing import FunctionModel
from shelfhand.usage.budgets import (
    BudgetBook,
    BudgetLimits,
    BudgetPolicy,
    LocalBudgetBook,
    TurnMeter,
    period_key,
)

pytestmark = pytest.mark.anyio

WINDOW = 256  # every call reserves the context window
ALICE = UserContext(tenant_id="acme", user_id="alice")
POLICY = BudgetPolicy(tenant=BudgetLimits(tokens_per_day=5 * WINDOW))


def full_window_model(entered: list[int], release: threading.Event, wait_for: int) -> Any:
    """Each call uses the whole window; the first ``wait_for`` calls wait for each other,
    so they are all in flight at once."""

    async def answer(messages: list[Message], tools: Sequence[Any]) -> ModelResponse:
        entered.append(1)
        if len(entered) >= wait_for:
            release.set()
        await anyio.to_thread.run_sync(release.wait, 10)
        return ModelResponse(
            message=Message.assistant("好的。"),
            usage=Usage(input_tokens=WINDOW - 56, output_tokens=56),
        )

    return FunctionModel(answer)


async def run_concurrently(books: list[BudgetBook], runs: int = 20) -> tuple[int, int, int]:
    entered: list[int] = []
    release = threading.Event()
    model = full_window_model(entered, release, wait_for=5)
    agent = Agent(name="a", model=model, context_tokens=WINDOW)
    done: list[str] = []
    refused: list[BudgetExceededError] = []

    async def one(i: int) -> None:
        meter = TurnMeter(books[i % len(books)], POLICY, ALICE)
        token = metered(meter)
        try:
            await agent.run("你好", context=ALICE)
            done.append("ok")
        except BudgetExceededError as exc:
            refused.append(exc)
        finally:
            unmetered(token)
            meter.close()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            for i in range(runs):
                tg.start_soon(one, i)
    assert all(e.budget == "tokens_per_day" and e.limit == 5 * WINDOW for e in refused)
    return len(done), len(refused), len(entered)


async def test_twenty_concurrent_runs_never_spend_past_a_five_call_budget() -> None:
    book = LocalBudgetBook()
    done, refused, entered = await run_concurrently([book])
    assert (done, refused, entered) == (5, 15, 5)
    key = f"tenant:acme:tokens_per_day:{period_key('day', time.time())[0]}"
    assert book.used(key) == 5 * WINDOW


async def test_two_replicas_counting_in_redis_never_spend_past_it_together(
    redis_url: str,
) -> None:
    import redis

    from shelfhand.usage.redis_budgets import RedisBudgetBook

    clients = [redis.Redis.from_url(redis_url), redis.Redis.from_url(redis_url)]
    try:
        done, refused, entered = await run_concurrently([RedisBudgetBook(c) for c in clients])
    finally:
        for c in clients:
            c.close()
    assert (done, refused, entered) == (5, 15, 5)


async def test_a_call_that_uses_less_gives_the_rest_back() -> None:
    book = LocalBudgetBook()
    meter = TurnMeter(book, POLICY, ALICE)
    held = meter.reserve(WINDOW)
    meter.settle(held, Usage(input_tokens=10, output_tokens=5))
    key = f"tenant:acme:tokens_per_day:{period_key('day', time.time())[0]}"
    assert book.used(key) == 15
    unsettled = meter.reserve(WINDOW)
    assert unsettled
    meter.close()  # a call that failed: its reservation is released
    assert book.used(key) == 15


def test_turns_per_minute_refuses_the_next_turn_with_its_reset_time() -> None:
    policy = BudgetPolicy(user=BudgetLimits(turns_per_minute=2))
    book = LocalBudgetBook()
    now = 1_800_000_030.0  # 30 s into a minute
    for _ in range(2):
        TurnMeter(book, policy, ALICE).start_turn(now)
    with pytest.raises(BudgetExceededError) as refused:
        TurnMeter(book, policy, ALICE).start_turn(now)
    assert refused.value.budget == "turns_per_minute"
    assert refused.value.scope == "user acme/alice"
    assert refused.value.reset_at == 1_800_000_060.0
    other = UserContext(tenant_id="acme", user_id="bob")
    TurnMeter(book, policy, other).start_turn(now)  # per user
    TurnMeter(book, policy, ALICE).start_turn(now + 30)  # the next minute


def test_the_budgets_table_is_checked_when_read() -> None:
    policy = BudgetPolicy.from_toml(
        {"tenant": {"tokens_per_day": 1000}, "tenants": {"acme": {"tokens_per_month": 9}}}
    )
    assert policy is not None
    assert policy.scopes(ALICE)[0][1].tokens_per_month == 9
    assert BudgetPolicy.from_toml({}) is None
    with pytest.raises(ConfigurationError, match="unknown budget 'tokens_per_week'"):
        BudgetPolicy.from_toml({"user": {"tokens_per_week": 5}})
    with pytest.raises(ConfigurationError, match="whole number above 0"):
        BudgetPolicy.from_toml({"user": {"tokens_per_day": "lots"}})


def test_an_api_keys_budgets_replace_every_users_for_that_caller(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        "[budgets.user]\nturns_per_minute = 100\n\n"
        '[[api_keys]]\nkey = "k-alice"\ntenant = "acme"\nuser = "alice"\n'
        "budgets = { turns_per_minute = 1 }\n\n"
        '[[api_keys]]\nkey = "k-bob"\ntenant = "acme"\nuser = "bob"\n',
        encoding="utf-8",
    )
    keys = load_key_budgets(tmp_path, env={})
    assert keys == {"acme/alice": {"turns_per_minute": 1}}
    policy = BudgetPolicy.from_toml(read_toml(tmp_path / "shelfhand.toml")["budgets"], keys)
    assert policy is not None
    book = LocalBudgetBook()
    now = 1_800_000_000.0
    TurnMeter(book, policy, ALICE).start_turn(now)
    with pytest.raises(BudgetExceededError, match="turns per minute"):
        TurnMeter(book, policy, ALICE).start_turn(now)
    bob = UserContext(tenant_id="acme", user_id="bob")
    for _ in range(5):  # every user's budget: 100 a minute
        TurnMeter(book, policy, bob).start_turn(now)
    with pytest.raises(ConfigurationError, match="API key acme/alice"):
        BudgetPolicy.from_toml(None, {"acme/alice": {"turns_per_hour": 1}})


def test_a_redis_that_stops_answering_leaves_each_budget_charged_exactly_what_was_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reservation sent into a Redis stopped with SIGSTOP (its call refused with 503) is
    applied when Redis resumes, and a settlement sent then is applied too. Before, the
    reservation stayed charged until the period ended (a month) and the settlement failed the
    turn after the model had answered; now the replica that sent them undoes the one and
    sends the other again (applied once) as soon as Redis answers."""
    import signal

    from shelfhand.backends import redis as redis_backend
    from shelfhand.backends.redis import open_redis
    from shelfhand.core.errors import DependencyUnavailableError
    from shelfhand.dev.services import start_redis
    from shelfhand.usage.redis_budgets import RedisBudgetBook

    monkeypatch.setattr(redis_backend, "REDO_EVERY", 0.2)
    policy = BudgetPolicy(tenant=BudgetLimits(tokens_per_month=100_000))
    key = f"tenant:acme:tokens_per_month:{period_key('month', time.time())[0]}"
    bob = UserContext(tenant_id="globex", user_id="bob")
    server = start_redis(tmp_path / "redis")  # its own: stopped below
    try:
        assert server.process is not None
        book = RedisBudgetBook(open_redis(server.url, timeout=0.5))
        other = RedisBudgetBook(open_redis(server.url, timeout=0.5))  # (its own connection)
        replica = RedisBudgetBook(open_redis(server.url, timeout=0.5))
        # a turn settled before: Redis knows the scripts (else a first run while stopped is
        # answered "no such script" when Redis resumes, never applied)
        earlier = TurnMeter(book, policy, ALICE)
        earlier.settle(earlier.reserve(8192), Usage(input_tokens=20, output_tokens=10))
        answered = TurnMeter(book, policy, ALICE)
        held = answered.reserve(8192)
        assert other.used(key) == replica.used(key) == 30 + 8192
        server.process.send_signal(signal.SIGSTOP)
        try:
            # the model call of a turn answered: settling it does not fail the turn (it is
            # sent on an open connection, so Redis applies it when it resumes, and it is sent
            # again: applied once)
            answered.settle(held, Usage(input_tokens=100, output_tokens=20))
            with pytest.raises(DependencyUnavailableError, match="budgets"):
                # another tenant's turn, at the same time: applied when Redis resumes
                TurnMeter(other, policy, bob).reserve(8192)
        finally:
            server.process.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 10
        while replica.used(key) != 30 + 120:
            assert time.monotonic() < deadline, f"charged {replica.used(key)}, used 150"
            time.sleep(0.05)
        time.sleep(1.0)  # and it stays so: nothing applied twice
        assert replica.used(key) == 30 + 120
        assert replica.used(key.replace("acme", "globex")) == 0  # its call was refused
        answered.close()
    finally:
        if server.process is not None:
            server.process.send_signal(signal.SIGCONT)
        server.stop()


async def test_a_stream_the_caller_leaves_after_its_text_is_charged_the_request_and_the_text() -> (
    None
):
    """Text that reached the caller was written by the provider, which bills it: a stream
    closed after some of it charges the request's estimate and what was streamed, and a call
    not streamed whose caller went away the request's (before: nothing). A call that failed
    with an error before any text stays released, as before."""
    long_answer = "这是一个很长的回答。" * 40

    async def answer(messages: list[Message], tools: Sequence[Any]) -> ModelResponse:
        return ModelResponse(
            message=Message.assistant(long_answer),
            usage=Usage(input_tokens=300, output_tokens=400),
        )

    policy = BudgetPolicy(tenant=BudgetLimits(tokens_per_day=10**6, model_calls_per_day=100))
    book = LocalBudgetBook()
    key = f"tenant:acme:tokens_per_day:{period_key('day', time.time())[0]}"
    calls = key.replace("tokens_per_day", "model_calls_per_day")
    agent = Agent(name="a", model=FunctionModel(answer), context_tokens=WINDOW * 16)

    async def streamed(read: int | None, by: Agent = agent) -> str:
        meter = TurnMeter(book, policy, ALICE)
        token = metered(meter)
        text = ""
        try:
            async with aclosing(by.stream("你好", context=ALICE)) as events:
                async for event in events:
                    if isinstance(event, TextDelta):
                        text += event.text
                        if read is not None and len(text) >= read:
                            break  # the caller went away
        finally:
            unmetered(token)
            meter.close()
        return text

    await streamed(None)
    assert book.used(key) == 700  # read to the end: what the provider reported
    seen = await streamed(30)
    charged = book.used(key) - 700
    assert estimate_tokens(seen) < charged < WINDOW * 16, charged
    assert charged < 700  # the request and the 30-odd characters, not the whole answer

    failing = Agent(name="f", model=FunctionModel(lambda m, t: fail_model()), context_tokens=WINDOW)
    before = book.used(key)
    with pytest.raises(ModelProviderError):
        await streamed(None, failing)  # (the model's error, before any text)
    assert book.used(key) == before and book.used(calls) == 3

    async def hang(messages: list[Message], tools: Sequence[Any]) -> str:
        await anyio.sleep(30)
        return "late"

    meter = TurnMeter(book, policy, ALICE)
    token = metered(meter)
    try:
        with anyio.move_on_after(0.2):  # a caller of a turn not streamed goes away
            await Agent(name="h", model=FunctionModel(hang), context_tokens=WINDOW).run(
                "你好", context=ALICE
            )
    finally:
        unmetered(token)
        meter.close()
    assert 0 < book.used(key) - before < WINDOW  # the request (read by the provider), not all


def fail_model() -> str:
    raise ModelProviderError("the provider answered 500", status_code=500)


async def test_a_reservation_written_as_its_turn_is_left_is_given_back_when_written() -> None:
    """A blocking book is written from a worker thread (``shelfhand.core.metering``). A turn
    its caller leaves while that write waits (``budgets.db`` locked by another process) ends
    before the reservation exists; when the write lands, it is given back at once. Before, it
    stayed counted until its lease ended (15 minutes by default)."""
    entered, go, written = threading.Event(), threading.Event(), threading.Event()

    class Waiting(LocalBudgetBook):
        blocking = True

        def take(self, charges: Any, now: float, lease: Any = None) -> Any:
            entered.set()
            go.wait(10)
            try:
                return super().take(charges, now, lease)
            finally:
                written.set()

    book = Waiting()
    meter = TurnMeter(book, POLICY, ALICE)
    key = f"tenant:acme:tokens_per_day:{period_key('day', time.time())[0]}"

    async def reserve() -> None:
        await metering.reserve(meter, WINDOW)
        raise AssertionError("the turn was left before its reservation was written")

    async with anyio.create_task_group() as tg:
        tg.start_soon(reserve)
        await anyio.to_thread.run_sync(entered.wait, 5)
        tg.cancel_scope.cancel()  # the caller went away
    meter.close()  # the turn's end, before the write lands
    go.set()
    assert await anyio.to_thread.run_sync(written.wait, 5)
    await anyio.sleep(0.05)  # (the thread gives it back right after its take)
    assert book.used(key) == 0
    assert book.reserved(key) == (0, None)
