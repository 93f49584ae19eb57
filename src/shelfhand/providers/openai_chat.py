"""Chat models behind any OpenAI-compatible endpoint (DESIGN K4).

:class:`OpenAIChatModel` speaks the chat-completions wire format through the official
``openai`` SDK, so it works with OpenAI, DashScope (Qwen, compatible mode), DeepSeek, vLLM,
Ollama and the llama.cpp server. What it adds over the SDK:

- our own retry policy: exponential backoff with jitter on 429, 5xx, connection errors and
  timeouts only — never on 400/401/403/404/422 — honouring ``Retry-After`` (capped);
- caller-facing errors (:class:`~shelfhand.core.errors.ModelProviderError`,
  :class:`~shelfhand.core.errors.ModelTimeoutError`) whose message says what to check;
- tolerant parsing: ``content`` as a string or a list of parts; tool calls that a small model
  wrote as text are recovered with :func:`~shelfhand.models.textcalls.recover_tool_calls`.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio

from shelfhand.core.errors import (
    ConfigurationError,
    ModelError,
    ModelProviderError,
    ModelTimeoutError,
)
from shelfhand.core.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from shelfhand.models.base import (
    ModelResponse,
    StreamChunk,
    StreamDone,
    StreamText,
    ToolSchema,
    Usage,
)
from shelfhand.models.textcalls import recover_tool_calls

try:
    import openai
except ImportError as exc:  # pragma: no cover - openai is a core dependency
    raise ImportError(
        "OpenAIChatModel needs the openai package: pip install 'openai>=1.40'"
    ) from exc

__all__ = ["OpenAIChatModel", "messages_to_openai"]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Local servers (llama.cpp, Ollama, vLLM) ignore the key, but the SDK insists on one.
_PLACEHOLDER_KEY = "sk-no-key-required"
_MAX_BACKOFF = 30.0
_RETRYABLE_STATUS = frozenset({429}) | frozenset(range(500, 600))
_HINTS = {
    401: "Check OPENAI_API_KEY (and that the key may use this model).",
    404: "Check SHELFHAND_MODEL and OPENAI_BASE_URL (compatible URLs usually end in /v1).",
    429: "The server is rate limiting: wait, send fewer requests, or check the quota.",
    500: "The server kept failing: check its logs and health.",
    400: "The server rejected the request: check that the model supports tool calling and "
    "the options sent (temperature, extra_body).",
}


def messages_to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Our messages as chat-completions message dicts.

    Tool results become one ``role: "tool"`` message per
    :class:`~shelfhand.core.messages.ToolResultBlock`; citation blocks are not sent.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        text = "".join(b.text for b in message.content if isinstance(b, TextBlock))
        calls = [b for b in message.content if isinstance(b, ToolCallBlock)]
        results = [b for b in message.content if isinstance(b, ToolResultBlock)]
        # An assistant turn with nothing to say (say, citations only) is not sent; text in a
        # tool message without results has no call id to answer, so it goes as user text.
        if text or calls or (not results and message.role != "assistant"):
            role = "user" if message.role == "tool" else message.role
            entry: dict[str, Any] = {"role": role, "content": text}
            if calls:
                # The spec allows null content next to tool calls; "" confuses some servers.
                entry["content"] = text or None
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments or "{}"},
                    }
                    for c in calls
                ]
            if message.name:
                entry["name"] = message.name
            out.append(entry)
        out.extend(
            {"role": "tool", "tool_call_id": r.call_id, "content": r.content} for r in results
        )
    return out


def _content_text(content: Any) -> str:
    """Text from ``content`` given as a string, a list of parts, or nothing."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") in ("text", "output_text"):
                value = part.get("text")
                if isinstance(value, Mapping):  # {"text": {"value": ...}} in some gateways
                    value = value.get("value")
                if isinstance(value, str):
                    parts.append(value)
        return "".join(parts)
    return str(content)


def _new_call_id() -> str:  # for servers that send calls without an id
    return f"call_{uuid.uuid4().hex[:24]}"


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, Mapping):
        return None
    return Usage(
        input_tokens=int(raw.get("prompt_tokens") or raw.get("input_tokens") or 0),
        output_tokens=int(raw.get("completion_tokens") or raw.get("output_tokens") or 0),
    )


