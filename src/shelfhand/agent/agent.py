"""The ReAct agent (docs/design.md K2, K3).

One loop (:mod:`.loop`) serves ``run`` (returns a :class:`RunResult`) and ``stream`` (yields
events): the model is asked for a reply; tool calls in it are executed through the
:class:`Toolkit` (and its governance pipeline) and their results fed back; the first reply
without tool calls is the answer. Model-facing problems (unknown tool, bad arguments, a raising
tool, a timeout, an open circuit) come back to the model as error results and the loop goes on;
caller-facing ones (the model provider failing) propagate.

Calls of tools marked ``confirm=True`` pause the run: with an :class:`Approvals` registry the
stream yields ``ApprovalRequired`` and waits for ``approve``/``reject``; without one, such calls
are not run and the model is told they need confirmation (a run never hangs on a human that
nobody asked).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Unpack

from shelfhand.core.context import RunContext
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.events import Event, Final
from shelfhand.core.messages import Message
from shelfhand.core.results import RunResult
from shelfhand.core.settings import AnswerRetrieval, check_answer_retrieval
from shelfhand.models.base import ChatModel
from shelfhand.tools.toolkit import Toolkit

from .answer_check import AnswerCheck, replacement
from .grounding import RETRIEVE_TOOL, UpfrontRetrieval
from .loop import AgentLoop
from .memory import ConversationMemory
from .rewrite import QueryRewriter
from .runs import RunOptions, run_closing, run_to_final
from .step_events import SILENT, STEPS, STEPS_AND_TEXT, EventSink

if TYPE_CHECKING:
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.tools.approvals import Approvals

__all__ = ["DEFAULT_SYSTEM_PROMPT", "Agent", "RunResult"]

logger = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful assistant. Use the tools when they help answer; answer in the user's "
    "language. When you use passages returned by a tool, cite them by number like [1][2]. "
    "If the documents do not contain the answer, say so instead of guessing."
)


class Agent(AgentLoop):
    """A tool-using agent.

    Args:
        name: shown in logs and traces.
        model: the chat model.
        toolkit: the tools the model may call (filtered per caller's permission).
        system_prompt: the base instructions.
        max_iters: the most model calls in one run; when reached, the run stops with an
            honest answer saying so.
        max_concurrency: the most tool calls of one reply executing at the same time (the
            fan-out cap; calls run in parallel only when every call in the reply is
            ``concurrency_safe``, otherwise one after another).
        memory: a conversation memory to read history from and write the run back to.
        approvals: where ``confirm=True`` tool calls wait for a human decision (see
            :class:`~shelfhand.tools.approvals.Approvals`); ``None``: such calls are not run
            and the model reads that they need confirmation. ``run``/``stream`` may override it.
        context_tokens: the model's context window in tokens; ``None``: what the model
            object reports as ``context_tokens``, else 8192. Every request is fitted to it,
            leaving the model's ``max_tokens`` (when it reports one) for the answer.
        replay_repeated_calls: answer a call that already succeeded in this run (same name
            and canonical arguments) from that result instead of running the tool again
            (default). ``False`` runs every call; identical failing calls are still stopped.
        retrieval: Where answers get their passages (see :mod:`shelfhand.agent.grounding`):
            ``tool`` (default: the model calls ``retrieve`` if it wants), ``context`` (the
            toolkit's ``retrieve`` is called with the user's message before the model is asked;
            the agent keeps a copy of the toolkit without ``retrieve``, so the model is not
            offered it) or ``both`` (up front, and by tool for more).
        rewriter: Rewrites a follow-up message into a self-contained query for the
            up-front retrieval (``context``/``both``) and for the search made for a guessed
            answer (``tool``; see :mod:`shelfhand.agent.loop`); see
            :mod:`shelfhand.agent.rewrite`. ``None``: the message is the query.
        answer_check: Check each answer against the run's passages and replace one that
            cannot be trusted by the passages' own sentences (see
            :mod:`shelfhand.agent.answer_check`); ``None`` (default): answers are returned as
            the model wrote them, unchecked.
        prices: Prices by model name (:class:`~shelfhand.core.pricing.PriceTable`, the
            ``prices`` setting): each model call's cost adds up in ``RunResult.usage.cost``;
            ``None`` or no price for ``model``: the cost is ``None``.
    """

    def __init__(
        self,
        *,
        model: ChatModel,
        name: str = "agent",
        toolkit: Toolkit | None = None,
        system_prompt: str = DEFAULT_SYSTEM_PROMPT,
        max_iters: int = 10,
        max_concurrency: int = 8,
        memory: ConversationMemory | None = None,
        description: str = "",
        approvals: Approvals | None = None,
        context_tokens: int | None = None,
        replay_repeated_calls: bool = True,
        retrieval: AnswerRetrieval = "tool",
        rewriter: QueryRewriter | None = None,
        answer_check: AnswerCheck | None = None,
        prices: Mapping[str, ModelPrice] | None = None,
    ) -> None:
        if context_tokens is not None and context_tokens < 1:
            raise InvalidArgumentError("context_tokens must be positive")
        if max_iters < 1:
            raise InvalidArgumentError("max_iters must be at least 1")
        if max_concurrency < 1:
            raise InvalidArgumentError("max_concurrency must be at least 1")
        self.name = name
        self.description = description
        self.model = model
        self.toolkit = toolkit if toolkit is not None else Toolkit()
        self.system_prompt = system_prompt
        self.max_iters = max_iters
        self.max_concurrency = max_concurrency
        self.memory = memory
        self.approvals = approvals
        self.context_tokens = context_tokens
        self.replay_repeated_calls = replay_repeated_calls
        self._schema_cost = None
        self._system = None
        self.retrieval = check_answer_retrieval(retrieval)
        self.answer_check = answer_check
        self.prices = prices
        self.rewriter = rewriter
        self._upfront = None
        if self.retrieval != "tool":
            # InvalidArgumentError: no retrieve tool
            self._upfront = UpfrontRetrieval(self.toolkit, rewriter=rewriter)
            if self.retrieval == "context":  # the model is not offered retrieve
                self.toolkit = self.toolkit.copy()
                self.toolkit.remove(RETRIEVE_TOOL)

    # --- public API ------------------------------------------------------------------------
    async def run(self, prompt: str | Message, **options: Unpack[RunOptions]) -> RunResult:
        """Run to the final answer and return it with the transcript and citations.

        Args:
            prompt: The user's message.
            **options: The run's caller, history, approvals, trace id, parent run
                (:class:`~shelfhand.agent.runs.RunOptions`).
        """
        # nobody reads the steps: none of their events is built
        result = await run_to_final(self._loop(prompt, SILENT, options), what="agent loop")
        if self.answer_check is None:
            return result
        return await self._checked(result, _text(prompt))

    async def _checked(self, result: RunResult, question: str) -> RunResult:
        """``result`` through the answer check, when the agent has one (``question``: the
        user's message)."""
        if self.answer_check is None:
            return result
        checked = await self.answer_check.review(result, question)
        memory = self.memory
        if checked.messages is not result.messages and memory is not None and result.messages:
            # the loop remembered the model's answer; the next turn must see the one shown
            kept = memory.messages
            if kept and kept[-1] is result.messages[-1]:
                kept[-1] = checked.messages[-1]
        return checked

    async def _run_quiet(
        self,
        prompt: str | Message,
        *,
        history: Sequence[Message],
        approvals: Approvals | None,
        parent: RunContext,
        emit: Callable[[Event], None] | None = None,
        tag: str | None = None,
    ) -> RunResult:
        """A delegated run (see :mod:`shelfhand.agent.supervisor`): ``run`` for the parent's
        caller; with ``emit``, its tool and approval events go there as they happen, tool
        events tagged with ``tag`` (the subagent's id), instead of through this run's
        generator. Citations come back in the result only (no ``CitationsFound``)."""
        sink = SILENT if emit is None else EventSink(emit=emit, tag=tag)
        options: RunOptions = {"history": history, "approvals": approvals, "parent": parent}
        return await run_to_final(self._loop(prompt, sink, options), what="agent loop")

    def run_sync(self, prompt: str | Message, **options: Unpack[RunOptions]) -> RunResult:
        """``run`` for scripts and the CLI (not inside a running event loop). Each call is
        an ``asyncio.run`` of its own: the model's connections, which belong to that loop,
        are closed with it (``aclose``, when the model has one)."""
        return run_closing(self, lambda: self.run(prompt, **options))

    def chat_models(self) -> Iterator[ChatModel]:
        """The chat models this agent asks: its own, and its query rewriter's (see
        :func:`~shelfhand.agent.runs.chat_models`)."""
        yield self.model
        if self.rewriter is not None:
            yield self.rewriter.model

    async def stream(
        self, prompt: str | Message, *, text_deltas: bool = True, **options: Unpack[RunOptions]
    ) -> AsyncGenerator[Event, None]:
        """Yield text deltas, tool started/finished, approvals, citations, and one final event.

        Args:
            prompt: The user's message.
            text_deltas: ``False``: the model is asked without streaming and no
                ``TextDelta`` is yielded, only the steps and the final event (for callers
                that show the steps but not the text, e.g. a supervisor running a subagent).
            **options: As for :meth:`run`.
        """
        # aclosing: a consumer that stops early closes the inner generators now, so pending
        # approvals are withdrawn at once rather than whenever the generator is collected
        events = self._loop(prompt, STEPS_AND_TEXT if text_deltas else STEPS, options)
        question = _text(prompt)
        async with aclosing(events):
            async for event in events:
                if isinstance(event, Final) and self.answer_check is not None:
                    checked = await self._checked(event.result, question)
                    # the deltas were the model's answer: say it was replaced, and by what
                    replaced = replacement(event.result, checked, question)
                    if replaced is not None:
                        yield replaced
                    event = Final(result=checked)
                yield event


def _text(prompt: str | Message) -> str:
    """The words of the user's message."""
    return prompt if isinstance(prompt, str) else prompt.text
