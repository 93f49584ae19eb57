"""LLM-as-reranker (docs/design.md R7): the chat model orders the fused candidates.

The model is shown the query and the candidates (numbered, each cut to a few hundred
characters) and asked for the numbers of the helpful passages, best first, as a JSON array.
Small local models answer loosely, so the answer is read leniently (:func:`parse_ranking`):
a JSON array or object, numbers in brackets, or plain numbers in the text. Passages it leaves
out follow in their fused order. An answer without a usable number, a model error or a
timeout raises :class:`~shelfhand.knowledge.retrieval.rerank.RerankError`, and the knowledge base keeps
the fused order with that reason.

Searches run in worker threads and the reranker's interface is synchronous, while chat models
are asynchronous: the reranker runs its model calls on an event loop of its own, in one
background thread, so give it a model object of its own (its HTTP client belongs to that loop).

Its calls are model calls like the loop's (:func:`~.side_calls.side_request`): run in the
caller's context (a search carries it into its thread, and the call into this loop), each is
reserved against the caller's budget, traced as a ``chat`` span under the search's, counted
for ``/metrics``, and its usage added to the run's by the ``retrieve`` tool. No budget left:
:class:`~shelfhand.core.errors.BudgetExceededError` (the search keeps the fused order, with
that reason, and does not count it as the reranker's failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections.abc import Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import BudgetExceededError
from shelfhand.core.messages import Message
from shelfhand.knowledge.retrieval.rerank import RerankError, complete, passage_text
from shelfhand.knowledge.types import SearchHit
from shelfhand.models.base import ChatModel

from .side_calls import side_request

if TYPE_CHECKING:
    from shelfhand.core.pricing import ModelPrice

__all__ = ["LlmReranker", "parse_ranking", "ranking_prompt"]

SYSTEM = (
    "You rank search results. Given a question and numbered passages, reply with the numbers "
    "of the passages that help answer the question, most helpful first, as a JSON array of "
    "numbers, e.g. [3, 1]. Reply with the array only."
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)
_ARRAY = re.compile(r"\[[^\[\]]*\]")
_NUMBER = re.compile(r"(?<![\d.\-])\d{1,3}(?![\d.])")
_REPLY_TOKENS = 64
"""What a ranking's answer is reserved for: a short array of numbers."""


def ranking_prompt(query: str, hits: Sequence[SearchHit], max_chars: int) -> list[Message]:
    """The short conversation that asks the model for an order."""
    passages = "\n\n".join(
        f"[{i}] " + " ".join(passage_text(h, max_chars).split())
        for i, h in enumerate(hits, start=1)
    )
    user = (
        f"Question: {query}\n\nPassages:\n{passages}\n\n"
        f"Which passages help answer the question? Reply with their numbers (1 to {len(hits)}), "
        "most helpful first, as a JSON array."
    )
    return [Message.system(SYSTEM), Message.user(user)]


def parse_ranking(answer: str, count: int) -> list[int]:
    """Passage numbers (1-based, best first, each once, within ``1..count``) from a model's
    answer: a JSON array (of numbers, numeric strings or objects with ``id``/``index``/
    ``passage`` and optional ``score``), an object holding such an array, or else the numbers
    in the text in order. Empty when there is none."""
    text = answer.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    arrays = _ARRAY.findall(text)
    pieces = [text, *arrays] if len(arrays) == 1 else [text]
    for piece in pieces:
        try:
            data = json.loads(piece)
        except (ValueError, RecursionError):
            continue
        valid = _valid(_from_json(data), count)
        if valid:
            return valid
    return _valid([int(n) for n in _NUMBER.findall(text)], count)


def _from_json(data: Any) -> list[int]:
    if isinstance(data, dict):
        for value in data.values():
            if isinstance(value, list):
                return _from_json(value)
        return []
    if not isinstance(data, list):
        return [data] if isinstance(data, int) and not isinstance(data, bool) else []
    scored: list[tuple[float, int, int]] = []
    for position, item in enumerate(data):
        number: Any = item
        score = 0.0
        if isinstance(item, dict):
            number = next(
                (item[key] for key in ("id", "index", "passage", "number", "n") if key in item),
                None,
            )
            raw_score = item.get("score", item.get("relevance", 0.0))
            score = float(raw_score) if isinstance(raw_score, int | float) else 0.0
        if isinstance(number, str) and number.strip().strip("[]").isdigit():
            number = int(number.strip().strip("[]"))
        if isinstance(number, int) and not isinstance(number, bool):
            scored.append((score, position, number))
    if any(s != 0.0 for s, _, _ in scored):
        scored.sort(key=lambda t: (-t[0], t[1]))
    return [n for _, _, n in scored]


def _valid(numbers: Sequence[int], count: int) -> list[int]:
    out: list[int] = []
    for n in numbers:
        if 1 <= n <= count and n not in out:
            out.append(n)
    return out


class LlmReranker:
    """Orders candidates with a chat model; see the module docstring.

    Args:
        model: The chat model (an object of its own: it is called on this reranker's loop).
        timeout: Seconds the model may take to answer.
        max_passage_chars: Each passage is cut to this many characters in the prompt.
        max_candidates: At most this many candidates are shown (the rest follow unranked).
        price: The model's price (setting ``prices``), for the call's cost in the run's usage.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        timeout: float = 20.0,
        max_passage_chars: int = 300,
        max_candidates: int = 10,
        price: ModelPrice | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError("rerank timeout must be positive")
        self.model = model
        self.timeout = timeout
        self.max_passage_chars = max_passage_chars
        self.max_candidates = max(1, max_candidates)
        self.price = price
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"llm:{self.model.name}"

    def rerank(self, query: str, hits: Sequence[SearchHit], top_n: int) -> list[SearchHit]:
        if not hits:
            return []
        shown = list(hits[: self.max_candidates])
        answer = self._ask(ranking_prompt(query, shown, self.max_passage_chars))
        numbers = parse_ranking(answer, len(shown))
        if not numbers:
            raise RerankError(f"the model's answer named no passage: {answer[:80]!r}")
        order = [n - 1 for n in numbers]
        return complete(order, hits, top_n, [None] * len(order))

    def _ask(self, messages: list[Message]) -> str:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(self._request(messages), loop)
        try:
            return future.result(timeout=self.timeout + 1.0)
        except (FutureTimeout, TimeoutError):
            future.cancel()
            raise RerankError(f"the model did not rank within {self.timeout:g} s") from None
        except (RerankError, BudgetExceededError):  # (the caller's budget: not the model's fault)
            raise
        except Exception as exc:
            raise RerankError(f"the model failed: {type(exc).__name__}: {exc}") from None

    async def _request(self, messages: list[Message]) -> str:
        try:
            response = await side_request(
                self.model,
                messages,
                reply_tokens=_REPLY_TOKENS,
                price=self.price,
                timeout=self.timeout,
                purpose="rerank",
            )
        except TimeoutError:
            raise RerankError(f"the model did not rank within {self.timeout:g} s") from None
        return response.message.text

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._start_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="shelfhand-llm-rerank", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def close(self) -> None:
        """Stop the background loop (closing the model's connections first, if it can)."""
        with self._start_lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        aclose = getattr(self.model, "aclose", None)
        if callable(aclose):
            with contextlib.suppress(Exception):  # closing connections is best effort
                asyncio.run_coroutine_threadsafe(aclose(), loop).result(timeout=5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