def _as_dict(obj: Any) -> dict[str, Any]:
    """A response object of the SDK as the plain JSON it was built from."""
    if isinstance(obj, dict):
        return obj
    to_dict = getattr(obj, "to_dict", None)
    if callable(to_dict):
        data = to_dict(warnings=False)
        if isinstance(data, dict):
            return data
    raise ModelProviderError(
        f"the model server answered with something that is not a chat completion: {str(obj)[:200]!r}."
        " Check that OPENAI_BASE_URL points at an OpenAI-compatible API (usually ending in /v1)."
    )


class _PartialCall:
    """A tool call being assembled from stream deltas."""

    __slots__ = ("arguments", "id", "name")

    def __init__(self) -> None:
        self.id = ""
        self.name = ""
        self.arguments: list[str] = []

    def add(self, delta: Mapping[str, Any]) -> _PartialCall:
        if isinstance(delta.get("id"), str) and delta["id"]:
            self.id = delta["id"]
        function = delta.get("function") or {}
        name = function.get("name")
        if isinstance(name, str) and name and name != self.name:
            # Most servers send the name once; a few split it, none repeat a different one.
            self.name += name
        piece = function.get("arguments")
        if piece:  # a few servers send an object instead of JSON text
            self.arguments.append(
                piece if isinstance(piece, str) else json.dumps(piece, ensure_ascii=False)
            )
        return self

    def block(self) -> ToolCallBlock:
        arguments = "".join(self.arguments) or "{}"
        return ToolCallBlock(id=self.id or _new_call_id(), name=self.name, arguments=arguments)


class _StreamReply:
    """A reply being assembled from stream chunks."""

    __slots__ = ("calls", "finish_reason", "model_name", "parts", "usage")

    def __init__(self, model_name: str) -> None:
        self.parts: list[str] = []
        self.calls: dict[int, _PartialCall] = {}
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.model_name = model_name

    def feed(self, data: Mapping[str, Any]) -> str:
        """Take one chunk; return the text it adds ("" when none)."""
        self.usage = _usage(data.get("usage")) or self.usage
        self.model_name = str(data.get("model") or self.model_name)
        piece = ""
        for choice in data.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or choice.get("message") or {}
            piece += _content_text(delta.get("content"))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, Mapping):
                    self._add_call_delta(call)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        if piece:
            self.parts.append(piece)
        return piece

    def _add_call_delta(self, delta: Mapping[str, Any]) -> None:
        index = delta.get("index")
        if not isinstance(index, int):
            # Servers that omit the index: a new id starts a new call, anything else continues.
            new_id, last = delta.get("id"), max(self.calls, default=None)
            same = last is not None and (not new_id or new_id == self.calls[last].id)
            index = last if same and last is not None else len(self.calls)
        self.calls.setdefault(index, _PartialCall()).add(delta)

    def tool_calls(self) -> list[ToolCallBlock]:
        return [self.calls[i].block() for i in sorted(self.calls)]


def _tool_names(tools: Sequence[ToolSchema]) -> set[str]:
    names: set[str] = set()
    for tool in tools:
        function = tool.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def _retry_after(exc: openai.APIStatusError, cap: float) -> float | None:
    """Seconds the server asked us to wait, capped; ``None`` when it did not say."""
    headers = exc.response.headers
    raw_ms, raw = headers.get("retry-after-ms"), headers.get("retry-after")
    value: float | None = None
    try:
        if raw_ms is not None:
            value = float(raw_ms) / 1000.0
        elif raw is not None:
            value = float(raw)
    except ValueError:
        try:  # Retry-After may also be an HTTP date
            value = email.utils.parsedate_to_datetime(raw or "").timestamp() - time.time()
        except (TypeError, ValueError):
            value = None
    if value is None:
        return None
    return min(max(value, 0.0), cap)


