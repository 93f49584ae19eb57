"""Chat models behind any OpenAI-compatible endpoint (docs/design.md K4).

:class:`OpenAIChatModel` speaks the chat-completions wire format through the official
``openai`` SDK, so it works with OpenAI, DashScope (Qwen, compatible mode), DeepSeek, vLLM,
Ollama and the llama.cpp server. What it adds over the SDK:

- deadlines: a whole call (retries included) ends within ``timeout``, and a streamed reply's
  first token must arrive within ``first_token_timeout``; either raises
  :class:`~shelfhand.core.errors.ModelTimeoutError` and closes the HTTP request;
- our own retry policy (:mod:`shelfhand.providers.openai_retries`): exponential backoff with
  jitter on 429, 5xx and connection errors — never on 400/401/403/404/422 — honouring
  ``Retry-After`` (capped); a timeout is retried at most once, and only while the deadline
  leaves time;
- the tool modes of :mod:`shelfhand.providers.tool_modes` (``native``, ``plain``,
  ``constrained``) and the request options ``max_tokens``, ``temperature``, ``tool_choice``;
- caller-facing errors (:class:`~shelfhand.core.errors.ModelProviderError`,
  :class:`~shelfhand.core.errors.ModelTimeoutError`) whose message says what to check;
- replies read as the JSON they are: the SDK's client sends the request (auth, base URL,
  errors), but its typed objects are not built, one per streamed chunk (117 µs a chunk of the
  event loop built and turned back into a dict, 15 µs read as JSON: ``bench/long_replies.py``);
- tolerant parsing: ``content`` as a string or a list of parts; tool calls that a small model
  wrote as text are recovered with :func:`~shelfhand.models.textcalls.recover_tool_calls`;
- no JSON echoes: a reply to tool results that is nothing but a JSON object or array (a small
  model echoing the result instead of answering) is asked once more, in words
  (:data:`PLAIN_WORDS`); JSON again is rendered as ``key: value`` lines, in every tool mode.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2

from shelfhand.backends.bounded_http import BoundedAsyncSend, ReplyTooLarge
from shelfhand.core.errors import (
    ConfigurationError,
    ModelError,
    ModelProviderError,
)
from shelfhand.core.messages import Message, ToolCallBlock
from shelfhand.core.settings import MODEL_ENV, TOOL_CHOICES, model_options
from shelfhand.core.tracing import current_span
from shelfhand.models.base import (
    FINISH_REPETITION,
    ModelResponse,
    StreamChunk,
    StreamDone,
    StreamText,
    ToolSchema,
    Usage,
)
from shelfhand.models.textcalls import json_as_text, json_reply, recover_tool_calls
from shelfhand.providers.openai_retries import (
    Deadline,
    RetryPolicy,
    call_error,
    empty_reply,
    unreadable,
)
from shelfhand.providers.openai_wire import (
    PartialCall,
    StreamReply,
    as_dict,
    content_text,
    messages_to_openai,
    tool_names,
    usage_of,
)
from shelfhand.providers.repetition import Repetition, loop_cut
from shelfhand.providers.tool_modes import (
    TOOL_MODES,
    ToolMode,
    native_tools,
    parse_constrained,
    prompted_messages,
    repeats_answered_calls,
    response_format,
)

try:
    import openai
except ImportError as exc:  # pragma: no cover - openai is a core dependency
    raise ImportError(
        "OpenAIChatModel needs the openai package: pip install 'openai>=1.40'"
    ) from exc

__all__ = ["PLAIN_WORDS", "OpenAIChatModel", "messages_to_openai"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

PLAIN_WORDS = (
    "Answer my question now in plain words, using the tool results above. Do not reply with JSON."
)
"""Sent once when a reply to tool results is bare JSON (see ``OpenAIChatModel``)."""


def _added(first: Usage | None, second: Usage | None) -> Usage | None:
    if first is None or second is None:
        return second or first
    return Usage(
        input_tokens=first.input_tokens + second.input_tokens,
        output_tokens=first.output_tokens + second.output_tokens,
    )


# Local servers (llama.cpp, Ollama, vLLM) ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "sk-no-key-required"

MAX_REPLY_BYTES = 64 * 1024**2
"""The default bound of one reply's body, streamed or not (decompressed): far above what a
reply of 100,000 tokens streams (about 300 bytes of events a token), far below what would
exhaust a server's memory."""


