"""Replies longer than any reply can be (a body that never ends, a compressed bomb, a declared
length of a gigabyte) are cut at the client's bound: the model, embeddings and remote-agent
clients never read them whole, and say so."""

from __future__ import annotations

import gzip
import tracemalloc
from collections.abc import AsyncIterator

import anyio
import httpx
import httpx2
import pytest

from shelfhand.backends.bounded_http import BoundedAsyncSend, BoundedSend, ReplyTooLarge
from shelfhand.core.errors import ModelProviderError, ToolError
from shelfhand.core.messages import Message
from shelfhand.models import StreamText
from shelfhand.providers.a2a_client import RemoteA2AAgent
from shelfhand.providers.openai_chat import OpenAIChatModel
from support.misbehaving_chat_server import FakeModelServer

pytestmark = pytest.mark.anyio

MIB = 1024**2


def bounded_model(model_server: FakeModelServer) -> OpenAIChatModel:
    return OpenAIChatModel(
        "fake",
        base_url=model_server.url,
        api_key="k",
        timeout=30.0,
        max_retries=2,
        backoff_base=0.001,
        max_reply_bytes=MIB,
    )


async def test_a_json_reply_that_never_ends_is_cut_at_the_bound_and_not_retried(
    model_server: FakeModelServer,
) -> None:
    model_server.modes.append("endless_json")
    model = bounded_model(model_server)
    with anyio.fail_after(20), pytest.raises(ModelProviderError, match="longer than 1 MiB"):
        await model.request([Message.user("hi")])
    assert model_server.requests == 1  # a reply over the bound would be as long again


async def test_a_stream_that_never_ends_is_cut_at_the_bound_after_what_it_streamed(
    model_server: FakeModelServer,
) -> None:
    model_server.modes.append("endless_stream")
    model = bounded_model(model_server)
    pieces: list[str] = []
    with anyio.fail_after(20), pytest.raises(ModelProviderError, match="longer than 1 MiB"):
        async for chunk in model.stream([Message.user("hi")]):
            if isinstance(chunk, StreamText):
                pieces.append(chunk.text)
    assert pieces and pieces[0] == "and again "
    assert model_server.requests == 1


async def test_a_compressed_bomb_is_refused_without_being_inflated(
    model_server: FakeModelServer,
) -> None:
    # a few KiB of gzip holding a completion of 64 MiB: read whole, it would take 64 MiB
    # for the body and as much again for its text
    model_server.modes.append("bomb")
    model = bounded_model(model_server)
    tracemalloc.start()
    try:
        with anyio.fail_after(20), pytest.raises(ModelProviderError, match="longer than 1 MiB"):
            await model.request([Message.user("hi")])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * MIB


async def test_a_declared_length_over_the_bound_is_refused_before_a_byte_is_read(
    model_server: FakeModelServer,
) -> None:
    model_server.modes.append("declared_huge")  # 1 GiB announced, then nothing sent
    model = bounded_model(model_server)
    with anyio.fail_after(10), pytest.raises(ModelProviderError, match="longer than 1 MiB"):
        await model.request([Message.user("hi")])  # (waiting for the body: 30 s)


@pytest.mark.parametrize(
    ("mode", "text"), [("gzip", "Packed small."), ("deflate_raw", "Packed raw.")]
)
async def test_compressed_replies_within_the_bound_are_read(
    model_server: FakeModelServer, mode: str, text: str
) -> None:
    model_server.modes.append(mode)
    reply = await bounded_model(model_server).request([Message.user("hi")])
    assert reply.message.text == text
    assert model_server.accept_encodings == ["gzip, deflate"]  # only what the bound can decode


async def test_a_remote_agent_whose_card_never_ends_fails_the_delegation_clearly(
    model_server: FakeModelServer,
) -> None:
    model_server.modes.append("endless_json")
    agent = RemoteA2AAgent(model_server.url, name="partner", max_reply_bytes=MIB)
    with anyio.fail_after(20), pytest.raises(ToolError, match="partner sent a reply longer"):
        async for _ in agent.stream("hi"):
            pass


def test_a_blocking_client_is_bounded_too(model_server: FakeModelServer) -> None:
    class Client(BoundedSend, httpx.Client):
        pass

    model_server.modes.extend(["gzip", "endless_json"])
    with Client(max_reply_bytes=MIB, timeout=10.0) as client:
        assert "Packed small." in client.post(f"{model_server.url}/chat/completions", json={}).text
        with pytest.raises(ReplyTooLarge):
            client.post(f"{model_server.url}/chat/completions", json={})


async def test_an_encoding_not_asked_for_is_a_decoding_error() -> None:
    body = gzip.compress(b"{}")

    class Body(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield body

    def brotli_claimed(request: httpx2.Request) -> httpx2.Response:
        # (a stream, as a server's body is: content= would be read before the client sees it)
        return httpx2.Response(200, headers={"content-encoding": "br"}, stream=Body())

    class Client(BoundedAsyncSend, httpx2.AsyncClient):
        pass

    async with Client(max_reply_bytes=MIB, transport=httpx2.MockTransport(brotli_claimed)) as c:
        with pytest.raises(httpx2.DecodingError, match="'br', not one asked for"):
            await c.get("http://peer.test/")


async def test_one_callers_endless_stream_is_cut_while_anothers_reply_is_read_whole(
    model_server: FakeModelServer,
) -> None:
    model_server.modes.extend(["endless_stream", "ok"])  # in the order the requests arrive
    model = bounded_model(model_server)

    async def read(results: dict[str, object], name: str) -> None:
        try:
            async for chunk in model.stream([Message.user(name)]):
                if isinstance(chunk, StreamText):
                    results[name] = str(results.get(name, "")) + chunk.text
        except ModelProviderError as exc:
            results[name] = exc

    results: dict[str, object] = {}
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            tg.start_soon(read, results, "first")
            while model_server.requests < 1:
                await anyio.sleep(0.01)
            tg.start_soon(read, results, "second")
    assert isinstance(results["first"], ModelProviderError)
    assert "longer than 1 MiB" in str(results["first"])
    assert results["second"] == "All good."


class _Pieces(httpx2.AsyncByteStream):
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece


class _EventsClient(BoundedAsyncSend, httpx2.AsyncClient):
    bound_events = True


async def read_events(pieces: list[bytes], limit: int) -> bytes:
    def events(request: httpx2.Request) -> httpx2.Response:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, stream=_Pieces(pieces))

    transport = httpx2.MockTransport(events)
    async with (
        _EventsClient(max_reply_bytes=limit, transport=transport) as client,
        client.stream("GET", "http://peer.test/events") as response,
    ):
        return b"".join([piece async for piece in response.aiter_bytes()])


@pytest.mark.parametrize("end", ["\n\n", "\r\n\r\n", "\r\r"])
async def test_an_event_stream_is_bounded_event_by_event(end: str) -> None:
    small = f"data: {'x' * 40}{end}".encode()  # 46 to 48 bytes an event
    # many small events, 4,800 bytes in all, in pieces that split blank lines: each fits
    stream = small * 100
    pieces = [stream[i : i + 7] for i in range(0, len(stream), 7)]
    assert await read_events(pieces, limit=64) == stream
    # one event over the bound, whole within one piece among small ones, is refused
    big = f"data: {'y' * 100}{end}".encode()
    with pytest.raises(ReplyTooLarge, match="longer than 64 bytes"):
        await read_events([small * 3 + big + small * 3], limit=64)
    # and an event over the bound across pieces, with no blank line yet
    with pytest.raises(ReplyTooLarge):
        await read_events([small, b"data: " + b"z" * 40, b"z" * 40], limit=64)
