"""What a side call reserves against the caller's budget before it is made: enough for the
request as the loop estimates a request (every digit, CJK character and symbol a token, as
Qwen's and Llama 3's tokenizers split them) and the reply, so that calls made at once cannot
together spend past the budget when each is charged what the provider counted."""

from __future__ import annotations

import asyncio
import time

import pytest

from shelfhand import UserContext
from shelfhand.agent.budget import message_tokens
from shelfhand.agent.side_calls import side_request, side_usage
from shelfhand.core.errors import BudgetExceededError, ModelProviderError
from shelfhand.core.messages import Message
from shelfhand.core.metering import metered, unmetered
from shelfhand.core.pricing import ModelPrice
from shelfhand.core.results import Usage
from shelfhand.core.tracing import SpanList, Tracer
from shelfhand.testing import FunctionModel
from shelfhand.usage.budgets import (
    BudgetLimits,
    BudgetPolicy,
    LocalBudgetBook,
    TurnMeter,
    period_key,
)

pytestmark = pytest.mark.anyio

ORDER = "订单号 " + " ".join(["2024120612345678"] * 20) + " 的物流状态？"


class Recording:
    blocking = False

    def __init__(self) -> None:
        self.reserved: list[int] = []
        self.settled: list[tuple[int, Usage | None]] = []

    def reserve(self, tokens: int) -> int:
        self.reserved.append(tokens)
        return len(self.reserved)

    def settle(self, reserved: int, usage: Usage | None) -> None:
        self.settled.append((reserved, usage))

    def settle_soon(self, reserved: int, usage: Usage | None) -> None:
        self.settle(reserved, usage)

    def refused(self, error: BudgetExceededError, purpose: str) -> None:
        raise AssertionError("nothing is refused here")


class Spent(Recording):
    """A meter whose budget is spent: every call refused, each refusal heard."""

    def __init__(self) -> None:
        super().__init__()
        self.refusals: list[tuple[str, str]] = []

    def reserve(self, tokens: int) -> int:
        raise BudgetExceededError(
            "model_calls_per_day of user t1/alice: 4 of 4 used",
            budget="model_calls_per_day",
            scope="user t1/alice",
            limit=4,
            used=4,
            reset_at=1.0,
        )

    def refused(self, error: BudgetExceededError, purpose: str) -> None:
        self.refusals.append((error.budget, purpose))


async def charged_in_a_book(
    model: FunctionModel, raises: type[BaseException], *, timeout: float | None = None
) -> tuple[int, int]:
    """The tokens and model calls a real ``LocalBudgetBook`` holds for acme today after one
    side call (the :data:`ORDER` question) that raises ``raises``."""
    book = LocalBudgetBook()
    policy = BudgetPolicy(tenant=BudgetLimits(tokens_per_day=10_000, model_calls_per_day=10))
    user = TurnMeter(book, policy, UserContext(tenant_id="acme", user_id="alice"))
    token = metered(user)
    try:
        with pytest.raises(raises):
            await side_request(model, [Message.user(ORDER)], reply_tokens=64, timeout=timeout)
    finally:
        unmetered(token)
    day = period_key("day", time.time())[0]
    return (
        book.used(f"tenant:acme:tokens_per_day:{day}"),
        book.used(f"tenant:acme:model_calls_per_day:{day}"),
    )


async def test_the_reservation_holds_a_request_of_digits_as_a_tokenizer_splits_them() -> None:
    meter = Recording()
    token = metered(meter)
    try:
        await side_request(
            FunctionModel(lambda messages, tools: "物流中"), [Message.user(ORDER)], reply_tokens=32
        )
    finally:
        unmetered(token)
    digits = sum(ch.isdigit() for ch in ORDER)  # 320: one token each for Qwen and Llama 3
    cjk = sum("\u4e00" <= ch <= "\u9fff" for ch in ORDER)
    (reserved,) = meter.reserved
    assert reserved >= digits + cjk + 32
    assert [r for r, _ in meter.settled] == [1]