class _BoundedHttp(BoundedAsyncSend, openai.DefaultAsyncHttpxClient):  # type: ignore[misc]
    """The SDK's default HTTP client, its replies bounded (see ``bounded_http``)."""


async def _post_completion(
    client: openai.AsyncOpenAI, params: Mapping[str, Any], *, timeout: float
) -> Any:
    """``POST /chat/completions`` with ``params`` (``extra_body`` merged into the body as
    the SDK's ``create`` does): the reply as plain JSON (a dict), or with ``stream`` an
    ``AsyncStream`` of the chunks as dicts. The SDK's client sends it, so the base URL,
    headers, auth and its errors (``APIStatusError``, an error event in the stream) are the
    same as ``client.chat.completions.create``; only its typed objects are not built."""
    body = dict(params)
    options: Any = {"timeout": timeout}  # (the SDK's RequestOptions)
    extra = body.pop("extra_body", None)
    if extra:
        options["extra_json"] = extra
    if body.get("stream"):
        return await client.post(
            "/chat/completions",
            body=body,
            cast_to=object,
            options=options,
            stream=True,
            stream_cls=openai.AsyncStream[object],
        )
    return await client.post(
        "/chat/completions",
        body=body,
        cast_to=object,
        options=options,
    )


def _span_event(name: str, **attributes: Any) -> None:
    """Record on the call's ``chat`` span (when traced) a step that costs it time: a retry,
    or a second request (the answer asked for again)."""
    span = current_span()
    if span is not None and span.kind == "chat":  # (not a rewriter's call inside a search)
        span.event(name, **attributes)


def span_attributes(base_url: str | None) -> dict[str, Any]:
    """A ``chat`` span's provider attributes for an endpoint (OpenTelemetry GenAI):
    ``gen_ai.provider.name`` ``openai`` (the wire format), and the server's host and port
    (``server.address``, ``server.port``; OpenAI's own for ``None``), never its path,
    credentials or query."""
    url = urlsplit(base_url or "https://api.openai.com/v1")
    attributes: dict[str, Any] = {"gen_ai.provider.name": "openai"}
    try:
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:  # a port that is not a number: the SDK reports that on the first call
        return attributes
    if url.hostname:
        attributes["server.address"] = url.hostname
        attributes["server.port"] = port
    return attributes


def _not_streamed(response: httpx2.Response) -> bool:
    """Whether a streamed request was answered with one JSON body instead of events."""
    kind = response.headers.get("content-type", "")
    return "json" in kind and "event-stream" not in kind


