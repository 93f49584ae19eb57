"""``POST /v1/responses`` with the official ``openai`` SDK: text in and out, streamed and
not, continued with ``previous_response_id``, and its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from service_helpers import ThreadServer
from test_openai_endpoint import client, retrieve_then_quote, serve, with_documents

from shelfhand.core.messages import Message
from shelfhand.testing import FunctionModel, ScriptedModel, text, tool_call


@pytest.fixture
def server(tmp_path: Path, thread_servers: list[ThreadServer]) -> ThreadServer:
    model = FunctionModel(retrieve_then_quote)
    return with_documents(serve(tmp_path, model, thread_servers), tmp_path)


def test_a_response_answers_with_text_citations_and_usage(server: ThreadServer) -> None:
    response = client(server).responses.create(model="shelfhand", input="投影仪保修多久？")
    assert response.status == "completed"
    assert "12 个月" in response.output_text
    assert response.output_text.endswith("来源：\n[1] 保修政策 (docs-t1/warranty.md)")
    item = response.output[0]
    assert "ALPHA-7" in (item.model_extra or {})["shelfhand"]["citations"][0]["text"]
    assert response.usage is not None and response.usage.output_tokens > 0


def test_a_streamed_response_sends_the_text_events_then_completed(server: ThreadServer) -> None:
    events = list(
        client(server).responses.create(
            model="shelfhand",
            input=[{"role": "user", "content": [{"type": "input_text", "text": "保修多久？"}]}],
            stream=True,
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:3] == [
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response  # type: ignore[union-attr]
    assert streamed == done.output_text and "12 个月" in streamed
    assert [e.sequence_number for e in events] == list(range(1, len(events) + 1))


def test_previous_response_id_continues_the_conversation_for_its_owner_only(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    seen: list[list[str]] = []

    def echo(messages: list[Message], tools: Any) -> str:
        seen.append([m.text for m in messages if m.role == "user"])
        return "好"

    server = serve(tmp_path, FunctionModel(echo), thread_servers)
    first = client(server).responses.create(model="shelfhand", input="第一句")
    client(server).responses.create(
        model="shelfhand", input="第二句", previous_response_id=first.id
    )
    assert seen[-1] == ["第一句", "第二句"]
    with pytest.raises(openai.NotFoundError):  # bob cannot continue alice's conversation
        client(server, "key-bob").responses.create(
            model="shelfhand", input="偷看", previous_response_id=first.id
        )


def test_response_errors_have_the_openai_error_body(server: ThreadServer) -> None:
    with pytest.raises(openai.NotFoundError) as unknown_model:
        client(server).responses.create(model="gpt-4o", input="hi")
    assert unknown_model.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as tools:
        client(server).responses.create(
            model="shelfhand",
            input="hi",
            tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        )
    assert tools.value.code == "tools_not_supported"
    with pytest.raises(openai.AuthenticationError):
        client(server, "wrong").responses.create(model="shelfhand", input="hi")


def test_a_streamed_answer_the_check_replaces_is_followed_by_the_checked_one(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    # the passage says 12 months; the model says 36, citing it
    model = ScriptedModel(
        [tool_call("retrieve", {"query": "投影仪保修"}), text("投影仪保修 36 个月 [1]。")] * 2
    )
    server = with_documents(serve(tmp_path, model, thread_servers), tmp_path)

    events = list(
        client(server).responses.create(model="shelfhand", input="保修多久？", stream=True)
    )
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response  # type: ignore[union-attr]
    assert streamed == done.output_text  # the deltas add up to the text, as clients expect
    shown, _, checked = streamed.partition("上面的回答经与文档核对后已被替换")
    assert "36 个月" in shown and "12 个月" in checked and "36" not in checked

    whole = client(server).responses.create(model="shelfhand", input="保修多久？").output_text
    assert "36" not in whole and "12 个月" in whole and "replaced" not in whole
