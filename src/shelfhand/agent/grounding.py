"""Up-front retrieval: grounded answers that do not depend on the model calling ``retrieve``.

An agent answers in one of three retrieval modes (:data:`~shelfhand.core.settings.AnswerRetrieval`):

- ``tool``: the model decides whether to call ``retrieve`` (small models often do not);
- ``context``: before the model is first asked, the framework calls ``retrieve`` with the
  user's message and the numbered passages are in the prompt; the model is not offered
  ``retrieve`` at all;
- ``both``: the first retrieval up front, further ones by tool.

The up-front call is an ordinary governed call of the toolkit's ``retrieve`` tool: the same
code path as a call the model makes, so the caller's identity (and so the ACL) comes from the
run's injected context, the call is audited, and its passages are numbered by the run's
:class:`~shelfhand.core.citations.CitationLedger` like any other. The transcript records it as
a call and its result (marked ``metadata["upfront"]``); the model is shown the passages as text
in the user's turn, before the question (:func:`as_model_sees`): a small model shown a tool
exchange it never made imitates it and answers with tool-call JSON.

With a :class:`~shelfhand.agent.rewrite.QueryRewriter` (setting ``query_rewrite``), a message
that follows earlier turns is first rewritten by the model into a self-contained query
("and the price?" → "Lumen X1 price"); the rewrite, or why the message was kept, is recorded
in the up-front message's ``metadata["rewrite"]``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from shelfhand.core.context import RunContext
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.ids import new_id
from shelfhand.core.messages import Citation, Message, TextBlock, ToolCallBlock
from shelfhand.tools.toolkit import CallReport, Toolkit

from .rewrite import QueryRewriter, Rewrite, carried

__all__ = [
    "RETRIEVE_TOOL",
    "UPFRONT",
    "UpfrontPlan",
    "UpfrontRetrieval",
    "as_model_sees",
    "rewritten_query",
    "searched_as_typed",
]

RETRIEVE_TOOL = "retrieve"
UPFRONT = "upfront"
"""Metadata key set (``True``) on the assistant message holding the up-front calls: the
framework made them, not the model."""
MAX_QUERY_CHARS = 1000
PASSAGES_INTRO = (
    "From the knowledge base, for the question below (cite the passages you use by their "
    "number, like [1]):"
)
FAILED_INTRO = "Searching the knowledge base for the question below failed:"
QUESTION_LABEL = "Question: "
UPFRONT_TOP_K = 5
"""Passages the up-front retrieval fetches: the five an answer without a model shows too (the
``retrieve`` tool's own default, for calls the model makes, is three). With three, the English
"How long is the warranty?" over the Chinese samples got the FAQ and spec-sheet pointers and
neither policy's warranty period; with five it gets both versions, flagged."""
REWRITE = "rewrite"
"""Metadata key of the up-front message: ``{"original", "query"}`` when the query was
rewritten, ``{"original", "reason"}`` when the rewrite was not used, ``{"original", "query",
"carried": True}`` (and the model's ``reason``, when it was asked) when the message, pointing
back, was searched with the earlier question (:func:`~.rewrite.carried`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpfrontPlan:
    calls: list[ToolCallBlock]
    rewrite: Rewrite | None = None

    def metadata(self) -> dict[str, object]:
        """What the up-front message records: always ``upfront``, and the rewrite."""
        out: dict[str, object] = {UPFRONT: True}
        r = self.rewrite
        if r is not None and r.carried:
            record: dict[str, object] = {"original": r.original, "query": r.query, "carried": True}
            if r.reason is not None:  # the model's rewrite, not used
                record["reason"] = r.reason
            out[REWRITE] = record
        elif r is not None and r.rewritten:
            out[REWRITE] = {"original": r.original, "query": r.query}
        elif r is not None and r.reason is not None:
            out[REWRITE] = {"original": r.original, "reason": r.reason}
        return out


def rewritten_query(messages: Sequence[Message]) -> str | None:
    """The self-contained query a run's message was searched with up front, as its up-front
    message records it (:meth:`UpfrontPlan.metadata`: the model's rewrite, or the earlier
    question carried), or ``None`` when it was searched as typed."""
    for m in messages:
        if m.metadata.get(UPFRONT):
            rewrite = m.metadata.get(REWRITE)
            query = rewrite.get("query") if isinstance(rewrite, dict) else None
            return query if isinstance(query, str) and query.strip() else None
    return None


def searched_as_typed(messages: Sequence[Message], citations: Sequence[Citation]) -> bool:
    """Whether ``citations`` (a run's passages) were all found by its up-front search, made
    with the message as typed (not rewritten, no earlier question carried): their relevance
    is then the question's own, as a search without a model's is (the extractive answer's
    ``across``); not when the model searched again and found more."""
    if not citations or rewritten_query(messages) is not None:
        return False
    for at, m in enumerate(messages[:-1]):
        if m.metadata.get(UPFRONT):
            found = {c.index for r in messages[at + 1].tool_results for c in r.citations}
            return all(c.index in found for c in citations)
    return False


class UpfrontRetrieval:
    """Calls ``retrieve`` with the user's message, through ``toolkit`` (governed, audited).

    Args:
        toolkit: A toolkit holding the ``retrieve`` tool; it need not be the one the model is
            offered (``context`` mode hides ``retrieve`` from the model).
        top_k: Passages to fetch (default :data:`UPFRONT_TOP_K`; ``None``: the tool's own
            default).
        tool_name: The retrieval tool's name.
        rewriter: Rewrites a follow-up message into a self-contained query (``None``: the
            message is the query).

    Raises:
        ValueError: ``toolkit`` has no such tool.
    """

    def __init__(
        self,
        toolkit: Toolkit,
        *,
        top_k: int | None = UPFRONT_TOP_K,
        tool_name: str = RETRIEVE_TOOL,
        rewriter: QueryRewriter | None = None,
    ) -> None:
        if toolkit.get(tool_name) is None:
            raise InvalidArgumentError(
                f"up-front retrieval needs a {tool_name!r} tool in the toolkit "
                "(add kb.as_tool(), or use retrieval='tool')"
            )
        self.toolkit = toolkit
        self.top_k = top_k
        self.tool_name = tool_name
        self.rewriter = rewriter

    async def plan(self, prompt: Message, history: Sequence[Message] = ()) -> UpfrontPlan:
        """The calls for ``prompt``: with ``history``, its query rewritten when a rewriter is
        set, else (or when the rewrite is not used: the reason is kept) the message with the
        earlier question it points back to (:func:`~.rewrite.carried`), else the message."""
        message = prompt.text.strip()
        if not message or not history:
            return UpfrontPlan(calls=self.calls(prompt))
        rewrite = None if self.rewriter is None else await self.rewriter.rewrite(message, history)
        if rewrite is None or not rewrite.rewritten:
            # no model to ask, or its rewrite not used (why is kept): a message pointing back
            # ("它的光源能用多久？") is searched with the earlier question it follows
            carry = carried(message, history)
            if carry is not None:
                rewrite = replace(carry, reason=None if rewrite is None else rewrite.reason)
        if rewrite is None:
            return UpfrontPlan(calls=self.calls(prompt))
        return UpfrontPlan(calls=self._calls_for(rewrite.query), rewrite=rewrite)

    def calls(self, prompt: Message) -> list[ToolCallBlock]:
        """The calls to make for ``prompt``: one retrieval, none for a message without text."""
        return self._calls_for(prompt.text)

    def _calls_for(self, text: str) -> list[ToolCallBlock]:
        query = text.strip()[:MAX_QUERY_CHARS]
        if not query:
            return []
        arguments: dict[str, object] = {"query": query}
        if self.top_k is not None:
            arguments["top_k"] = self.top_k
        call = ToolCallBlock(
            id=f"call_{new_id()}",
            name=self.tool_name,
            arguments=json.dumps(arguments, ensure_ascii=False),
        )
        return [call]

    async def execute(self, call: ToolCallBlock, run: RunContext) -> CallReport:
        """Run ``call`` for ``run.user`` through the toolkit (a failure is an error result)."""
        return await self.toolkit.execute(call, run)


def as_model_sees(messages: Sequence[Message]) -> list[Message]:
    """``messages`` as the model is shown them: each up-front call and its result become text
    at the start of the user message they answer (a user message of their own if none is
    right before them). Other messages are passed through unchanged."""
    out: list[Message] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        if not (m.metadata.get(UPFRONT) and i + 1 < len(messages) and m.role == "assistant"):
            out.append(m)
            i += 1
            continue
        results = messages[i + 1].tool_results
        intro = FAILED_INTRO if any(r.is_error for r in results) else PASSAGES_INTRO
        block = intro + "\n\n" + "\n\n".join(r.content for r in results)
        if out and out[-1].role == "user":
            question = out[-1]
            head = TextBlock(text=f"{block}\n\n{QUESTION_LABEL}")
            out[-1] = replace(question, content=(head, *question.content))
        else:
            out.append(Message.user(block))
        i += 2
    return out