class OpenAIChatModel:
    """A :class:`~shelfhand.models.base.ChatModel` on an OpenAI-compatible endpoint.

    Args:
        model: The model id the server knows (``gpt-4o-mini``, ``qwen-plus``, ``qwen2.5:7b``…).
        base_url: The API root, e.g. ``http://127.0.0.1:8080/v1``; ``None`` lets the SDK use
            ``OPENAI_BASE_URL`` or OpenAI itself.
        api_key: The key; ``None`` reads ``OPENAI_API_KEY`` and falls back to a placeholder,
            since local servers need none.
        timeout: Seconds for a whole call, retries and backoff included (the total deadline).
        first_token_timeout: Seconds a streamed attempt may wait for its first token (text or
            tool call); ``None``: the total deadline only. A non-streamed reply arrives whole,
            so only ``timeout`` applies to :meth:`request`.
        max_retries: Retries after the first attempt, for 429, 5xx and connection errors; a
            timeout is retried at most once.
        backoff_base: The first backoff in seconds; it doubles per retry, with jitter.
        temperature: Sent when given.
        max_tokens: The most tokens of one reply; sent when given.
        context_tokens: The model's context window; the agent budgets its prompt with it.
        tool_choice: ``auto`` (the model decides; not sent), ``required`` or ``none``.
        tool_mode: ``native``, ``plain`` or ``constrained``; see
            :mod:`shelfhand.providers.tool_modes`.
        extra_body: Extra JSON fields for the request body (server-specific options).
        retry_after_cap: The longest ``Retry-After`` we honour, in seconds.
        max_reply_bytes: The most bytes of one reply, streamed or not, after decompression
            (:data:`MAX_REPLY_BYTES`); a longer one is a :class:`ModelProviderError`, not
            retried, and not read further.

    Streaming: text deltas are yielded as they arrive. When a tool call is recovered from
    text (see :func:`~shelfhand.models.textcalls.recover_tool_calls`), that text has already
    been streamed; the final :class:`~shelfhand.models.base.StreamDone` carries the cleaned
    text and the calls. In ``constrained`` mode the reply is JSON: it is read whole, then the
    answer is yielded as one :class:`StreamText`.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        first_token_timeout: float | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        context_tokens: int = 8192,
        tool_choice: str = "auto",
        tool_mode: str = "native",
        extra_body: Mapping[str, Any] | None = None,
        retry_after_cap: float = 30.0,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIChatModel needs a model name (set SHELFHAND_MODEL)")
        if timeout <= 0 or (first_token_timeout is not None and first_token_timeout <= 0):
            raise ConfigurationError("model timeouts must be positive numbers of seconds")
        if tool_choice not in TOOL_CHOICES:
            raise ConfigurationError(f"tool_choice must be one of {', '.join(TOOL_CHOICES)}")
        if tool_mode not in TOOL_MODES:
            raise ConfigurationError(f"tool_mode must be one of {', '.join(TOOL_MODES)}")
        if max_tokens is not None and max_tokens < 1:
            raise ConfigurationError("max_tokens must be at least 1")
        if context_tokens < 1:
            raise ConfigurationError("context_tokens must be at least 1")
        if max_reply_bytes < 1:
            raise ConfigurationError("max_reply_bytes must be at least 1")
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.first_token_timeout = first_token_timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.context_tokens = context_tokens
        self.tool_choice = tool_choice
        self.tool_mode: ToolMode = tool_mode
        self.extra_body = dict(extra_body) if extra_body else None
        self.retry_after_cap = retry_after_cap
        self.max_reply_bytes = max_reply_bytes
        self.__api_key = api_key or os.environ.get("OPENAI_API_KEY") or _PLACEHOLDER_KEY
        self.span_attributes = span_attributes(base_url or os.environ.get("OPENAI_BASE_URL"))
        """What each ``chat`` span says of the endpoint (:func:`span_attributes`)."""
        self._client: openai.AsyncOpenAI | None = None
        self._client_loop: object = None  # the event loop the client's connections belong to

    @classmethod
    def from_env(cls, source: Any = None, **overrides: Any) -> OpenAIChatModel:
        """Build from ``SHELFHAND_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY`` and the
        model options of :data:`~shelfhand.core.settings.MODEL_ENV`.

        Args:
            source: A mapping of environment variables (default ``os.environ``), or a
                settings object with ``model``, ``base_url``, ``api_key`` and optionally
                ``model_timeout``, ``first_token_timeout``, ``max_tokens``, ``temperature``,
                ``context_tokens``, ``tool_choice`` and ``tool_mode`` attributes.
            **overrides: Constructor arguments that win over ``source`` (``model=`` too: the
                same endpoint and options, another model).

        Raises:
            ConfigurationError: When no model is named or an option is invalid.
        """
        source = os.environ if source is None else source
        if isinstance(source, Mapping):
            model, base_url, api_key = (
                source.get(k) for k in ("SHELFHAND_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY")
            )
            raw = {key: source.get(env_key) for key, env_key in MODEL_ENV.items()}
        else:
            model, base_url, api_key = (
                getattr(source, a, None) for a in ("model", "base_url", "api_key")
            )
            raw = {key: getattr(source, key, None) for key in MODEL_ENV}
        model = overrides.pop("model", None) or model
        if not model:
            raise ConfigurationError(
                "no chat model configured: set SHELFHAND_MODEL (e.g. gpt-4o-mini, or the model "
                "name your local server uses) and OPENAI_BASE_URL for a non-OpenAI endpoint"
            )
        kwargs: dict[str, Any] = {"base_url": base_url or None, "api_key": api_key}
        options = model_options(raw)
        if "model_timeout" in options:
            kwargs["timeout"] = options.pop("model_timeout")
        kwargs.update(options)
        kwargs.update(overrides)
        return cls(str(model), **kwargs)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def name(self) -> str:
        return self.model

    # --- lifecycle ---------------------------------------------------------------------------
    def _get_client(self) -> openai.AsyncOpenAI:
        """The SDK client of the running event loop. Its pooled connections belong to the
        loop that opened them, so a model used from another loop (a script's second
        ``Agent.run_sync``: each is an ``asyncio.run``) gets a client of its own; the one of
        the other loop is dropped, its sockets closed when it is collected.

        Its HTTP client is the SDK's default one, its replies bounded, given explicitly: the
        client the SDK makes by itself schedules its own closing on whatever loop runs when
        it is collected, which for a dropped client is this one, where closing another
        loop's connections fails."""
        loop = _running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = openai.AsyncOpenAI(
                api_key=self.__api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,  # retries are ours: the SDK would also retry some 4xx
                http_client=_BoundedHttp(
                    max_reply_bytes=self.max_reply_bytes, timeout=self.timeout
                ),
            )
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections (the model can be used again afterwards)."""
        if self._client is not None:
            client, self._client = self._client, None
            if self._client_loop is _running_loop():  # else its loop closed them already
                await client.close()

    async def check(self) -> None:
        """Cheap reachability probe for readiness checks: ``GET {base_url}/models``, one try.

        Raises:
            ModelProviderError: the endpoint did not answer or refused the key.
        """
        try:
            await self._get_client().models.list(timeout=min(self.timeout, 5.0))
        except openai.APIStatusError as exc:
            raise ModelProviderError(
                f"{self.base_url or 'the OpenAI API'} answered {exc.status_code} to GET /models",
                status_code=exc.status_code,
            ) from None
        except openai.APIError as exc:
            raise ModelProviderError(
                f"cannot reach {self.base_url or 'the OpenAI API'}: {type(exc).__name__}"
            ) from None

    # --- ChatModel -----------------------------------------------------------------------------
    async def request(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> ModelResponse:
        """Send the conversation and return the whole reply.

        Raises:
            ModelTimeoutError: No whole answer within ``timeout`` (retries included).
            ModelProviderError: The server refused (at once for 4xx) or kept failing.
        """
        tools = self._offered(tools)
        response = await self._request(messages, tools)
        if self._loops(messages, response):
            response = await self._answer_now(messages, tools, response)
        if self._echoed_json(messages, response):
            response = await self._in_plain_words(messages, tools, response)
        return response

    async def _request(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, answer_only: bool = False
    ) -> ModelResponse:
        client = self._get_client()
        params = self._params(messages, tools, stream=False)
        if answer_only:
            params["response_format"] = response_format((), answer=True)
        deadline = anyio.current_time() + self.timeout
        try:
            completion = await self._with_retries(
                lambda left: _post_completion(client, params, timeout=left), deadline
            )
        except (httpx2.TransportError, json.JSONDecodeError) as error:
            raise unreadable(error) from error
        return self._completion(completion, tools)

    def _completion(self, completion: Any, tools: Sequence[ToolSchema]) -> ModelResponse:
        """The response of a whole (not streamed) chat completion."""
        data = as_dict(completion)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise empty_reply(data, where=f"model {self.model!r} at {self._where()}")
        choice = choices[0] if isinstance(choices[0], Mapping) else {}
        message = choice.get("message") or {}
        raw_calls = [tc for tc in message.get("tool_calls") or () if isinstance(tc, Mapping)]
        calls = [PartialCall().add(tc).block() for tc in raw_calls]
        text = content_text(message.get("content"))
        usage, model_name = usage_of(data.get("usage")), str(data.get("model") or self.model)
        finish_reason = choice.get("finish_reason")
        # cut by max_tokens inside a loop (see .repetition): one round of it kept
        cut = loop_cut(text) if finish_reason == "length" else None
        return self._finish(text, calls, tools, finish_reason, usage, model_name, cut)

    async def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> AsyncIterator[StreamChunk]:
        """Stream the reply: :class:`StreamText` per text delta, then one :class:`StreamDone`.

        A failed attempt is retried only while nothing has been yielded yet.

        Raises:
            ModelTimeoutError: No first token within ``first_token_timeout``, or no end of
                the reply within ``timeout``; the HTTP request is closed.
        """
        client = self._get_client()
        tools = self._offered(tools)
        params = self._params(messages, tools, stream=True)
        buffered = self.tool_mode == "constrained" and bool(tools)
        deadline = anyio.current_time() + self.timeout
        attempt = 0
        while True:
            reply = StreamReply(self.model)
            repetition = Repetition()
            start = anyio.current_time()
            first_by = deadline
            if self.first_token_timeout is not None:
                first_by = min(deadline, start + self.first_token_timeout)
            try:
                with anyio.fail_after(max(first_by - start, 0.0)):
                    # the SDK's own timeout a little later: our deadline decides, and says which
                    sdk_stream = await _post_completion(
                        client, params, timeout=max(first_by - start, 0.001) + 1.0
                    )
                whole: ModelResponse | None = None
                try:
                    if _not_streamed(sdk_stream.response):
                        # a server (or proxy) that answers with the whole completion: read
                        # as the reply of a request that did not stream, shown at once
                        with anyio.fail_after(max(deadline - anyio.current_time(), 0.0)):
                            body = await sdk_stream.response.aread()
                        whole = self._completion(json.loads(body), tools)
                    chunks = sdk_stream.__aiter__()
                    seen = 0
                    while whole is None:
                        started = bool(reply.parts or reply.calls)
                        by = deadline if started else first_by
                        try:
                            # asyncio's own timeout, not anyio's cancel scope: 3.8 µs a chunk
                            # instead of 8.0 (anyio's clock is the loop's on asyncio)
                            async with asyncio.timeout_at(by):
                                raw = await chunks.__anext__()
                        except StopAsyncIteration:
                            break
                        except TimeoutError:
                            raise Deadline(first_token=not started) from None
                        seen += 1
                        piece = reply.feed(as_dict(raw))
                        if piece and repetition.looping(piece, reply.parts):
                            # the model writes one block over and over: stop it (closing
                            # the request stops the server's generation too)
                            logger.info("model %s: reply stopped, it repeats itself", self.model)
                            break
                        if piece and not buffered:
                            yield StreamText(text=piece)
                    if not seen and whole is None:  # (a web page, a proxy's notice)
                        raise self._no_chunks(sdk_stream.response.headers.get("content-type"))
                finally:
                    with anyio.CancelScope(shield=True):
                        await sdk_stream.close()  # also when the caller stops early
            except TimeoutError:  # no response headers before the first-token deadline
                exc: Exception = Deadline(first_token=True)
            except (Deadline, openai.APIError, ReplyTooLarge) as error:
                exc = error
            except (httpx2.TransportError, json.JSONDecodeError) as error:
                raise unreadable(error) from error
            else:
                if whole is not None:
                    response = whole
                else:
                    text, calls = "".join(reply.parts), reply.tool_calls()
                    response = self._finish(
                        text, calls, tools, reply.finish_reason, reply.usage, reply.model_name,
                        repetition.cut,
                    )  # fmt: skip
                if self._loops(messages, response):
                    response = await self._answer_now(messages, tools, response)
                if self._echoed_json(messages, response):
                    response = await self._in_plain_words(messages, tools, response)
                if (buffered or whole is not None) and response.message.text:
                    yield StreamText(text=response.message.text)
                yield StreamDone(response=response)
                return
            streamed = bool(reply.parts) and not buffered
            delay = None if streamed else self._delay_for(exc, attempt, deadline)
            if delay is None:
                raise self._error(exc, attempts=attempt + 1) from exc
            self._log_retry(exc, attempt, delay)
            await anyio.sleep(delay)
            attempt += 1

    # --- internals -----------------------------------------------------------------------------
    def _no_chunks(self, content_type: str | None) -> ModelProviderError:
        """A streamed request answered with no chunk at all: not a chat-completions API."""
        return ModelProviderError(
            f"model {self.model!r} at {self._where()} answered a streamed request with no "
            f"chunk (content type {content_type or 'none'!r}). Check that OPENAI_BASE_URL "
            "points at an OpenAI-compatible API (usually ending in /v1)."
        )

    @staticmethod
    def _echoed_json(messages: Sequence[Message], response: ModelResponse) -> bool:
        """The reply right after tool results is bare JSON, not a call: a small model echoing
        a result (``{"name": "Lumen X1", "stock": 12}``) instead of answering."""
        after_results = bool(messages) and bool(messages[-1].tool_results)
        reply = response.message
        return after_results and not reply.tool_calls and json_reply(reply.text) is not None

    def _loops(self, messages: Sequence[Message], response: ModelResponse) -> bool:
        """Constrained mode, and the reply only repeats calls already answered this turn."""
        if self.tool_mode != "constrained" or self.tool_choice == "required":
            return False
        return repeats_answered_calls(messages, response.message.tool_calls)

    async def _answer_now(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], looping: ModelResponse
    ) -> ModelResponse:
        """The same request with a schema that admits only an answer: the results of the
        repeated call are already in the conversation. A failure keeps the repeated call
        (the agent's loop guard answers it from the run's results)."""
        logger.debug("model %s repeated an answered call: asked for the answer", self.model)
        _span_event("model.answer_only")  # (a second request, within this call's span)
        try:
            again = await self._request(messages, tools, answer_only=True)
        except ModelError as exc:
            logger.warning("model %s: the answer-only retry failed (%s)", self.model, exc)
            return looping
        if not again.message.text.strip() and not again.message.tool_calls:
            return looping
        return ModelResponse(
            message=again.message,
            usage=_added(looping.usage, again.usage),
            finish_reason=again.finish_reason,
            model_name=again.model_name,
        )

    async def _in_plain_words(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], echoed: ModelResponse
    ) -> ModelResponse:
        """One more request asking for the answer in words; when that is JSON again (or
        fails), the JSON rendered as ``key: value`` lines, so the user never reads raw JSON."""
        logger.debug("model %s answered tool results with bare JSON: asked again", self.model)
        _span_event("model.plain_words")
        try:
            again = await self._request([*messages, Message.user(PLAIN_WORDS)], tools)
        except ModelError as exc:
            logger.warning("model %s: the plain-words retry failed (%s)", self.model, exc)
            again = echoed
        usage = _added(echoed.usage, again.usage) if again is not echoed else echoed.usage
        message = again.message
        if not message.tool_calls:
            value = json_reply(message.text)
            if value is not None:
                message = Message.assistant(json_as_text(value))
        return ModelResponse(
            message=message,
            usage=usage,
            finish_reason=again.finish_reason,
            model_name=again.model_name,
        )

    def _offered(self, tools: Sequence[ToolSchema]) -> Sequence[ToolSchema]:
        return () if self.tool_choice == "none" else tools

    def _params(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, stream: bool
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model}
        if not tools or self.tool_mode == "native":
            params["messages"] = messages_to_openai(messages)
            if tools:
                params["tools"] = native_tools(tools)
                if self.tool_choice != "auto":
                    params["tool_choice"] = self.tool_choice
        else:
            params["messages"] = prompted_messages(messages, tools, self.tool_mode)
            if self.tool_mode == "constrained":
                required = self.tool_choice == "required"
                params["response_format"] = response_format(tools, answer=not required)
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        if self.extra_body:
            params["extra_body"] = self.extra_body
        if stream:
            # Servers that do not know stream_options ignore it; usage is then simply absent.
            params["stream"] = True
            params["stream_options"] = {"include_usage": True}
        return params

    def _finish(
        self,
        text: str,
        calls: list[ToolCallBlock],
        tools: Sequence[ToolSchema],
        finish_reason: Any,
        usage: Usage | None,
        model_name: str,
        cut: int | None = None,
    ) -> ModelResponse:
        """The response of a reply's ``text`` and ``calls``; ``cut``: where a reply caught
        in a loop ends (:mod:`.repetition`), its finish reason then ``repetition``."""
        if cut is not None:
            text, finish_reason = text[:cut], FINISH_REPETITION
        if not calls and tools and text:
            names = tool_names(tools)
            parsed = (
                parse_constrained(text, names, looped=cut is not None)
                if self.tool_mode == "constrained"
                else None
            )
            text, calls = parsed if parsed is not None else recover_tool_calls(text, names)
            if calls:
                logger.debug("read %d tool call(s) from message text", len(calls))
                finish_reason = "tool_calls"
        return ModelResponse(
            message=Message.assistant(text, tool_calls=calls),
            usage=usage,
            finish_reason=str(finish_reason) if finish_reason else None,
            model_name=model_name,
        )

    async def _with_retries(self, call: Callable[[float], Awaitable[_T]], deadline: float) -> _T:
        attempt = 0
        while True:
            left = deadline - anyio.current_time()
            try:
                with anyio.fail_after(max(left, 0.0)):
                    return await call(max(left, 0.001))
            except TimeoutError:
                exc: Exception = Deadline(first_token=False)
            except (openai.APIError, ReplyTooLarge) as error:
                exc = error
            delay = self._delay_for(exc, attempt, deadline)
            if delay is None:
                raise self._error(exc, attempts=attempt + 1) from exc
            self._log_retry(exc, attempt, delay)
            await anyio.sleep(delay)
            attempt += 1

    def _log_retry(self, exc: Exception, attempt: int, delay: float) -> None:
        status = getattr(exc, "status_code", None)
        reason = f"HTTP {status}" if status else type(exc).__name__
        logger.warning("model %s: %s; retry %d in %.2fs", self.model, reason, attempt + 1, delay)
        _span_event("model.retry", attempt=attempt + 1, reason=reason, delay_s=round(delay, 3))

    def _where(self) -> str:
        client = self._client
        return str(client.base_url) if client is not None else str(self.base_url)

    def _error(self, exc: Exception, *, attempts: int) -> ModelError:
        return call_error(
            exc,
            where=f"model {self.model!r} at {self._where()}",
            attempts=attempts,
            timeout=self.timeout,
            first_token_timeout=self.first_token_timeout,
        )

    def _delay_for(self, exc: Exception, attempt: int, deadline: float) -> float | None:
        policy = RetryPolicy(
            max_retries=self.max_retries,
            backoff_base=self.backoff_base,
            retry_after_cap=self.retry_after_cap,
        )
        return policy.delay(exc, attempt, deadline)


def _running_loop() -> object:
    """The running asyncio loop (``None`` under another event loop, such as trio's)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
