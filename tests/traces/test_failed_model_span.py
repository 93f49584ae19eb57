"""A model call that fails leaves its ``chat`` span saying why: an operator sees "sent no first
token within 0.3s" on the call, not a bare error type, and which endpoint it was
(``gen_ai.provider.name`` ``openai``, ``server.address``, ``server.port``). A provider's own
error text may quote the request, so it is recorded only with the opt-in to contents; its
HTTP status always is."""

from __future__ import annotations

import pytest

from shelfhand import Agent, UserContext
from shelfhand.core.errors import ModelProviderError, ModelTimeoutError
from shelfhand.core.tracing import Tracer
from shelfhand.providers.openai_chat import OpenAIChatModel, span_attributes
from support.chat_server import ChatServer, Reply, completion
from support.spans import ListProcessor

pytestmark = pytest.mark.anyio

ALICE = UserContext(tenant_id="acme", user_id="alice")
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PROMPT_TEXT = "订单 A-1 的收件人是张三"


def model(server: ChatServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        "local", base_url=server.url, timeout=5, first_token_timeout=0.3, max_retries=0
    )


async def run_traced(server: ChatServer, *, record_content: bool = False) -> ListProcessor:
    spans = ListProcessor()
    tracer = Tracer([spans], record_content=record_content)
    agent = Agent(model=model(server))
    with (
        pytest.raises((ModelTimeoutError, ModelProviderError)),
        tracer.root("turn", trace_id=TRACE, tenant_id="acme", user_id="alice"),
    ):
        async for _ in agent.stream(PROMPT_TEXT, context=ALICE, trace_id=TRACE):
            pass
    return spans


async def test_a_model_that_sends_no_first_token_says_so_on_its_span(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(hold=True))
    spans = await run_traced(chat_server)
    (chat,) = spans.named("chat local")
    assert chat.status == "error"
    assert chat.attributes["error.type"] == "ModelTimeoutError"
    assert "no first token within 0.3s" in chat.attributes["shelfhand.chat.failure"]
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["server.address"] == "127.0.0.1"
    assert chat.attributes["server.port"] == int(chat_server.url.split(":")[2].split("/")[0])
    (run,) = [s for s in spans.spans if s.name.startswith("invoke_agent ")]
    assert run.status == "error" and "shelfhand.chat.failure" not in run.attributes
    # cut off at its deadline: the tokens a budget charges it (its request), said estimated
    assert chat.attributes["shelfhand.usage.estimated"] is True
    assert chat.attributes["gen_ai.usage.input_tokens"] > 0
    assert chat.attributes["gen_ai.usage.output_tokens"] == 0


@pytest.mark.parametrize("record_content", [False, True])
async def test_a_provider_error_records_its_status_and_its_words_only_when_opted_in(
    chat_server: ChatServer, record_content: bool
) -> None:
    error = {"error": {"message": f"invalid content: {PROMPT_TEXT}"}}
    chat_server.add(Reply(status=400, body=error))
    spans = await run_traced(chat_server, record_content=record_content)
    (chat,) = spans.named("chat local")
    assert chat.attributes["error.type"] == "ModelProviderError"
    assert chat.attributes["shelfhand.chat.status_code"] == 400
    recorded = chat.attributes.get("shelfhand.chat.failure", "")
    assert (PROMPT_TEXT in recorded) is record_content


async def test_a_model_that_answers_records_its_endpoint_and_no_failure(
    chat_server: ChatServer,
) -> None:
    chat_server.add(Reply(body=completion("你好")))
    spans = ListProcessor()
    agent = Agent(model=model(chat_server))
    with Tracer([spans]).root("turn", trace_id=TRACE):
        await agent.run("你好", context=ALICE, trace_id=TRACE)
    (chat,) = spans.named("chat local")
    assert chat.status == "ok" and chat.attributes["server.address"] == "127.0.0.1"
    assert not any(k.startswith("shelfhand.chat.failure") for k in chat.attributes)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (None, {"server.address": "api.openai.com", "server.port": 443}),
        ("http://127.0.0.1:8092/v1", {"server.address": "127.0.0.1", "server.port": 8092}),
        ("https://me:sk-secret@llm.example.com/v1?k=1", {"server.address": "llm.example.com"}),
        ("http://[::1]:9000/v1", {"server.address": "::1", "server.port": 9000}),
        ("http://host:port/v1", {}),  # not a port: only the provider
    ],
)
def test_the_endpoint_attributes_name_host_and_port_never_credentials(
    url: str | None, expected: dict[str, object]
) -> None:
    attributes = span_attributes(url)
    assert attributes["gen_ai.provider.name"] == "openai"
    assert expected.items() <= attributes.items()
    assert "sk-secret" not in str(attributes) and "k=1" not in str(attributes)
    if not expected:
        assert "server.address" not in attributes


async def test_a_retried_call_shows_its_retry_on_its_span(chat_server: ChatServer) -> None:
    chat_server.add(
        Reply(status=503, body={"error": {"message": "busy"}}), Reply(body=completion("好"))
    )
    spans = ListProcessor()
    agent = Agent(
        model=OpenAIChatModel("local", base_url=chat_server.url, timeout=5, backoff_base=0.01)
    )
    with Tracer([spans]).root("turn", trace_id=TRACE):
        await agent.run("你好", context=ALICE, trace_id=TRACE)
    (chat,) = spans.named("chat local")
    (retry,) = chat.events
    assert retry.name == "model.retry" and chat.status == "ok"
    assert (retry.attributes["attempt"], retry.attributes["reason"]) == (1, "HTTP 503")
