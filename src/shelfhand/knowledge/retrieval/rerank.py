"""Rerank (docs/design.md R7): a second opinion on the fused candidates, off by default.

A :class:`Reranker` reorders the candidates a search found; the knowledge base asks it for the
best ``top_n`` of ``rerank_candidates`` fused hits and cuts to ``k``
(:class:`RerankStage`). Rerankers may fail: :class:`RerankStage` then keeps the fused order
and says why (the reason is logged once per kind and returned with the timings), never
raising to the user.

:class:`HttpReranker` speaks the ``/rerank`` endpoint shared by Jina, Cohere, vLLM and
Hugging Face TEI::

    POST {base}/rerank  {"model", "query", "documents": [str], "top_n"}
      → {"results": [{"index": 0, "relevance_score": 0.93}, ...]}   (Jina, Cohere, vLLM)
    POST {base}/rerank  {"query", "texts": [str]}
      → [{"index": 0, "score": 0.93}, ...]                           (TEI)

It sends the first shape, and switches to TEI's when the server says ``texts`` is missing;
either response shape is read. The LLM reranker over the chat model lives in
:mod:`shelfhand.agent.llm_rerank` (the knowledge layer does not know about models).
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, runtime_checkable

import httpx

from shelfhand.core.breaker import CircuitBreaker
from shelfhand.core.errors import BudgetExceededError, InvalidArgumentError, RerankError
from shelfhand.knowledge.types import SearchHit

__all__ = [
    "HttpReranker",
    "RerankError",
    "RerankOutcome",
    "RerankStage",
    "Reranker",
    "passage_text",
]

logger = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 1_000_000
MAX_DOCUMENT_CHARS = 2000


@runtime_checkable
class Reranker(Protocol):
    """Reorders search hits for a query. Synchronous: searches run in a worker thread."""

    @property
    def name(self) -> str: ...

    def rerank(self, query: str, hits: Sequence[SearchHit], top_n: int) -> list[SearchHit]:
        """The best ``top_n`` of ``hits`` for ``query``, best first.

        Raises:
            RerankError: It could not rank (the caller keeps the fused order).
        """
        ...


def passage_text(hit: SearchHit, max_chars: int = MAX_DOCUMENT_CHARS) -> str:
    """What a reranker is shown of a hit: its title and section, then its text, cut."""
    chunk = hit.chunk
    head = " > ".join(p for p in (chunk.title, *chunk.section_path) if p)
    body = chunk.text if not head else f"{head}\n{chunk.text}"
    return body[:max_chars]


def complete(
    order: Sequence[int], hits: Sequence[SearchHit], top_n: int, scores: Sequence[float | None]
) -> list[SearchHit]:
    """``hits`` in ``order`` (indexes, best first, each with its score), then the hits the
    ranking left out in their fused order, cut to ``top_n``."""
    out: list[SearchHit] = []
    seen: set[int] = set()
    for index, score in zip(order, scores, strict=True):
        if index in seen or not 0 <= index < len(hits):
            continue
        seen.add(index)
        hit = hits[index]
        out.append(replace(hit, rerank_score=score) if score is not None else hit)
    out.extend(h for i, h in enumerate(hits) if i not in seen)
    return out[: max(0, top_n)]


class HttpReranker:
    """A ``/rerank`` endpoint client (Jina, Cohere, vLLM, TEI).

    Args:
        url: The endpoint's base (``http://host:8080`` or ``…/v1``); ``/rerank`` is added
            unless the URL already ends with it.
        model: The reranker model name sent as ``model`` (``None``: not sent).
        api_key: Sent as a bearer token; never logged or shown in ``repr``.
        timeout: Seconds the whole request may take (connect, send, answer).
        max_response_bytes: A longer answer is refused as malformed.
        max_document_chars: Each passage is cut to this many characters.
        client: An ``httpx.Client`` to use (tests); by default one is made and reused.
    """

    def __init__(
        self,
        url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 5.0,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        max_document_chars: int = MAX_DOCUMENT_CHARS,
        client: httpx.Client | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise InvalidArgumentError(
                f"rerank URL must start with http:// or https://, not {url!r}"
            )
        if timeout <= 0:
            raise InvalidArgumentError("rerank timeout must be positive")
        base = url.rstrip("/")
        self.url = base if base.endswith("/rerank") else f"{base}/rerank"
        self.model = model
        self.__api_key = api_key
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self.max_document_chars = max_document_chars
        self._client = client or httpx.Client(timeout=timeout, follow_redirects=False)
        self._texts_shape = False  # learnt: the server wants TEI's {"query", "texts"}
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show the key
        return f"HttpReranker(url={self.url!r}, model={self.model!r})"

    @property
    def name(self) -> str:
        return f"endpoint:{self.model or self.url}"

    def rerank(self, query: str, hits: Sequence[SearchHit], top_n: int) -> list[SearchHit]:
        if not hits:
            return []
        documents = [passage_text(h, self.max_document_chars) for h in hits]
        order, scores = self._ranked(query, documents, top_n)
        return complete(order, hits, top_n, scores)

    def scores(self, query: str, documents: Sequence[str]) -> list[float | None]:
        """The endpoint's relevance of each of ``documents`` to ``query``, in their order
        (``None`` for one the answer left out).

        Raises:
            RerankError: The endpoint failed, timed out or answered something unreadable.
        """
        if not documents:
            return []
        cut = [d[: self.max_document_chars] for d in documents]
        order, scores = self._ranked(query, cut, len(cut))
        by_index: dict[int, float | None] = dict(zip(order, scores, strict=True))
        return [by_index.get(i) for i in range(len(cut))]

    def _ranked(
        self, query: str, documents: list[str], top_n: int
    ) -> tuple[list[int], list[float | None]]:
        deadline = time.monotonic() + self.timeout
        status, body = self._post(self._payload(query, documents, top_n), deadline)
        if status in (400, 422) and not self._texts_shape and "texts" in body.lower():
            with self._lock:
                self._texts_shape = True
            status, body = self._post(self._payload(query, documents, top_n), deadline)
        if status != 200:
            raise RerankError(f"rerank endpoint answered HTTP {status}: {body[:200]!r}")
        return parse_rerank_response(body, len(documents))

    def _payload(self, query: str, documents: list[str], top_n: int) -> dict[str, Any]:
        if self._texts_shape:
            return {"query": query, "texts": documents, "truncate": True}
        payload: dict[str, Any] = {"query": query, "documents": documents, "top_n": top_n}
        if self.model:
            payload["model"] = self.model
        return payload

    def _post(self, payload: dict[str, Any], deadline: float) -> tuple[int, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.__api_key:
            headers["Authorization"] = f"Bearer {self.__api_key}"
        left = deadline - time.monotonic()
        if left <= 0:
            raise RerankError(f"rerank endpoint timed out after {self.timeout:g} s")
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        try:
            with self._client.stream(
                "POST", self.url, content=data, headers=headers, timeout=left
            ) as response:
                received = bytearray()
                for piece in response.iter_bytes():
                    received.extend(piece)
                    if len(received) > self.max_response_bytes:
                        raise RerankError(
                            f"rerank answer longer than {self.max_response_bytes} bytes"
                        )
                    if time.monotonic() > deadline:
                        raise RerankError(f"rerank endpoint timed out after {self.timeout:g} s")
                return response.status_code, received.decode("utf-8", errors="replace")
        except httpx.TimeoutException:
            raise RerankError(f"rerank endpoint timed out after {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise RerankError(f"rerank endpoint unreachable: {type(exc).__name__}") from None

    def close(self) -> None:
        self._client.close()


def parse_rerank_response(body: str, count: int) -> tuple[list[int], list[float | None]]:
    """Indexes (best first) and scores from either response shape.

    Raises:
        RerankError: Not JSON, neither shape, or no usable entry.
    """
    try:
        data = json.loads(body)
    except (json.JSONDecodeError, RecursionError):
        raise RerankError(f"rerank answer is not JSON: {body[:80]!r}") from None
    entries = data.get("results") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise RerankError("rerank answer has no results list")
    ranked: list[tuple[float, int, int]] = []  # (score, position, index)
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            continue
        index = entry.get("index")
        score = entry.get("relevance_score", entry.get("score"))
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < count
            or isinstance(score, bool)
            or not isinstance(score, int | float)
            or not math.isfinite(score)
        ):
            continue
        ranked.append((float(score), position, index))
    if not ranked:
        raise RerankError("rerank answer has no valid results (index and score)")
    ranked.sort(key=lambda r: (-r[0], r[1]))
    return [r[2] for r in ranked], [r[0] for r in ranked]


@dataclass(frozen=True, slots=True, kw_only=True)
class RerankOutcome:
    hits: list[SearchHit]
    ms: float
    reason: str | None = None
    """Why the fused order was kept, when the reranker failed."""


class RerankStage:
    """Runs a reranker over fused candidates and falls back to the fused order on failure.

    After ``breaker_failures`` failures in a row (errors, timeouts, unreadable answers) the
    reranker is not asked for ``breaker_cooldown`` seconds: searches keep the fused order at
    once, saying so, instead of each waiting out the timeout of a reranker that is down; then
    one search tries it again. A search refused by the caller's budget (an LLM reranker's
    call) keeps the fused order too, without counting against the reranker.

    Args:
        reranker: The reranker.
        candidates: How many fused hits are fetched and shown to it (at least ``k``).
        breaker_failures: Failures in a row that pause the reranker.
        breaker_cooldown: Seconds a paused reranker is left alone.
    """

    def __init__(
        self,
        reranker: Reranker,
        *,
        candidates: int = 20,
        breaker_failures: int = 3,
        breaker_cooldown: float = 30.0,
    ) -> None:
        if candidates < 1:
            raise InvalidArgumentError("rerank candidates must be at least 1")
        self.reranker = reranker
        self.candidates = candidates
        self.breaker_failures = breaker_failures
        self.breaker = CircuitBreaker(
            "rerank", trip_after=breaker_failures, reset_after=breaker_cooldown
        )
        """Pauses the reranker after failures in a row (used under ``_lock``: a
        :class:`~shelfhand.core.breaker.CircuitBreaker` is not thread-safe)."""
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def fetch_count(self, k: int) -> int:
        return max(k, self.candidates)

    def run(self, query: str, hits: Sequence[SearchHit], k: int) -> RerankOutcome:
        """The best ``k`` of ``hits``: reranked, or in fused order with the reason.

        Hits that contain an exact identifier of the query (``SearchHit.exact``) stay ahead of
        the others, as the fused order has them: a reranker does not demote them.
        """
        started = time.perf_counter()
        if len(hits) <= 1:
            return RerankOutcome(hits=list(hits[:k]), ms=0.0)
        name = self.reranker.name
        with self._lock:
            wait = self.breaker.before(time.monotonic())
        reason: str | None = None
        if wait is not None:
            ranked = list(hits)
            reason = (
                f"rerank ({name}) paused after {self.breaker_failures} failures in a row, "
                f"fused order kept (tried again in {max(1, math.ceil(wait))} s)"
            )
        else:
            try:  # the whole order, so exact-identifier hits can be kept ahead below
                ranked = self.reranker.rerank(query, hits, len(hits))
                with self._lock:
                    self.breaker.success(time.monotonic())
            except BudgetExceededError as exc:  # the caller's budget: no sign of ill health
                with self._lock:
                    self.breaker.neutral()
                ranked = list(hits)
                reason = f"rerank ({name}) not asked, fused order kept: no budget left: {exc}"
            except Exception as exc:  # any failure keeps the fused order
                with self._lock:
                    self.breaker.failure(time.monotonic())
                ranked = list(hits)
                reason = f"rerank ({name}) failed, fused order kept: {exc}"
                self._warn_once(type(exc).__name__ + str(exc)[:40], reason)
        ranked = sorted(ranked, key=lambda h: not getattr(h, "exact", False))  # stable
        ms = (time.perf_counter() - started) * 1000
        return RerankOutcome(hits=ranked[:k], ms=ms, reason=reason)

    def _warn_once(self, kind: str, message: str) -> None:
        with self._lock:
            first = kind not in self._warned
            self._warned.add(kind)
        if first:
            logger.warning("%s", message)
        else:
            logger.debug("%s", message)
