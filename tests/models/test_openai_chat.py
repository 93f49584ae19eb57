"""OpenAIChatModel against a real HTTP server on 127.0.0.1 speaking chat completions."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import socket
import threading
import warnings
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
import pytest

from shelfhand.core.errors import ConfigurationError, ModelProviderError, ModelTimeoutError
from shelfhand.core.messages import (
    Citation,
    CitationBlock,
    Message,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
)
from shelfhand.models import ChatModel, StreamDone, StreamText
from shelfhand.providers.openai_chat import OpenAIChatModel
from support.chat_server import HOLD, ChatServer, Reply, chunk, completion

pytestmark = pytest.mark.anyio

LOOKUP_ORDER = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order by id.",
        "parameters": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}},
            "required": ["order_id"],
        },
    },
}


USAGE_CHUNK = {
    "id": "chatcmpl-1",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "qwen2.5-7b-instruct",
    "choices": [],
    "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
}


@pytest.fixture
async def model(chat_server: ChatServer) -> AsyncIterator[OpenAIChatModel]:
    chat_model = OpenAIChatModel(
        "qwen2.5-7b-instruct",
        base_url=chat_server.url,
        api_key="sk-test-secret",
        timeout=5.0,
        max_retries=2,
        backoff_base=0.001,
    )
    yield chat_model
    await chat_model.aclose()


async def collect(chat_model: OpenAIChatModel, messages: list[Message], **kw: Any) -> list[Any]:
    with anyio.fail_after(10):
        return [item async for item in chat_model.stream(messages, **kw)]


# --- plain replies -------------------------------------------------------------------------------


async def test_a_plain_reply_becomes_an_assistant_message(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(Reply(body=completion("投影仪保修两年 [1]。")))

    response = await model.request([Message.user("保修期多久？")])

    assert isinstance(model, ChatModel)
    assert response.message.role == "assistant"
    assert response.message.text == "投影仪保修两年 [1]。"
    assert response.message.tool_calls == ()
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (12, 5)
    assert response.finish_reason == "stop"
    assert response.model_name == "qwen2.5-7b-instruct"
    sent = chat_server.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "qwen2.5-7b-instruct"
    assert sent.body["messages"] == [{"role": "user", "content": "保修期多久？"}]
    assert "tools" not in sent.body
    assert sent.headers["authorization"] == "Bearer sk-test-secret"


async def test_content_given_as_a_list_of_parts_is_read_as_text(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    parts = [{"type": "text", "text": "The warranty "}, {"type": "text", "text": "is two years."}]
    chat_server.add(Reply(body=completion(parts)))

    response = await model.request([Message.user("How long is the warranty?")])

    assert response.message.text == "The warranty is two years."


async def test_native_tool_calls_are_returned_as_tool_call_blocks(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    call = {
        "id": "call_abc",
        "type": "function",
        "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1001"}'},
    }
    chat_server.add(Reply(body=completion(None, tool_calls=[call])))

    response = await model.request([Message.user("Where is A-1001?")], tools=[LOOKUP_ORDER])

    assert response.message.tool_calls == (
        ToolCallBlock(id="call_abc", name="lookup_order", arguments='{"order_id": "A-1001"}'),
    )
    assert response.finish_reason == "tool_calls"
    assert chat_server.requests[0].body["tools"] == [LOOKUP_ORDER]


async def test_a_tool_call_written_as_fenced_json_is_recovered(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    text = (
        '我来查一下。\n```json\n{"name": "lookup_order", "arguments": {"order_id": "A-1001"}}\n```'
    )
    chat_server.add(Reply(body=completion(text)), Reply(body=completion(text)))

    recovered = await model.request([Message.user("订单 A-1001 呢？")], tools=[LOOKUP_ORDER])
    untouched = await model.request([Message.user("订单 A-1001 呢？")])

    assert recovered.message.text == "我来查一下。"
    [call] = recovered.message.tool_calls
    assert call.name == "lookup_order"
    assert call.parsed_arguments() == {"order_id": "A-1001"}
    assert recovered.finish_reason == "tool_calls"
    assert untouched.message.text == text  # no tools offered: nothing to recover
    assert untouched.message.tool_calls == ()


async def test_messages_with_tool_calls_and_results_are_serialised_for_the_wire(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(Reply(body=completion("A-1001 已发货，A-1002 不存在。")))
    citation = Citation(index=1, source="orders.db")
    conversation = [
        Message.system("你是售后助手。"),
        Message.user("查 A-1001 和 A-1002", name="alice"),
        Message.assistant(
            "查询中",
            tool_calls=[
                ToolCallBlock(id="c1", name="lookup_order", arguments='{"order_id": "A-1001"}'),
                ToolCallBlock(id="c2", name="lookup_order", arguments='{"order_id": "A-1002"}'),
            ],
        ),
        Message.tool(
            [
                ToolResultBlock(
                    call_id="c1", name="lookup_order", content="已发货", citations=(citation,)
                ),
                ToolResultBlock(
                    call_id="c2", name="lookup_order", content="not found", is_error=True
                ),
            ]
        ),
        Message(
            role="assistant",
            content=(TextBlock(text="Shipped [1]."), CitationBlock(citations=(citation,))),
        ),
        Message.assistant(tool_calls=[ToolCallBlock(id="c3", name="lookup_order")]),
    ]

    await model.request(conversation, tools=[LOOKUP_ORDER])

    assert chat_server.requests[0].body["messages"] == [
        {"role": "system", "content": "你是售后助手。"},
        {"role": "user", "content": "查 A-1001 和 A-1002", "name": "alice"},
        {
            "role": "assistant",
            "content": "查询中",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1001"}'},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": '{"order_id": "A-1002"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "已发货"},
        {"role": "tool", "tool_call_id": "c2", "content": "not found"},
        {"role": "assistant", "content": "Shipped [1]."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c3",
                    "type": "function",
                    "function": {"name": "lookup_order", "arguments": "{}"},
                }
            ],
        },
    ]


async def test_temperature_and_extra_body_are_sent_when_given(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion("hi")))
    tuned = OpenAIChatModel(
        "qwen3-8b",
        base_url=chat_server.url,
        temperature=0.2,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    try:
        await tuned.request([Message.user("hi")])
    finally:
        await tuned.aclose()

    body = chat_server.requests[0].body
    assert body["temperature"] == 0.2
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_a_reply_without_choices_raises_a_provider_error(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(Reply(body={"error": {"message": "model is loading"}}))

    with pytest.raises(ModelProviderError, match="model is loading"):
        await model.request([Message.user("hi")])


# --- streaming -----------------------------------------------------------------------------------


async def test_a_streamed_reply_yields_each_text_delta_then_the_whole_reply(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    deltas = ["拆封后", " 7 天内", "可退 [1]。"]
    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": d}) for d in deltas]
    events += [chunk({}, finish="stop"), USAGE_CHUNK]
    chat_server.add(Reply(sse=events))

    items = await collect(model, [Message.user("拆封后还能退吗？")])

    assert [i.text for i in items if isinstance(i, StreamText)] == deltas
    assert isinstance(items[-1], StreamDone)
    assert sum(isinstance(i, StreamDone) for i in items) == 1
    done = items[-1].response
    assert done.message.text == "拆封后 7 天内可退 [1]。"
    assert done.finish_reason == "stop"
    assert done.usage is not None and done.usage.input_tokens == 30
    body = chat_server.requests[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_an_error_event_in_a_stream_before_any_text_is_a_provider_error(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    # a server that fails mid-request sends its error as a chunk (vLLM, llama.cpp); the
    # request is the SDK's, read as plain JSON: the SDK's check of each chunk still holds
    events = [chunk({"role": "assistant", "content": ""}), {"error": {"message": "KV cache full"}}]
    chat_server.add(Reply(sse=events))

    with pytest.raises(ModelProviderError, match="KV cache full"):
        async for _ in model.stream([Message.user("hi")]):
            pass
    sent = chat_server.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-test-secret" and sent.body["stream"] is True


async def test_a_streamed_request_answered_with_no_chunk_is_a_provider_error(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    # before: an empty reply, which the agent took for a blank answer from the model
    chat_server.add(Reply(sse=[]))

    with pytest.raises(ModelProviderError, match="no chunk \\(content type 'text/event-stream'"):
        async for _ in model.stream([Message.user("hi")]):
            pass
    assert len(chat_server.requests) == 1  # (not retried)


async def test_a_streamed_request_answered_with_the_whole_completion_is_read_as_one(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    # a server (or proxy) that does not stream sends one JSON body: before, an empty reply
    chat_server.add(Reply(body=completion("拆封后 7 天内可退 [1]。")))

    items = await collect(model, [Message.user("拆封后还能退吗？")])

    assert [i.text for i in items if isinstance(i, StreamText)] == ["拆封后 7 天内可退 [1]。"]
    done = items[-1]
    assert isinstance(done, StreamDone) and done.response.message.text == "拆封后 7 天内可退 [1]。"
    assert chat_server.requests[0].body["stream"] is True


async def test_streamed_tool_call_arguments_split_across_chunks_are_assembled(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    def call_delta(index: int, **function: str) -> dict[str, Any]:
        entry: dict[str, Any] = {"index": index, "function": function}
        if "name" in function:
            entry.update(id=f"call_{index}", type="function")
        return {"tool_calls": [entry]}

    events = [
        chunk({"role": "assistant", "content": None}),
        chunk(call_delta(0, name="lookup_order", arguments="")),
        chunk(call_delta(0, arguments='{"order_')),
        chunk(call_delta(1, name="lookup_order", arguments='{"order_id"')),
        chunk(call_delta(0, arguments='id": "A-')),
        chunk(call_delta(0, arguments='1001"}')),
        chunk(call_delta(1, arguments=': "订单-7"}')),
        chunk({}, finish="tool_calls"),
    ]  # no usage chunk: a server that ignores stream_options
    chat_server.add(Reply(sse=events))

    items = await collect(model, [Message.user("查两个订单")], tools=[LOOKUP_ORDER])

    assert [type(i) for i in items] == [StreamDone]
    done = items[0].response
    assert done.message.tool_calls == (
        ToolCallBlock(id="call_0", name="lookup_order", arguments='{"order_id": "A-1001"}'),
        ToolCallBlock(id="call_1", name="lookup_order", arguments='{"order_id": "订单-7"}'),
    )
    assert done.finish_reason == "tool_calls"
    assert done.usage is None


async def test_a_stream_is_retried_when_it_fails_before_the_first_chunk(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(
        Reply(status=503, body={"error": {"message": "busy"}}),
        Reply(sse=[chunk({"content": "ok"}), chunk({}, finish="stop")]),
    )

    items = await collect(model, [Message.user("hi")])

    assert len(chat_server.requests) == 2
    assert items[-1].response.message.text == "ok"


async def test_a_stream_that_stalls_after_the_first_chunk_is_not_retried(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(sse=[chunk({"content": "部分"}), HOLD], done=False))
    received: list[str] = []
    with_model = OpenAIChatModel(
        "m", base_url=chat_server.url, timeout=0.3, max_retries=3, backoff_base=0.001
    )
    try:
        with pytest.raises(ModelTimeoutError):
            async for item in with_model.stream([Message.user("hi")]):
                if isinstance(item, StreamText):
                    received.append(item.text)
    finally:
        await with_model.aclose()

    assert received == ["部分"]
    assert len(chat_server.requests) == 1


# --- retries and errors ----------------------------------------------------------------------------


async def test_a_429_is_retried_exactly_once_before_a_200(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(
        Reply(status=429, body={"error": {"message": "slow down"}}),
        Reply(body=completion("fine")),
    )

    response = await model.request([Message.user("hi")])

    assert response.message.text == "fine"
    assert len(chat_server.requests) == 2


async def test_retry_after_is_honoured_but_capped(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    chat_server.add(
        Reply(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "120"}),
        Reply(body=completion("fine")),
    )
    capped = OpenAIChatModel("m", base_url=chat_server.url, retry_after_cap=0.05)
    try:
        with caplog.at_level(logging.WARNING, logger="shelfhand.providers.openai_chat"):
            response = await capped.request([Message.user("hi")])
    finally:
        await capped.aclose()

    assert response.message.text == "fine"
    assert "HTTP 429; retry 1 in 0.05s" in caplog.text


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_client_errors_are_never_retried(
    chat_server: ChatServer, model: OpenAIChatModel, status: int
) -> None:
    chat_server.add(Reply(status=status, body={"error": {"message": "bad request: no such field"}}))

    with pytest.raises(ModelProviderError) as caught:
        await model.request([Message.user("hi")])

    assert caught.value.status_code == status
    assert len(chat_server.requests) == 1
    assert "sk-test-secret" not in str(caught.value)


async def test_an_unauthorised_key_says_to_check_openai_api_key(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(Reply(status=401, body={"error": {"message": "invalid key"}}))

    with pytest.raises(ModelProviderError, match="OPENAI_API_KEY"):
        await model.request([Message.user("hi")])


async def test_repeated_server_errors_give_up_after_max_retries(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    chat_server.add(*[Reply(status=500, body={"error": {"message": "boom"}}) for _ in range(5)])

    with pytest.raises(ModelProviderError, match="after 3 attempts") as caught:
        await model.request([Message.user("hi")])

    assert caught.value.status_code == 500
    assert len(chat_server.requests) == 3  # the first attempt and max_retries=2 retries


async def test_a_server_slower_than_the_total_deadline_raises_model_timeout_error(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(hold=True), Reply(hold=True), Reply(hold=True))
    slow = OpenAIChatModel(
        "m", base_url=chat_server.url, timeout=0.3, max_retries=3, backoff_base=0.001
    )
    try:
        with anyio.fail_after(10), pytest.raises(ModelTimeoutError, match="did not answer within"):
            await slow.request([Message.user("hi")])
    finally:
        await slow.aclose()

    # the deadline covers the whole call: no second attempt once it has passed
    assert len(chat_server.requests) == 1


async def test_an_unreachable_server_is_a_provider_error_naming_the_base_url() -> None:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    unreachable = OpenAIChatModel("m", base_url=url, max_retries=1, backoff_base=0.001)
    try:
        with pytest.raises(ModelProviderError, match="OPENAI_BASE_URL") as caught:
            await unreachable.request([Message.user("hi")])
    finally:
        await unreachable.aclose()

    assert caught.value.status_code is None
    assert f"127.0.0.1:{port}" in str(caught.value)


# --- configuration ---------------------------------------------------------------------------------


def test_from_env_needs_shelfhand_model() -> None:
    with pytest.raises(ConfigurationError, match="SHELFHAND_MODEL"):
        OpenAIChatModel.from_env({"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"})


async def test_from_env_reads_model_base_url_and_key(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion("hi")))
    env = {
        "SHELFHAND_MODEL": "deepseek-chat",
        "OPENAI_BASE_URL": chat_server.url,
        "OPENAI_API_KEY": "sk-from-env",
        "SHELFHAND_MODEL_TIMEOUT": "7.5",
    }
    from_env = OpenAIChatModel.from_env(env)
    try:
        await from_env.request([Message.user("hi")])
    finally:
        await from_env.aclose()

    assert from_env.name == "deepseek-chat"
    assert from_env.timeout == 7.5
    assert chat_server.requests[0].body["model"] == "deepseek-chat"
    assert chat_server.requests[0].headers["authorization"] == "Bearer sk-from-env"
    assert "sk-from-env" not in repr(from_env)


async def test_a_local_server_gets_a_placeholder_key_when_none_is_set(
    chat_server: ChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    chat_server.add(Reply(body=completion("hi")))
    local = OpenAIChatModel("llama3", base_url=chat_server.url)
    try:
        await local.request([Message.user("hi")])
    finally:
        await local.aclose()

    assert chat_server.requests[0].headers["authorization"].startswith("Bearer ")


def test_from_env_accepts_a_settings_object() -> None:
    class Settings:
        model = "qwen-plus"
        base_url = "https://dashscope.aliyuncs.com/compatible-mode/v1"
        api_key = "sk-dashscope"
        model_timeout = 12.0

    built = OpenAIChatModel.from_env(Settings())

    assert (built.model, built.base_url, built.timeout) == (
        "qwen-plus",
        "https://dashscope.aliyuncs.com/compatible-mode/v1",
        12.0,
    )


async def test_check_probes_the_models_endpoint_for_readiness(chat_server: ChatServer) -> None:
    model = OpenAIChatModel("m", base_url=chat_server.url)
    await model.check()  # answered by GET /models
    assert chat_server.requests == []  # no chat completion was spent on it
    await model.aclose()


async def test_check_on_an_unreachable_endpoint_raises_a_provider_error() -> None:
    with socket.socket() as probe:  # a port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    model = OpenAIChatModel("m", base_url=url, api_key="sk-secret-value")
    with pytest.raises(ModelProviderError, match="cannot reach") as err:
        await model.check()
    assert "sk-secret-value" not in str(err.value)


async def test_arguments_in_the_history_that_are_not_json_are_sent_as_a_json_string(
    chat_server: ChatServer, model: OpenAIChatModel
) -> None:
    # measured: llama.cpp answers HTTP 500 to a history holding the 0.5B model's own
    # `"arguments": "[1] BrightBeam Projector FAQ …"` (it parses every call's arguments)
    raw = "[1] BrightBeam Projector FAQ › Care"
    history = [
        Message.user("How do I clean the lens?"),
        Message.assistant(
            "",
            tool_calls=[
                ToolCallBlock(id="c1", name="lookup_order", arguments=raw),
                ToolCallBlock(id="c2", name="lookup_order", arguments='{"order_id": "A-1"}'),
                ToolCallBlock(id="c3", name="lookup_order", arguments=""),
            ],
        ),
        Message.tool(
            [
                ToolResultBlock(call_id=c, name="lookup_order", content="x", is_error=True)
                for c in ("c1", "c2", "c3")
            ]
        ),
    ]
    chat_server.add(Reply(body=completion("Wipe it gently.")))

    await model.request(history, tools=[LOOKUP_ORDER])

    sent = chat_server.requests[0].body["messages"][1]["tool_calls"]
    arguments = [c["function"]["arguments"] for c in sent]
    assert [json.loads(a) for a in arguments] == [raw, {"order_id": "A-1"}, {}]


class _KeepAlive(BaseHTTPRequestHandler):
    """Chat completions over HTTP/1.1 with keep-alive, as llama.cpp's server answers: the
    client pools the connection (the test server of the other tests closes each one)."""

    protocol_version = "HTTP/1.1"
    answers = itertools.cycle(["Hi.", "Bye."])

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        data = json.dumps(completion(next(self.answers))).encode("utf-8")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_one_model_answers_in_two_event_loops_one_after_the_other() -> None:
    # a script's two Agent.run_sync calls are two asyncio.run loops: the SDK client's pooled
    # connection belongs to the first ("Event loop is closed" on the second, before)
    from shelfhand import Agent

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _KeepAlive)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
        agent = Agent(model=OpenAIChatModel("qwen2.5-7b-instruct", base_url=url, api_key="sk-x"))

        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always", ResourceWarning)
            assert agent.run_sync("Say hi").output == "Hi."
            assert agent.run_sync("Say bye").output == "Bye."
            gc.collect()
        # each run_sync closed its loop's connections (no socket left to the collector)
        assert [w for w in warned if issubclass(w.category, ResourceWarning)] == []

        # the model used from two loops with nothing closing it (a script's own asyncio.run
        # twice): each loop gets a client; the dropped ones, collected while a third loop
        # runs, close nothing on it (the SDK's own client would schedule its closing there,
        # and fail)
        model = OpenAIChatModel("qwen2.5-7b-instruct", base_url=url, api_key="sk-x")
        hello = [Message.user("Say hi")]
        assert asyncio.run(model.request(hello)).message.text == "Hi."
        assert asyncio.run(model.request(hello)).message.text == "Bye."
        errors: list[dict[str, Any]] = []

        async def collect() -> None:
            nonlocal model
            asyncio.get_running_loop().set_exception_handler(lambda _loop, c: errors.append(c))
            del model
            gc.collect()
            for _ in range(5):
                await asyncio.sleep(0.01)
            gc.collect()

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)  # sockets closed when collected
            asyncio.run(collect())
        assert errors == []
    finally:
        httpd.shutdown()
        httpd.server_close()
