"""Short-term conversation memory bounded by a token budget (docs/design.md K5).

Recent turns are kept verbatim while they fit the budget; older turns are folded into a
summary written by the chat model. The summary reaches the prompt in its own labelled section
(see :func:`build_system_prompt`), apart from knowledge and from the conversation itself.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from shelfhand.agent.side_calls import side_request, usage_of
from shelfhand.core.errors import BudgetExceededError
from shelfhand.core.messages import Message, TextBlock, ToolCallBlock, ToolResultBlock
from shelfhand.core.results import Usage
from shelfhand.core.tokens import count_tokens
from shelfhand.models.base import ChatModel

if TYPE_CHECKING:
    from shelfhand.core.pricing import ModelPrice

logger = logging.getLogger(__name__)

SUMMARY_INSTRUCTIONS = (
    "Summarise the conversation below for your own later use. Keep facts the user stated, "
    "decisions, open questions, order numbers, names and numbers exactly. Write at most "
    "{limit} words, in the language of the conversation. Output only the summary."
)


def message_tokens(message: Message) -> int:
    total = 4  # role and separators
    for block in message.content:
        if isinstance(block, TextBlock):
            total += count_tokens(block.text)
        elif isinstance(block, ToolCallBlock):
            total += count_tokens(block.name) + count_tokens(block.arguments)
        elif isinstance(block, ToolResultBlock):
            total += count_tokens(block.content)
    return total


def build_system_prompt(
    base: str, *, memory: str = "", summary: str = "", knowledge: str = ""
) -> str:
    """The system prompt with knowledge, memory and conversation summary in labelled sections."""
    parts = [base.strip()]
    if knowledge.strip():
        parts.append("## Knowledge\n" + knowledge.strip())
    if memory.strip():
        parts.append("## Memory (what you know about this user)\n" + memory.strip())
    if summary.strip():
        parts.append("## Conversation so far (summary of earlier turns)\n" + summary.strip())
    return "\n\n".join(p for p in parts if p)


def _turn_starts(messages: Sequence[Message]) -> list[int]:
    """Indexes where a user turn starts: the only safe places to cut a conversation."""
    return [i for i, m in enumerate(messages) if m.role == "user"]


@dataclass(slots=True)
class ConversationMemory:
    """A per-conversation window: recent messages plus a model-written summary of older ones.

    Args:
        token_budget: the most tokens the kept messages may take; when exceeded, the oldest
            whole turns are folded into the summary until the rest fits half the budget.
        summary_words: the target length of the summary.
    """

    token_budget: int = 4000
    summary_words: int = 200
    messages: list[Message] = field(default_factory=list)
    summary: str = ""

    def add(self, messages: Sequence[Message]) -> None:
        self.messages.extend(m for m in messages if m.role != "system")

    def tokens(self) -> int:
        return sum(message_tokens(m) for m in self.messages)

    def needs_compaction(self) -> bool:
        return self.tokens() > self.token_budget

    async def compact(self, model: ChatModel, *, price: ModelPrice | None = None) -> Usage | None:
        """Fold the oldest turns into the summary when over budget.

        The summary is a model call like the run's: reserved against the turn's budget (the
        running :class:`~shelfhand.core.metering.Meter`), counted for the service's metrics
        and traced as a ``chat`` span; its usage is returned for the run to add to its own.
        If the budget refuses it or the model fails, the oldest turns are dropped anyway
        (the window must stay bounded) and the summary keeps what it had.

        Args:
            model: Writes the summary.
            price: The model's price, for the call's cost (``None``: unknown).

        Returns:
            The summary call's usage when older turns were folded (no model call: a refused
            or failed one), ``None`` when nothing needed folding.
        """
        if not self.needs_compaction():
            return None
        starts = _turn_starts(self.messages)
        target = self.token_budget // 2
        cut = 0
        remaining = self.tokens()
        for start in starts[1:]:
            cut_tokens = sum(message_tokens(m) for m in self.messages[cut:start])
            remaining -= cut_tokens
            cut = start
            if remaining <= target:
                break
        if cut == 0:
            # a single huge turn: keep it, there is no earlier turn to fold
            return None
        old, self.messages = self.messages[:cut], self.messages[cut:]
        transcript = "\n".join(f"{m.role}: {_plain(m)}" for m in old)
        if self.summary:
            transcript = f"(earlier summary) {self.summary}\n{transcript}"
        request = [
            Message.system(SUMMARY_INSTRUCTIONS.format(limit=self.summary_words)),
            Message.user(transcript),
        ]
        return await self._summarise(model, request, price)

    async def _summarise(
        self, model: ChatModel, request: list[Message], price: ModelPrice | None
    ) -> Usage:
        try:
            # the request and a summary of summary_words (a word is one to two tokens)
            response = await side_request(
                model, request, reply_tokens=2 * self.summary_words + 16, purpose="summary"
            )
        except BudgetExceededError:
            logger.info("no budget left to summarise older turns; they were dropped")
            return Usage()
        except Exception:  # the window must shrink even when the model is down
            logger.warning("summarising older turns failed; they were dropped", exc_info=True)
            return Usage()
        self.summary = response.message.text.strip() or self.summary
        return usage_of(response, price)


def _plain(message: Message) -> str:
    parts: list[str] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append(block.text)
        elif isinstance(block, ToolCallBlock):
            parts.append(f"[called {block.name} {block.arguments}]")
        elif isinstance(block, ToolResultBlock):
            parts.append(f"[{block.name} returned: {block.content[:500]}]")
    return " ".join(parts)
