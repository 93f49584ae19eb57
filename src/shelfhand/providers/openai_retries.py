"""Retries and errors of calls to an OpenAI-compatible chat endpoint.

:class:`RetryPolicy` decides whether and when a failed attempt is tried again: exponential
backoff with jitter on 429, 5xx and connection errors — never on 400/401/403/404/422 —
honouring ``Retry-After`` (capped); a timeout is retried at most once, and only while the
deadline leaves time. :func:`call_error` turns the last failure into the caller-facing
:class:`~shelfhand.core.errors.ModelProviderError` or
:class:`~shelfhand.core.errors.ModelTimeoutError` whose message says what to check.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import openai

from shelfhand.backends.bounded_http import reply_too_large
from shelfhand.core.errors import (
    ModelError,
    ModelProviderError,
    ModelTimeoutError,
    cause_chain,
)

__all__ = [
    "Deadline",
    "RetryPolicy",
    "call_error",
    "connection_lost",
    "empty_reply",
    "unreadable",
]

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


class Deadline(Exception):
    """A deadline passed: ``first_token`` tells which one."""

    def __init__(self, *, first_token: bool) -> None:
        super().__init__("deadline")
        self.first_token = first_token


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


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """When a failed attempt is tried again.

    Attributes:
        max_retries: Retries after the first attempt.
        backoff_base: The first backoff in seconds; it doubles per retry, with jitter.
        retry_after_cap: The longest ``Retry-After`` honoured, in seconds.
    """

    max_retries: int
    backoff_base: float
    retry_after_cap: float

    def delay(self, exc: Exception, attempt: int, deadline: float) -> float | None:
        """Seconds to wait before retrying after ``exc`` (``attempt`` counts from 0), or
        ``None`` when we must not retry (not retryable, retried enough, or past ``deadline``
        on the event loop's clock)."""
        if attempt >= self.max_retries or reply_too_large(exc) is not None:
            return None  # (a reply over the bound would be as long again)
        delay: float | None = None
        timed_out = isinstance(exc, Deadline | openai.APITimeoutError)
        if timed_out:
            if attempt >= 1:
                return None  # a generation timeout is retried at most once
        elif isinstance(exc, openai.APIStatusError):
            if exc.status_code not in _RETRYABLE_STATUS:
                return None
            delay = _retry_after(exc, self.retry_after_cap)
        elif not isinstance(exc, openai.APIConnectionError):
            return None  # e.g. an error event inside a stream: the server meant it
        if delay is None:
            backoff = min(self.backoff_base * 2.0**attempt, _MAX_BACKOFF)
            delay = backoff * random.uniform(0.5, 1.0)
        if anyio.current_time() + delay >= deadline:
            return None  # no time left for another attempt
        return delay


def call_error(
    exc: Exception,
    *,
    where: str,
    attempts: int,
    timeout: float,
    first_token_timeout: float | None,
) -> ModelError:
    """The caller-facing error for the last failure of a call to ``where`` (``model 'm' at
    URL``), saying what to check."""
    tries = f" (after {attempts} attempts)" if attempts > 1 else ""
    too_large = reply_too_large(exc)
    if too_large is not None:
        return ModelProviderError(
            f"{where} sent {too_large}: not read further. Check that OPENAI_BASE_URL points at "
            "a chat-completions API (not a proxy or a file server) and that max_tokens is set."
        )
    first = first_token_timeout
    if isinstance(exc, Deadline) and exc.first_token and first is not None and first < timeout:
        return ModelTimeoutError(
            f"{where} sent no first token within {first:g}s{tries}. "
            "Check that the server is up and not overloaded, or raise "
            "SHELFHAND_FIRST_TOKEN_TIMEOUT (a local CPU model needs long for a long prompt)."
        )
    if isinstance(exc, Deadline | openai.APITimeoutError):
        return ModelTimeoutError(
            f"{where} did not answer within {timeout:g}s{tries}. Check that the server "
            "is up and not overloaded, or raise the timeout (SHELFHAND_MODEL_TIMEOUT)."
        )
    if isinstance(exc, openai.APIConnectionError):
        return ModelProviderError(
            f"could not connect to {where}{tries}: {_clause(exc)}. Check OPENAI_BASE_URL and that "
            "the server is running.",
            connection_lost=connection_lost(exc),
        )
    if not isinstance(exc, openai.APIError):  # pragma: no cover - callers pass only these
        return ModelProviderError(f"{where} failed: {exc}")
    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
    code = 401 if status == 403 else (status or 0)
    hint = _HINTS.get(code) or _HINTS[500 if code >= 500 else 400]
    answered = f"answered HTTP {status}" if status else "reported an error"
    return ModelProviderError(
        f"{where} {answered}{tries}: {_clause(exc.message[:300])}. {hint}", status_code=status
    )


def _clause(text: object) -> str:
    """``text`` without its closing full stop, to be followed by one (the SDK's own messages
    end with one: "Connection error.")."""
    return str(text).rstrip().rstrip(".")


def empty_reply(data: Mapping[str, Any], *, where: str) -> ModelProviderError:
    """A reply without choices: the provider's error if it sent one."""
    error = data.get("error")
    detail = error.get("message") if isinstance(error, Mapping) else error
    what = f"reported an error: {str(detail)[:300]}" if error else "sent no choices"
    return ModelProviderError(
        f"{where} {what}. Check that OPENAI_BASE_URL "
        "points at a chat-completions API and the model name is right."
    )


def connection_lost(exc: BaseException) -> bool:
    """The connection to the model broke (reset or closed mid-reply), rather than the server
    answering with an error: the cause chain holds such an ``httpx2`` (the ``openai`` SDK's
    HTTP client) or ``openai`` error."""
    for current in cause_chain(exc):
        if isinstance(current, (httpx2.RemoteProtocolError, httpx2.ReadError)):
            return True
        if isinstance(current, openai.APIConnectionError) and not isinstance(
            current, openai.APITimeoutError
        ):
            return True
    return False


def unreadable(exc: httpx2.TransportError | json.JSONDecodeError) -> ModelProviderError:
    """A reply the SDK could not parse or read (malformed JSON, a broken stream): the
    provider's fault, reported as such."""
    if isinstance(exc, json.JSONDecodeError):
        return ModelProviderError(
            f"the model provider sent a malformed reply (invalid JSON: {exc.msg})"
        )
    return ModelProviderError(
        f"the model provider failed: {type(exc).__name__}: {exc}",
        connection_lost=connection_lost(exc),
    )
