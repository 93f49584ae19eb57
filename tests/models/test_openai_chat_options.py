"""OpenAIChatModel options and deadlines, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from shelfhand.core.errors import ConfigurationError, ModelTimeoutError
from shelfhand.core.messages import Message
from shelfhand.core.settings import Settings
from shelfhand.models import StreamDone, StreamText
from shelfhand.providers.openai_chat import OpenAIChatModel
from support.chat_server import HOLD, ChatServer, Reply, chunk, completion

pytestmark = pytest.mark.anyio

QUERY_STOCK = {
    "type": "function",
    "function": {
        "name": "query_stock",
        "description": "How many units of a product are in stock.",
        "parameters": {
            "type": "object",
            "properties": {"sku": {"type": "string"}},
            "required": ["sku"],
        },
    },
}


async def drain(model: OpenAIChatModel, messages: list[Message]) -> list[object]:
    return [item async for item in model.stream(messages)]


@pytest.fixture
async def hasty(chat_server: ChatServer) -> AsyncIterator[OpenAIChatModel]:
    """A model with a short first-token deadline and a longer total deadline."""
    model = OpenAIChatModel(
        "m",
        base_url=chat_server.url,
        timeout=5.0,
        first_token_timeout=0.3,
        max_retries=3,
        backoff_base=0.001,
    )
    yield model
    await model.aclose()


# --- request options -----------------------------------------------------------------------------


async def test_max_tokens_temperature_and_tool_choice_are_sent(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion("ok")))
    model = OpenAIChatModel(
        "m",
        base_url=chat_server.url,
        max_tokens=256,
        temperature=0.0,
        tool_choice="required",
    )
    try:
        await model.request([Message.user("SKU2024-011 有货吗？")], tools=[QUERY_STOCK])
    finally:
        await model.aclose()

    body = chat_server.requests[0].body
    assert body["max_tokens"] == 256
    assert body["temperature"] == 0.0
    assert body["tool_choice"] == "required"
    assert body["tools"][0]["function"]["name"] == "query_stock"


async def test_defaults_send_no_optional_fields(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion("ok")))
    model = OpenAIChatModel("m", base_url=chat_server.url)
    try:
        await model.request([Message.user("hi")], tools=[QUERY_STOCK])
    finally:
        await model.aclose()

    body = chat_server.requests[0].body
    assert not {"max_tokens", "temperature", "tool_choice", "response_format"} & set(body)
    assert model.context_tokens == 8192
    assert model.max_tokens is None


async def test_tool_choice_none_offers_no_tools(chat_server: ChatServer) -> None:
    chat_server.add(Reply(body=completion('{"name": "query_stock", "arguments": {}}')))
    model = OpenAIChatModel("m", base_url=chat_server.url, tool_choice="none")
    try:
        response = await model.request([Message.user("hi")], tools=[QUERY_STOCK])
    finally:
        await model.aclose()

    assert "tools" not in chat_server.requests[0].body
    assert response.message.tool_calls == ()  # nothing offered, nothing recovered


def test_model_options_come_from_the_environment() -> None:
    model = OpenAIChatModel.from_env(
        {
            "SHELFHAND_MODEL": "qwen",
            "SHELFHAND_MAX_TOKENS": "512",
            "SHELFHAND_TEMPERATURE": "0.1",
            "SHELFHAND_CONTEXT_TOKENS": "4096",
            "SHELFHAND_TOOL_CHOICE": "required",
            "SHELFHAND_TOOL_MODE": "constrained",
            "SHELFHAND_MODEL_TIMEOUT": "90",
            "SHELFHAND_FIRST_TOKEN_TIMEOUT": "20",
        }
    )

    assert (model.max_tokens, model.temperature, model.context_tokens) == (512, 0.1, 4096)
    assert (model.tool_choice, model.tool_mode) == ("required", "constrained")
    assert (model.timeout, model.first_token_timeout) == (90.0, 20.0)


def test_model_options_come_from_shelfhand_toml(tmp_path: object) -> None:
    from pathlib import Path

    ws = Path(str(tmp_path))
    (ws / "shelfhand.toml").write_text(
        '[shelfhand]\nmodel = "qwen"\nmax_tokens = 300\ntemperature = 0.3\n'
        'context_tokens = 2048\ntool_mode = "plain"\nfirst_token_timeout = 45\n',
        encoding="utf-8",
    )
    settings = Settings.load(ws, env={"SHELFHAND_TEMPERATURE": "0.7"})  # env wins
    model = OpenAIChatModel.from_env(settings)

    assert (model.max_tokens, model.temperature, model.context_tokens) == (300, 0.7, 2048)
    assert (model.tool_mode, model.first_token_timeout, model.timeout) == ("plain", 45.0, 60.0)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("SHELFHAND_MAX_TOKENS", "lots", "max_tokens .* whole number"),
        ("SHELFHAND_MAX_TOKENS", "0", "max_tokens .* between"),
        ("SHELFHAND_TEMPERATURE", "3", "temperature .* between 0 and 2"),
        ("SHELFHAND_TEMPERATURE", "nan", "temperature .* between"),
        ("SHELFHAND_CONTEXT_TOKENS", "8k", "context_tokens .* whole number"),
        ("SHELFHAND_TOOL_CHOICE", "always", "tool_choice .* auto, required, none"),
        ("SHELFHAND_TOOL_MODE", "json", "tool_mode .* native, plain, constrained"),
        ("SHELFHAND_MODEL_TIMEOUT", "-1", "model_timeout .* between"),
        ("SHELFHAND_FIRST_TOKEN_TIMEOUT", "soon", "first_token_timeout .* number"),
    ],
)
def test_invalid_model_options_fail_fast_naming_the_setting(
    tmp_path: object, key: str, value: str, message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.load(str(tmp_path), env={key: value})
    with pytest.raises(ConfigurationError, match=message):
        OpenAIChatModel.from_env({"SHELFHAND_MODEL": "m", key: value})


# --- deadlines -----------------------------------------------------------------------------------


async def test_a_server_that_never_answers_misses_the_first_token_deadline(
    chat_server: ChatServer, hasty: OpenAIChatModel
) -> None:
    chat_server.add(Reply(hold=True), Reply(hold=True), Reply(hold=True))

    with anyio.fail_after(10), pytest.raises(ModelTimeoutError, match="no first token within"):
        await drain(hasty, [Message.user("hi")])

    # a timeout is retried once, not max_retries times; each held request was closed
    assert len(chat_server.requests) == 2
    with anyio.fail_after(5):
        while chat_server.disconnects < 2:
            await anyio.sleep(0.02)


async def test_without_a_first_token_deadline_a_silent_stream_ends_at_the_total_one(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(hold=True))
    model = OpenAIChatModel("m", base_url=chat_server.url, timeout=0.3, max_retries=0)
    try:
        with (
            anyio.fail_after(10),
            pytest.raises(ModelTimeoutError, match=r"did not answer within 0\.3s"),
        ):
            await drain(model, [Message.user("hi")])
    finally:
        await model.aclose()


async def test_a_stream_that_sends_headers_but_no_token_misses_the_first_token_deadline(
    chat_server: ChatServer, hasty: OpenAIChatModel
) -> None:
    empty = chunk({"role": "assistant", "content": ""})  # llama.cpp's first chunk: no token
    chat_server.add(Reply(sse=[empty, HOLD], done=False), Reply(sse=[empty, HOLD], done=False))

    with anyio.fail_after(10), pytest.raises(ModelTimeoutError, match="no first token"):
        await drain(hasty, [Message.user("hi")])

    assert len(chat_server.requests) == 2


async def test_a_timed_out_stream_is_retried_once_and_can_then_succeed(
    chat_server: ChatServer, hasty: OpenAIChatModel
) -> None:
    chat_server.add(
        Reply(hold=True), Reply(sse=[chunk({"content": "到货了"}), chunk({}, finish="stop")])
    )

    with anyio.fail_after(10):
        items = await drain(hasty, [Message.user("hi")])

    assert [i.text for i in items if isinstance(i, StreamText)] == ["到货了"]
    assert len(chat_server.requests) == 2


async def test_a_stream_that_stalls_mid_reply_misses_the_total_deadline(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(sse=[chunk({"content": "部分"}), HOLD], done=False))
    model = OpenAIChatModel(
        "m", base_url=chat_server.url, timeout=0.5, first_token_timeout=5.0, backoff_base=0.001
    )
    received: list[str] = []
    try:
        with anyio.fail_after(10), pytest.raises(ModelTimeoutError, match=r"within 0\.5s"):
            async for item in model.stream([Message.user("hi")]):
                if isinstance(item, StreamText):
                    received.append(item.text)
    finally:
        await model.aclose()

    assert received == ["部分"]
    assert len(chat_server.requests) == 1  # text was shown: never retried
    with anyio.fail_after(5):
        while chat_server.disconnects < 1:
            await anyio.sleep(0.02)


async def test_a_stream_that_keeps_sending_tokens_still_ends_at_the_total_deadline(
    chat_server: ChatServer,
) -> None:
    tokens = [chunk({"content": "字"}) for _ in range(20)]
    chat_server.add(Reply(sse=[*tokens, HOLD], done=False))
    model = OpenAIChatModel("m", base_url=chat_server.url, timeout=0.5, first_token_timeout=0.4)
    try:
        with anyio.fail_after(10), pytest.raises(ModelTimeoutError, match="did not answer"):
            items = await drain(model, [Message.user("hi")])
            assert not any(isinstance(i, StreamDone) for i in items)
    finally:
        await model.aclose()


def test_from_env_takes_the_model_as_an_override() -> None:
    env = {"SHELFHAND_MODEL": "main-model", "OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}
    model = OpenAIChatModel.from_env(env, model="other-model")
    assert model.name == "other-model" and model.base_url == "http://127.0.0.1:1/v1"
    assert OpenAIChatModel.from_env(env).name == "main-model"