async def test_a_call_past_its_timeout_is_charged_and_counted_its_request() -> None:
    """The provider read the request and no reply arrived to count: the call is charged its
    request's estimate, as a call of the loop cut off is, and the block's usage (what the
    run's usage and the usage ledger take) counts the same. Before, it kept its whole
    reservation (the request and the longest reply) while the ledger booked nothing."""

    async def slow(messages: list[Message], tools: object) -> str:
        await asyncio.sleep(30)
        return "late"

    meter = Recording()
    token = metered(meter)
    try:
        with side_usage() as used, pytest.raises(TimeoutError):
            await side_request(
                FunctionModel(slow), [Message.user(ORDER)], reply_tokens=64, timeout=0.1
            )
    finally:
        unmetered(token)
    ((reserved, charged),) = meter.settled
    assert reserved == 1 and charged is not None
    asked = message_tokens(Message.user(ORDER))
    assert (charged.input_tokens, charged.output_tokens) == (asked, 0)
    total = used.total
    assert (total.input_tokens, total.output_tokens, total.model_calls) == (asked, 0, 1)
    assert total.cost is None  # no price: unknown

    price = ModelPrice(input=2.0, output=8.0)  # with a price, its cost is known
    with side_usage() as priced, pytest.raises(TimeoutError):
        await side_request(
            FunctionModel(slow), [Message.user(ORDER)], reply_tokens=64, timeout=0.1, price=price
        )
    assert priced.total.cost == pytest.approx(asked * 2.0 / 1e6)

    tokens, _ = await charged_in_a_book(FunctionModel(slow), TimeoutError, timeout=0.1)
    assert tokens == asked


async def test_a_call_that_failed_with_an_error_is_charged_no_tokens() -> None:
    """An error answer (or a server out of reach) wrote no reply: its reservation is given
    back, as a failing call of the loop's is (the call still counts in ``model_calls``). Before,
    it was kept as spent: a reranker whose model was down charged each search its request and
    the longest reply."""

    def down(messages: list[Message], tools: object) -> str:
        raise ModelProviderError("connection refused", status_code=None)

    meter = Recording()
    token = metered(meter)
    try:
        with pytest.raises(ModelProviderError):
            await side_request(FunctionModel(down), [Message.user("你好")], reply_tokens=8)
    finally:
        unmetered(token)
    ((reserved, usage),) = meter.settled
    assert reserved == 1
    assert usage is not None and usage.input_tokens + usage.output_tokens == 0

    assert await charged_in_a_book(FunctionModel(down), ModelProviderError) == (0, 1)


async def test_the_reservation_holds_the_models_longest_reply() -> None:
    model = FunctionModel(lambda messages, tools: "物流中")
    model.max_tokens = 512  # type: ignore[attr-defined]
    meter = Recording()
    token = metered(meter)
    try:
        await side_request(model, [Message.user("你好")], reply_tokens=32)
    finally:
        unmetered(token)
    (reserved,) = meter.reserved
    assert 512 < reserved < 512 + 32


async def test_a_refused_call_is_not_made_and_its_refusal_is_heard_and_traced() -> None:
    """A side call the budget refuses is not a silent fallback: the meter hears of it (the
    service audits it) and the span it was to be made in has a ``budget.exceeded`` event."""
    asked: list[object] = []
    model = FunctionModel(lambda messages, tools: asked.append(messages) or "[1]")
    meter = Spent()
    spans = SpanList()
    token = metered(meter)
    try:
        with Tracer([spans]).root("turn", trace_id="t" * 32), pytest.raises(BudgetExceededError):
            await side_request(model, [Message.user("退货")], reply_tokens=8, purpose="rerank")
    finally:
        unmetered(token)
    assert asked == []
    assert meter.refusals == [("model_calls_per_day", "rerank")]
    ((turn, event),) = [(s, e) for s in spans.spans for e in s.events]
    assert turn.name == "turn" and event.name == "budget.exceeded"
    assert event.attributes["shelfhand.side_call"] == "rerank"
    assert event.attributes["budget"] == "model_calls_per_day"
    assert [s.kind for s in spans.spans] == ["turn"]  # no chat span for a call not made
