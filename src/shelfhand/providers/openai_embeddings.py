"""Embeddings from any OpenAI-compatible ``/v1/embeddings`` endpoint (docs/design.md R4).

Works with OpenAI itself and with compatible servers (DashScope, bge-m3 behind vLLM or TEI).
Transient failures (429, 5xx, connection errors, timeouts) are retried with exponential
backoff, a timeout once at most (:data:`TIMEOUT_ATTEMPTS`); a request the server rejects (400)
is never retried. When the service stays
unavailable, :class:`~shelfhand.core.errors.EmbeddingUnavailableError` is raised so retrieval
can fall back to keyword search.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from shelfhand.backends.bounded_http import BoundedSend, ReplyTooLarge, reply_too_large
from shelfhand.core.errors import ConfigurationError, EmbeddingUnavailableError, KnowledgeError
from shelfhand.knowledge.embeddings.router import Vectors

logger = logging.getLogger(__name__)

__all__ = ["OpenAIEmbedder"]

_MAX_RETRY_AFTER_S = 20.0

TIMEOUT_ATTEMPTS = 2
"""Attempts of a request that times out (fewer when ``max_retries`` allows fewer): a server
that answers nothing within ``timeout`` twice is hung, and each more attempt would cost the
whole timeout again (ingest waited 4 × 30 s on one before falling back to keywords)."""

_BYTES_PER_FLOAT = 40
"""Room for one float of a vector in a JSON reply ("-0.012345678901234567, " is 24 bytes;
a server that indents its JSON adds a line and its indent)."""

_REPLY_SLACK = 16 * 1024**2
"""Room in a reply for all but the vectors (indices, usage, a server's extras)."""


class OpenAIEmbedder:
    """An :class:`~shelfhand.knowledge.embeddings.router.Embedder` backed by an embeddings API.

    Args:
        model: Model name as the server knows it (``text-embedding-3-small``, ``bge-m3``).
        dim: Expected vector dimension. ``None`` learns it from the first response (reading
            :attr:`dim` before any call then costs one small request). A response of another
            dimension raises :class:`ConfigurationError`.
        base_url: Server base URL including ``/v1``; ``None`` means ``OPENAI_BASE_URL`` when
            set, else OpenAI.
        api_key: Key; defaults to ``OPENAI_API_KEY``. A self-hosted server (``base_url`` set)
            may need none.
        batch_size: Texts per request.
        timeout: Seconds per request.
        max_retries: Retries of a transient failure (so up to ``max_retries + 1`` attempts;
            a request that times out is tried :data:`TIMEOUT_ATTEMPTS` times at most).
        request_dimensions: Send ``dimensions=dim`` so the server shortens vectors
            (OpenAI ``text-embedding-3-*``); many compatible servers reject that field.
        backoff: First retry delay in seconds; it doubles each retry (plus jitter). A
            ``Retry-After`` header from the server takes precedence (capped at 20 s).

    A reply is read up to what a batch of ``batch_size`` vectors of ``dim`` floats (4,096
    when ``dim`` is not given) can take in JSON, plus 16 MiB; a longer one (a server that is
    not an embeddings API, a compressed bomb) is a :class:`KnowledgeError`, not read further.

    Raises:
        ConfigurationError: No API key for OpenAI, or bad ``dim``/``batch_size``.
    """

    def __init__(
        self,
        model: str,
        *,
        dim: int | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        max_retries: int = 3,
        request_dimensions: bool = False,
        backoff: float = 0.5,
    ) -> None:
        if not model:
            raise ConfigurationError("OpenAIEmbedder needs a model name")
        if batch_size < 1 or max_retries < 0 or (dim is not None and dim < 1):
            raise ConfigurationError("batch_size and dim must be >= 1, max_retries >= 0")
        if request_dimensions and dim is None:
            raise ConfigurationError("request_dimensions=True needs dim")
        # The SDK reads OPENAI_BASE_URL when no base_url is given; resolve it here so that
        # messages name the endpoint actually used.
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if base_url is None:
                raise ConfigurationError(
                    "no API key for OpenAI embeddings: set OPENAI_API_KEY or pass api_key"
                )
            # Self-hosted servers (vLLM, TEI) usually need no key; the SDK insists on one.
            key = "EMPTY"
        self._model = model
        self._dim = dim
        self._base_url = base_url
        self._api_key = key
        self._batch_size = batch_size
        self._timeout = timeout
        self._max_retries = max_retries
        self._request_dimensions = request_dimensions
        self._backoff = backoff
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        if self._request_dimensions:
            return f"openai:{self._model}:{self._dim}"
        return f"openai:{self._model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                bound = self._batch_size * (self._dim or 4096) * _BYTES_PER_FLOAT + _REPLY_SLACK
                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self._base_url,
                    timeout=self._timeout,
                    # Retries are ours: the SDK would also retry 400-class errors we must not.
                    max_retries=0,
                    http_client=_bounded_http()(max_reply_bytes=bound, timeout=self._timeout),
                )
            return self._client

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after is not None:
            try:
                return min(max(float(retry_after), 0.0), _MAX_RETRY_AFTER_S)
            except ValueError:
                pass  # an HTTP date: fall back to our own schedule
        base: float = self._backoff * (2**attempt)
        return base + random.uniform(0.0, base / 4)

    def _request(self, texts: list[str]) -> list[list[float]]:
        import openai

        client = self._get_client()
        extra: dict[str, Any] = {}
        if self._request_dimensions:
            extra["dimensions"] = self._dim
        last: Exception | None = None
        timeouts = 0
        for attempt in range(self._max_retries + 1):
            retry_after: str | None = None
            try:
                # the SDK's client sends it (auth, base URL, errors); the reply is read as
                # the JSON it is: the SDK's typed objects cost 122 ms of CPU per 64 vectors
                # of 1,024 floats, plain JSON 19 ms (docs/benchmarks/scale.md, "Reading an
                # embedder's reply")
                response = client.post(
                    "/embeddings",
                    body={
                        "model": self._model,
                        "input": texts,
                        "encoding_format": "float",
                        **extra,
                    },
                    cast_to=object,
                )
                return self._vectors_of(response, len(texts))
            except openai.RateLimitError as exc:
                if _error_code(exc) == "insufficient_quota":
                    # Out of credit: retrying cannot help, fall back at once.
                    raise EmbeddingUnavailableError(
                        f"embedding quota exhausted at {self._where()}: {exc}"
                    ) from exc
                last, retry_after = exc, exc.response.headers.get("retry-after")
            except (openai.AuthenticationError, openai.PermissionDeniedError) as exc:
                raise ConfigurationError(
                    f"embedding API at {self._where()} refused the key ({exc.status_code}); "
                    "check api_key / OPENAI_API_KEY"
                ) from exc
            except openai.NotFoundError as exc:
                raise ConfigurationError(
                    f"embedding model {self._model!r} not found at {self._where()}: {exc}"
                ) from exc
            except openai.APIStatusError as exc:
                if exc.status_code < 500:
                    raise KnowledgeError(
                        f"embedding request rejected by {self._where()} ({exc.status_code}): {exc}"
                    ) from exc
                last, retry_after = exc, exc.response.headers.get("retry-after")
            except (openai.APIConnectionError, ReplyTooLarge) as exc:  # includes timeouts
                too_large = reply_too_large(exc)
                if too_large is not None:  # (it would be as long again)
                    raise KnowledgeError(
                        f"the embedding API at {self._where()} sent {too_large} for "
                        f"{len(texts)} texts (is it an OpenAI-compatible /embeddings?)"
                    ) from exc
                last = exc
                if isinstance(exc, openai.APITimeoutError):
                    timeouts += 1
                    if timeouts >= TIMEOUT_ATTEMPTS:
                        break
            if attempt < self._max_retries:
                delay = self._delay(attempt, retry_after)
                logger.warning(
                    "embedding request failed (%s); retry %d/%d in %.2fs",
                    last,
                    attempt + 1,
                    self._max_retries,
                    delay,
                )
                time.sleep(delay)
        raise EmbeddingUnavailableError(
            f"embedding API at {self._where()} unavailable after {attempt + 1} attempts: {last}"
        ) from last

    def _vectors_of(self, response: Any, count: int) -> list[list[float]]:
        """The vectors of an embeddings reply, in the order of the texts.

        Raises:
            KnowledgeError: The reply is not ``count`` embeddings (a server that is not an
                OpenAI-compatible embeddings API, or one that dropped inputs).
        """
        data = response.get("data") if isinstance(response, dict) else None
        if (
            not isinstance(data, list)
            or len(data) != count
            or not all(isinstance(d, dict) and isinstance(d.get("embedding"), list) for d in data)
        ):
            raise KnowledgeError(
                f"the embedding API at {self._where()} did not answer with {count} embeddings "
                f"(is it an OpenAI-compatible /embeddings?): {str(response)[:200]!r}"
            )
        rows = sorted(data, key=_index)
        return [row["embedding"] for row in rows]

    def _where(self) -> str:
        return self._base_url or "api.openai.com"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed passages in batches of ``batch_size``; returns ``(len(texts), dim)``.

        Raises:
            EmbeddingUnavailableError: Quota exhausted or the service stayed down.
            ConfigurationError: Bad key, unknown model, or vectors of an unexpected size.
            KnowledgeError: The server rejected the request (e.g. input too long).
        """
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        parts: list[Vectors] = []
        for start in range(0, len(texts), self._batch_size):
            # The OpenAI API rejects empty strings; a blank embeds like a space.
            batch = [t if t.strip() else " " for t in texts[start : start + self._batch_size]]
            rows = self._request(batch)
            if len(rows) != len(batch):
                raise KnowledgeError(
                    f"embedding API returned {len(rows)} vectors for {len(batch)} texts"
                )
            matrix = np.asarray(rows, dtype=np.float32)
            if matrix.ndim != 2:
                raise KnowledgeError("embedding API returned vectors of different lengths")
            if self._dim is None:
                self._dim = int(matrix.shape[1])
            elif matrix.shape[1] != self._dim:
                raise ConfigurationError(
                    f"embedding model {self._model!r} returned {matrix.shape[1]}-d vectors, "
                    f"configured dim is {self._dim}"
                )
            norms = np.linalg.norm(matrix, axis=1, keepdims=True)
            parts.append((matrix / np.maximum(norms, 1e-12)).astype(np.float32))
        return np.concatenate(parts, axis=0)

    def embed_query(self, text: str) -> Vectors:
        """Embed one query; returns ``(dim,)``."""
        return self.embed([text]).reshape(-1)


@functools.cache
def _bounded_http() -> type:
    """The SDK's default blocking HTTP client class, bounded (``openai`` is imported only
    when an embedder first sends)."""
    import openai

    class BoundedHttp(BoundedSend, openai.DefaultHttpxClient):  # type: ignore[misc]
        """The SDK's default HTTP client, its replies bounded (see ``bounded_http``)."""

    return BoundedHttp


def _error_code(exc: Any) -> str | None:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            code = inner.get("code") or inner.get("type")
            return str(code) if code is not None else None
    return None


def _index(row: dict[str, Any]) -> int:
    """An embedding's place among the inputs (0 when the server left it out)."""
    index = row.get("index")
    return index if isinstance(index, int) else 0
