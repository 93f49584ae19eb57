"""The ``retrieve`` tool and the knowledge agent (docs/design.md R9, R10).

Retrieval becomes a tool here, in the orchestration layer: the knowledge layer knows nothing
of tools or agents. The caller's identity reaches the search through the injected
:class:`RunContext`, never through a model-written argument.

Passages are numbered by the run's :class:`~shelfhand.core.citations.CitationLedger`: a second
``retrieve`` call of the same run goes on from the last number, and a passage that comes back
again keeps its first number, so ``[n]`` names one passage for the whole run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from pydantic import Field

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult, Usage
from shelfhand.core.tracing import current_span
from shelfhand.knowledge.analysis import SynonymTable
from shelfhand.knowledge.evidence.citations import format_passages, prepare_evidence, to_citations
from shelfhand.knowledge.retrieval.hybrid import MAX_QUERY_CHARS
from shelfhand.knowledge.retrieval.spans import record_conflicts
from shelfhand.knowledge.types import SearchHit
from shelfhand.tools.tool import ExampleSpec, Tool, ToolOutput, tool

from .answer_check import no_model_answer
from .fallbacks import NOT_CONFIGURED, not_covered
from .rewrite import carried
from .side_calls import side_usage

DEFAULT_TOP_K = 3
HARD_MAX_TOP_K = 8
RETRIEVE_TIMEOUT = 30.0
"""Seconds the ``retrieve`` tool waits for a search, besides its reranker's own ``timeout``
(a search with an LLM reranker may wait that long for the ranking, then keeps the fused
order)."""

RETRIEVE_DESCRIPTION = (
    "Search the knowledge base (product documents, policies, manuals) for numbered passages. "
    "Call it before answering questions about products, policies, procedures, error codes or "
    "anything the documents may cover; put names, codes and key terms in the query. Cite the "
    "passages you use as [1][2]. If nothing relevant comes back, say the documents do not "
    "cover it instead of guessing."
)


class Searcher(Protocol):
    """What the retrieve tool needs from a knowledge base."""

    def search(
        self, query: str, *, k: int = 5, user: UserContext | None = None
    ) -> list[SearchHit]: ...


def clamp_top_k(top_k: int | None) -> int:
    if top_k is None or top_k <= 0:
        return DEFAULT_TOP_K
    return min(top_k, HARD_MAX_TOP_K)


def make_retrieve_tool(
    kb: Searcher | None,
    *,
    compress_tokens: int | None = None,
    examples: Sequence[ExampleSpec] = (),
) -> Tool[Any, Any]:
    """The ``retrieve`` tool over ``kb``; with ``kb=None`` it answers "not configured".

    ``examples``: questions the documents of ``kb`` answer (see ``@tool(examples=...)``),
    shown to the model with the description.

    The tool waits :data:`RETRIEVE_TIMEOUT` seconds for a search, plus the reranker's
    timeout (``kb.rerank_timeout``, when ``kb`` has one): a slow ranking ends in the search's
    fused order, not in a timed-out tool call that the model answers with another search.

    Passages that disagree with each other (or with a passage an earlier call of the run
    returned) are flagged: a ``Note:`` line after the passages and ``conflicts_with`` /
    ``conflict_note`` on the citations. With ``compress_tokens`` each passage keeps only the
    sentences that answer the query, within that many tokens (see
    :mod:`shelfhand.knowledge.evidence.compress`).
    """

    async def retrieve(
        run: RunContext,
        query: Annotated[str, Field(max_length=MAX_QUERY_CHARS)],
        top_k: int = DEFAULT_TOP_K,
    ) -> ToolOutput:
        """Search the knowledge base.

        Args:
            query: What to look for; include product names, model numbers and error codes.
            top_k: How many passages to return (default 3, at most 8).
        """
        if kb is None:
            return ToolOutput(content=NOT_CONFIGURED)
        # the search is CPU-bound (segmentation, embedding): keep it off the event loop
        with side_usage(run.delegated):  # (an LLM reranker's call: the run's usage)
            hits = await asyncio.to_thread(kb.search, query, k=clamp_top_k(top_k), user=run.user)
        earlier = run.citations.citations
        numbered = run.citations.number(to_citations(hits))
        citations = prepare_evidence(
            numbered, query, earlier=earlier, compress_tokens=compress_tokens
        )
        record_conflicts(current_span(), citations)  # on this call's span, when traced
        return ToolOutput(content=format_passages(citations), citations=tuple(citations))

    # never cached: a document ingested a second ago must be findable now, and search is cheap.
    # Never shared between identical concurrent calls either: the numbers belong to one run.
    # A process's first search loads the segmenter and opens the indexes (seconds on a busy
    # machine, and with up-front retrieval it is the run's first step): more than the
    # toolkit's default 5 s before it counts as hung.
    found = tool(
        name="retrieve",
        description=RETRIEVE_DESCRIPTION,
        read_only=True,
        cache_ttl=0,
        timeout=RETRIEVE_TIMEOUT + float(getattr(kb, "rerank_timeout", 0.0)),
        examples=examples,
    )(retrieve)
    found.dedup = False
    return found


_ONE_SEARCH = Usage(retrievals=1)
"""What a :class:`KnowledgeAgent` run uses: one search (and an LLM reranker's call, if any)."""


class KnowledgeAgent:
    """Query in, cited passages out: the same retriever as the chat agent, with no model (an
    LLM reranker's call aside, which is in the result's usage).

    Disagreeing passages are flagged as in ``retrieve``; with nothing found the output is
    "the documents do not cover this" in the question's language
    (:func:`~shelfhand.agent.fallbacks.not_covered`).

    With ``extractive=True`` the output is the passages' best sentences for the question,
    with their citations (:func:`~shelfhand.agent.extractive.extractive_answer`, the result
    marked ``extractive``), or "the documents do not cover this" when no passage is about it;
    otherwise the whole passages.
    """

    def __init__(
        self,
        kb: Searcher,
        *,
        name: str = "knowledge",
        top_k: int = 5,
        compress_tokens: int | None = None,
        extractive: bool = False,
        synonyms: SynonymTable | None = None,
    ) -> None:
        self.kb = kb
        self.synonyms = synonyms
        self.extractive = extractive
        self.name = name
        self.top_k = max(1, top_k)
        self.compress_tokens = compress_tokens

    async def run(
        self,
        prompt: str | Message,
        *,
        context: UserContext | None = None,
        history: Sequence[Message] = (),
        deps: Any = None,
        trace_id: str | None = None,
    ) -> RunResult:
        query = prompt if isinstance(prompt, str) else prompt.text
        run = RunContext.start(agent_name=self.name, user=context, deps=deps, trace_id=trace_id)
        # a follow-up pointing back ("怎么修？" after "E-203 是什么故障？") is searched with the
        # question it follows, as a chat with a model searches it up front
        carry = carried(query, history) if history else None
        searched = query if carry is None else carry.query
        with side_usage() as ranking:  # (an LLM reranker's call: the run's usage)
            hits = await asyncio.to_thread(self.kb.search, searched, k=self.top_k, user=run.user)
        numbered = run.citations.number(to_citations(hits))
        citations = tuple(
            prepare_evidence(numbered, searched, compress_tokens=self.compress_tokens)
        )
        record_conflicts(current_span(), citations)  # on the caller's span (a turn's), if traced
        # no model reads this: a person is told plainly that the documents have nothing on it
        output = format_passages(citations) if citations else not_covered(query)
        messages = (Message.user(query), Message.assistant(output, citations=citations))
        result = RunResult(
            output=output,
            messages=messages,
            citations=citations,
            trace_id=run.trace_id,
            usage=_ONE_SEARCH + ranking.total,
        )
        if self.extractive and citations:
            asked = None if carry is None else carry.query
            return no_model_answer(result, query, synonyms=self.synonyms, asked=asked)
        return result

    def run_sync(
        self,
        prompt: str | Message,
        *,
        context: UserContext | None = None,
        history: Sequence[Message] = (),
    ) -> RunResult:
        return asyncio.run(self.run(prompt, context=context, history=history))


retrieve_tool = make_retrieve_tool
"""The ``retrieve`` tool over a knowledge base: ``Toolkit([retrieve_tool(kb)])`` (the public
name of :func:`make_retrieve_tool`)."""