class OpenAIChatModel:
    """A :class:`~shelfhand.models.base.ChatModel` on an OpenAI-compatible endpoint.

    Args:
        model: The model id the server knows (``gpt-4o-mini``, ``qwen-plus``, ``qwen2.5:7b``…).
        base_url: The API root, e.g. ``http://127.0.0.1:8080/v1``; ``None`` lets the SDK use
            ``OPENAI_BASE_URL`` or OpenAI itself.
        api_key: The key; ``None`` reads ``OPENAI_API_KEY`` and falls back to a placeholder,
            since local servers need none.
        timeout: Seconds for one attempt (connect, and each read while streaming).
        max_retries: Retries after the first attempt, for 429, 5xx, connection errors and
            timeouts only.
        backoff_base: The first backoff in seconds; it doubles per retry, with jitter.
        temperature: Sent when given.
        extra_body: Extra JSON fields for the request body (server-specific options).
        retry_after_cap: The longest ``Retry-After`` we honour, in seconds.

    Streaming: text deltas are yielded as they arrive. When a tool call is recovered from
    text (see :func:`~shelfhand.models.textcalls.recover_tool_calls`), that text has already
    been streamed; the final :class:`~shelfhand.models.base.StreamDone` carries the cleaned
    text and the calls.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        temperature: float | None = None,
        extra_body: Mapping[str, Any] | None = None,
        retry_after_cap: float = 30.0,
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIChatModel needs a model name (set SHELFHAND_MODEL)")
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.backoff_base = backoff_base
        self.temperature = temperature
        self.extra_body = dict(extra_body) if extra_body else None
        self.retry_after_cap = retry_after_cap
        self.__api_key = api_key or os.environ.get("OPENAI_API_KEY") or _PLACEHOLDER_KEY
        self._client: openai.AsyncOpenAI | None = None

    @classmethod
    def from_env(cls, source: Any = None, **overrides: Any) -> OpenAIChatModel:
        """Build from ``SHELFHAND_MODEL``, ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``.

        Args:
            source: A mapping of environment variables (default ``os.environ``), or a
                settings object with ``model``, ``base_url``, ``api_key`` and optionally
                ``model_timeout`` attributes.
            **overrides: Constructor arguments that win over ``source``.

        Raises:
            ConfigurationError: When no model is named.
        """
        source = os.environ if source is None else source
        keys = ("SHELFHAND_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY", "SHELFHAND_MODEL_TIMEOUT")
        if isinstance(source, Mapping):
            model, base_url, api_key, timeout = (source.get(k) for k in keys)
        else:
            attrs = ("model", "base_url", "api_key", "model_timeout")
            model, base_url, api_key, timeout = (getattr(source, a, None) for a in attrs)
        if not model:
            raise ConfigurationError(
                "no chat model configured: set SHELFHAND_MODEL (e.g. gpt-4o-mini, or the model "
                "name your local server uses) and OPENAI_BASE_URL for a non-OpenAI endpoint"
            )
        kwargs: dict[str, Any] = {"base_url": base_url or None, "api_key": api_key}
        if timeout not in (None, ""):
            try:
                kwargs["timeout"] = float(timeout)
            except (TypeError, ValueError) as exc:
                raise ConfigurationError(
                    f"SHELFHAND_MODEL_TIMEOUT must be a number of seconds, not {timeout!r}"
                ) from exc
        kwargs.update(overrides)
        return cls(str(model), **kwargs)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIChatModel(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def name(self) -> str:
        return self.model

    # --- lifecycle ---------------------------------------------------------------------------
    def _get_client(self) -> openai.AsyncOpenAI:
        if self._client is None:
            self._client = openai.AsyncOpenAI(
                api_key=self.__api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,  # retries are ours: the SDK would also retry some 4xx
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections (the model can be used again afterwards)."""
        if self._client is not None:
            client, self._client = self._client, None
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
            ModelTimeoutError: No answer within ``timeout`` after every retry.
            ModelProviderError: The server refused (at once for 4xx) or kept failing.
        """
        client = self._get_client()
        params = self._params(messages, tools, stream=False)
        completion = await self._with_retries(lambda: client.chat.completions.create(**params))
        data = _as_dict(completion)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            raise self._empty_reply(data)
        choice = choices[0] if isinstance(choices[0], Mapping) else {}
        message = choice.get("message") or {}
        raw_calls = [tc for tc in message.get("tool_calls") or () if isinstance(tc, Mapping)]
        calls = [_PartialCall().add(tc).block() for tc in raw_calls]
        text = _content_text(message.get("content"))
        usage, model_name = _usage(data.get("usage")), str(data.get("model") or self.model)
        return self._finish(text, calls, tools, choice.get("finish_reason"), usage, model_name)

    async def stream(
        self, messages: Sequence[Message], *, tools: Sequence[ToolSchema] = ()
    ) -> AsyncIterator[StreamChunk]:
        """Stream the reply: :class:`StreamText` per text delta, then one :class:`StreamDone`.

        A failed attempt is retried only while nothing has been yielded yet.
        """
        client = self._get_client()
        params = self._params(messages, tools, stream=True)
        attempt = 0
        while True:
            reply = _StreamReply(self.model)
            try:
                sdk_stream = await client.chat.completions.create(**params)
                try:
                    async for chunk in sdk_stream:
                        piece = reply.feed(_as_dict(chunk))
                        if piece:
                            yield StreamText(text=piece)
                finally:
                    await sdk_stream.close()
            except openai.APIError as exc:
                delay = None if reply.parts else self._delay_for(exc, attempt)
                if delay is None:
                    raise self._error(exc, attempts=attempt + 1) from exc
                self._log_retry(exc, attempt, delay)
                await anyio.sleep(delay)
                attempt += 1
                continue
            text, calls = "".join(reply.parts), reply.tool_calls()
            response = self._finish(
                text, calls, tools, reply.finish_reason, reply.usage, reply.model_name
            )
            yield StreamDone(response=response)
            return

    # --- internals -----------------------------------------------------------------------------
    def _params(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, stream: bool
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"model": self.model, "messages": messages_to_openai(messages)}
        if tools:
            params["tools"] = [dict(t) for t in tools]
        if self.temperature is not None:
            params["temperature"] = self.temperature
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
    ) -> ModelResponse:
        if not calls and tools and text:
            text, calls = recover_tool_calls(text, _tool_names(tools))
            if calls:
                logger.debug("recovered %d tool call(s) from message text", len(calls))
                finish_reason = "tool_calls"
        return ModelResponse(
            message=Message.assistant(text, tool_calls=calls),
            usage=usage,
            finish_reason=str(finish_reason) if finish_reason else None,
            model_name=model_name,
        )

    async def _with_retries(self, call: Callable[[], Awaitable[_T]]) -> _T:
        attempt = 0
        while True:
            try:
                return await call()
            except openai.APIError as exc:
                delay = self._delay_for(exc, attempt)
                if delay is None:
                    raise self._error(exc, attempts=attempt + 1) from exc
                self._log_retry(exc, attempt, delay)
                await anyio.sleep(delay)
                attempt += 1

    def _delay_for(self, exc: openai.APIError, attempt: int) -> float | None:
        """Seconds to wait before retrying, or ``None`` when we must not retry."""
        if attempt >= self.max_retries:
            return None
        if isinstance(exc, openai.APIStatusError):
            if exc.status_code not in _RETRYABLE_STATUS:
                return None
            asked = _retry_after(exc, self.retry_after_cap)
            if asked is not None:
                return asked
        elif not isinstance(exc, openai.APIConnectionError):
            return None  # e.g. an error event inside a stream: the server meant it
        backoff = min(self.backoff_base * 2.0**attempt, _MAX_BACKOFF)
        return backoff * random.uniform(0.5, 1.0)

    def _log_retry(self, exc: openai.APIError, attempt: int, delay: float) -> None:
        status = getattr(exc, "status_code", None)
        reason = f"HTTP {status}" if status else type(exc).__name__
        logger.warning("model %s: %s; retry %d in %.2fs", self.model, reason, attempt + 1, delay)

    def _where(self) -> str:
        client = self._client
        return str(client.base_url) if client is not None else str(self.base_url)

    def _error(self, exc: openai.APIError, *, attempts: int) -> ModelError:
        where = f"model {self.model!r} at {self._where()}"
        tries = f" (after {attempts} attempts)" if attempts > 1 else ""
        if isinstance(exc, openai.APITimeoutError):
            return ModelTimeoutError(
                f"{where} did not answer within {self.timeout:g}s{tries}. Check that the server "
                "is up and not overloaded, or raise the timeout (SHELFHAND_MODEL_TIMEOUT)."
            )
        if isinstance(exc, openai.APIConnectionError):
            return ModelProviderError(
                f"could not connect to {where}{tries}: {exc}. Check OPENAI_BASE_URL and that "
                "the server is running."
            )
        status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
        code = 401 if status == 403 else (status or 0)
        hint = _HINTS.get(code) or _HINTS[500 if code >= 500 else 400]
        answered = f"answered HTTP {status}" if status else "reported an error"
        return ModelProviderError(
            f"{where} {answered}{tries}: {exc.message[:300]}. {hint}", status_code=status
        )

    def _empty_reply(self, data: Mapping[str, Any]) -> ModelProviderError:
        error = data.get("error")
        detail = error.get("message") if isinstance(error, Mapping) else error
        what = f"reported an error: {str(detail)[:300]}" if error else "sent no choices"
        return ModelProviderError(
            f"model {self.model!r} at {self._where()} {what}. Check that OPENAI_BASE_URL "
            "points at a chat-completions API and the model name is right."
        )
