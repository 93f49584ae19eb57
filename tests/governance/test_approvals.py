"""Human confirmation: ``confirm=True`` tools pause the run until approved (docs/design.md T5)."""

from __future__ import annotations

import anyio
import anyio.to_thread
import pytest
from governance_helpers import create_return, created, script

from shelfhand import Agent, ApprovalDecision, Approvals, Toolkit, UserContext
from shelfhand.core.events import (
    ApprovalDecided,
    ApprovalRequired,
    Event,
    Final,
    ToolFinished,
    event_to_dict,
)
from shelfhand.testing import ScriptedModel, text, tool_call

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")


@pytest.fixture(autouse=True)
def _reset() -> None:
    created.clear()


async def test_a_confirm_tool_pauses_the_run_until_approved() -> None:
    approvals = Approvals()
    agent = Agent(model=script(), toolkit=Toolkit([create_return]), approvals=approvals)
    events: list[Event] = []
    with anyio.fail_after(5):
        async for event in agent.stream("我要退货", context=ALICE):
            events.append(event)
            if isinstance(event, ApprovalRequired):
                assert created == []  # paused: nothing ran yet
                assert approvals.pending(ALICE)[0].id == event.approval_id
                approvals.approve(event.approval_id, by="alice")
    asked = next(e for e in events if isinstance(e, ApprovalRequired))
    assert asked.tool == "create_return"
    assert asked.arguments == {
        "order_id": "SO-1001",
        "reason": "屏幕坏点",
        "api_key": "[REDACTED]",
    }
    assert event_to_dict(asked)["arguments"]["api_key"] == "[REDACTED]"
    decided = next(e for e in events if isinstance(e, ApprovalDecided))
    assert decided.approved and decided.approval_id == asked.approval_id
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert finished.content == "退货单 RMA-SO-1001 已创建" and not finished.is_error
    assert created == ["SO-1001"]
    assert isinstance(events[-1], Final) and events[-1].result.output == "好的。"
    assert approvals.pending() == []


async def test_a_rejection_reaches_the_model_and_the_tool_never_runs() -> None:
    approvals = Approvals()
    model = script()
    agent = Agent(model=model, toolkit=Toolkit([create_return]), approvals=approvals)
    with anyio.fail_after(5):
        async for event in agent.stream("我要退货", context=ALICE):
            if isinstance(event, ApprovalRequired):
                approvals.reject(event.approval_id, "订单号不对")
    assert created == []
    seen = model.requests[1][-1].tool_results[0]
    assert seen.is_error
    assert seen.content == (
        "tool create_return was not run: the user rejected the call: 订单号不对. "
        "Do not retry it unless the user asks."
    )


async def test_run_waits_for_a_decision_made_from_another_thread() -> None:
    approvals = Approvals()
    agent = Agent(model=script(), toolkit=Toolkit([create_return]), approvals=approvals)
    outputs: list[str] = []

    async def run() -> None:
        outputs.append((await agent.run("我要退货", context=ALICE)).output)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            while not approvals.pending():
                await anyio.sleep(0)
            assert created == []
            request = approvals.pending()[0]
            assert request.user == ALICE and request.tool == "create_return"
            # an HTTP handler would do this while serving a different request
            await anyio.to_thread.run_sync(approvals.approve, request.id)
    assert outputs == ["好的。"] and created == ["SO-1001"]
    with pytest.raises(KeyError):
        approvals.approve(request.id)  # already decided


async def test_without_an_approver_the_call_is_refused_not_hung() -> None:
    model = script()
    with anyio.fail_after(5):
        result = await Agent(model=model, toolkit=Toolkit([create_return])).run("退货")
    assert created == []
    res = result.messages[2].tool_results[0]
    assert res.is_error and "needs human confirmation and was not run" in res.content
    assert result.output == "好的。"


async def test_a_handler_can_decide_automatically() -> None:
    seen: list[str] = []

    async def only_small_orders(request: object) -> ApprovalDecision:
        seen.append(request.tool)  # type: ignore[attr-defined]
        return ApprovalDecision(approved=False, reason="needs a supervisor")

    agent = Agent(
        model=script(),
        toolkit=Toolkit([create_return]),
        approvals=Approvals(handler=only_small_orders),
    )
    result = await agent.run("退货", context=ALICE)
    assert seen == ["create_return"] and created == []
    assert "needs a supervisor" in result.messages[2].tool_results[0].content

    approve_all = Approvals(handler=lambda request: True)
    result = await Agent(model=script(), toolkit=Toolkit([create_return])).run(
        "退货", context=ALICE, approvals=approve_all
    )
    assert created == ["SO-1001"]


async def test_an_unanswered_approval_times_out_as_a_rejection() -> None:
    approvals = Approvals(timeout=0.05)
    with anyio.fail_after(5):
        result = await Agent(
            model=script(), toolkit=Toolkit([create_return]), approvals=approvals
        ).run("退货", context=ALICE)
    assert created == []
    assert "no decision within 0.05 s" in result.messages[2].tool_results[0].content
    assert approvals.pending() == []


async def test_invalid_arguments_are_reported_without_asking_anyone() -> None:
    approvals = Approvals()
    model = ScriptedModel([tool_call("create_return", {"order_id": "SO-1"}), text("fix")])
    agent = Agent(model=model, toolkit=Toolkit([create_return]), approvals=approvals)
    with anyio.fail_after(5):
        events = [e async for e in agent.stream("退货", context=ALICE)]
    assert not any(isinstance(e, ApprovalRequired) for e in events)
    finished = next(e for e in events if isinstance(e, ToolFinished))
    assert "reason: missing (required)" in finished.content


async def test_a_cancelled_run_leaves_no_pending_approval() -> None:
    approvals = Approvals()
    agent = Agent(model=script(), toolkit=Toolkit([create_return]), approvals=approvals)
    stream = agent.stream("退货", context=ALICE)
    async for event in stream:
        if isinstance(event, ApprovalRequired):
            break
    assert len(approvals.pending()) == 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert approvals.pending() == [] and created == []
