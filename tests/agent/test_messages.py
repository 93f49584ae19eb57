from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from shelfhand.core.messages import (
    Citation,
    Message,
    ToolCallBlock,
    ToolResultBlock,
    messages_from_json,
    messages_to_json,
)


def test_messages_round_trip_through_json_losslessly() -> None:
    c = Citation(
        index=1,
        source="returns.md",
        title="退货政策",
        section="拆封",
        page=2,
        text="拆封后 7 天内可退",
        score=0.5,
    )
    msgs = [
        Message.system("sys"),
        Message.user("拆封后还能退吗？", metadata={"k": [1, 2]}),
        Message.assistant(
            "", tool_calls=[ToolCallBlock(id="c1", name="retrieve", arguments='{"query": "退货"}')]
        ),
        Message.tool(
            [ToolResultBlock(call_id="c1", name="retrieve", content="[1] ...", citations=(c,))]
        ),
        Message.tool(  # a failure, kept with the conversation
            [
                ToolResultBlock(
                    call_id="c2",
                    name="order_status",
                    content="tool order_status failed: timed out after 5 s",
                    is_error=True,
                    failure="failed: timed out after 5 s",
                )
            ]
        ),
        Message.assistant("拆封后 7 天内可退 [1]。", citations=[c]),
    ]
    back = messages_from_json(messages_to_json(msgs))
    assert back == msgs
    assert back[-1].citations == (c,)


@given(st.text(), st.dictionaries(st.text(), st.integers()))
def test_any_text_and_metadata_round_trip(body: str, meta: dict[str, int]) -> None:
    m = Message.user(body, metadata=meta)
    assert Message.from_json(m.to_json()) == m


@given(st.text(), st.booleans(), st.text())
def test_any_tool_result_round_trips(content: str, is_error: bool, failure: str) -> None:
    block = ToolResultBlock(
        call_id="c1", name="order_status", content=content, is_error=is_error, failure=failure
    )
    m = Message.tool([block])
    assert Message.from_json(m.to_json()) == m
