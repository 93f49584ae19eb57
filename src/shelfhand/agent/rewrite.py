"""Query rewrite (docs/design.md R7): a follow-up message made into a self-contained search query.

"and the price?" after a question about the Lumen X1 finds nothing on its own; the chat model
rewrites it, with the conversation so far, into "Lumen X1 price" for the up-front retrieval
(:mod:`shelfhand.agent.grounding`). It is only asked when there is history, and its answer is
used only when it looks like a query: a model error, a timeout, an empty answer, one far
longer than the message, JSON, a code block, a tool call or words of its own instructions
(small models echo them) all keep the user's message, with the reason in
:attr:`Rewrite.reason`. Citation markers (``[1]``) copied from the history are dropped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from shelfhand.agent.side_calls import side_request
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.messages import Message
from shelfhand.core.pricing import ModelPrice
from shelfhand.knowledge.analysis import in_chinese
from shelfhand.models.base import ChatModel

__all__ = ["QueryRewriter", "Rewrite", "asks_the_same", "carried", "points_back"]

logger = logging.getLogger(__name__)

SYSTEM = (
    "Rewrite the user's last message as a short, self-contained search query for a document "
    "search, filling in what it leaves out (product names, models, error codes) from the "
    "conversation. Keep the user's language. Reply with the query only.\n"
    'Example: after a conversation about the Acme Z9 printer, the message "and the weight?" '
    "becomes: Acme Z9 printer weight"
)
_EXAMPLE_WORDS = re.compile(r"\b(?:acme|z9|printer|weight)\b", re.I)
"""The example's own words: dropped from a rewrite when the conversation does not use them
(a small model copies the example into its answer)."""
HISTORY_MESSAGES = 6
HISTORY_CHARS = 300
_CITATION = re.compile(r"(?<!\s)\s*\[\d{1,3}\]")
_PREFIX = re.compile(
    r"^(?:search\s+query|query|rewritten(?:\s+query)?|查询|检索词)\s*[:：]\s*", re.I
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rewrite:
    """The query to search with, and what happened."""

    query: str
    original: str
    rewritten: bool = False
    """``True`` when ``query`` is the model's rewrite."""
    reason: str | None = None
    """Why the original was kept, when the model was asked and its answer not used."""
    carried: bool = False
    """``True`` when ``query`` is the message with the earlier question it points back to
    (:func:`carried`), no model asked."""


_REPLY_TOKENS = 64
"""What a rewrite's reply is reserved for: one search query."""


class QueryRewriter:
    """Rewrites a message with its history through ``model``.

    Args:
        model: The chat model (the agent's own is fine: it is called on the agent's loop).
        timeout: Seconds the model may take.
        max_growth: The rewrite may be at most this many times the message's length
            (plus ``slack`` characters); longer answers are taken for answers, not queries.
        slack: See ``max_growth``.
        price: The model's price (setting ``prices``), for the call's cost in the run's
            usage; ``None``: unknown.

    The call is reserved against the caller's budget, traced and counted like the loop's
    (:func:`~.side_calls.side_request`: its usage goes to the caller's
    :func:`~.side_calls.side_usage` block); an exhausted budget keeps the message, as a model
    failure does.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        timeout: float = 10.0,
        max_growth: float = 4.0,
        slack: int = 60,
        price: ModelPrice | None = None,
    ) -> None:
        if timeout <= 0:
            raise InvalidArgumentError("rewrite timeout must be positive")
        self.model = model
        self.timeout = timeout
        self.max_growth = max_growth
        self.slack = slack
        self.price = price

    async def rewrite(self, message: str, history: Sequence[Message]) -> Rewrite:
        """The query for ``message``; the message itself when there is no history to use or
        the model's answer is unusable (never raises for a model failure)."""
        original = message.strip()
        turns = _history_text(history)
        if not original or not turns:
            return Rewrite(query=original, original=original)
        prompt = [
            Message.system(SYSTEM),
            Message.user(f"Conversation:\n{turns}\n\nLast message: {original}\n\nSearch query:"),
        ]
        try:
            response = await side_request(
                self.model,
                prompt,
                reply_tokens=_REPLY_TOKENS,
                price=self.price,
                timeout=self.timeout,
                purpose="query rewrite",
            )
        except TimeoutError:
            return self._keep(original, f"the model did not answer within {self.timeout:g} s")
        except Exception as exc:
            return self._keep(original, f"the model failed: {type(exc).__name__}: {exc}")
        if response.message.tool_calls:
            return self._keep(original, "the model answered with a tool call")
        query, problem = self._clean(response.message.text, original, turns)
        if problem is not None:
            return self._keep(original, problem)
        return Rewrite(query=query, original=original, rewritten=query != original)

    def _clean(self, answer: str, original: str, turns: str) -> tuple[str, str | None]:
        text = answer.strip()
        if not text:
            return "", "the model's answer was empty"
        if "```" in text or text[0] in "{[<":
            return "", f"the model's answer is not a query: {text[:60]!r}"
        line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        line = _PREFIX.sub("", line).strip().strip("\"'“”「」`").strip()
        line = _CITATION.sub("", line).strip()  # "Lumen X1 [1]": a citation, not a term
        if not line:
            return "", "the model's answer was empty"
        said = f"{turns}\n{original}".lower()
        line = _EXAMPLE_WORDS.sub(lambda m: m[0] if m[0].lower() in said else "", line)
        line = " ".join(line.split())
        if not line:
            return "", "the model's answer only repeated the prompt's example"
        echo = line.lower().rstrip(".")
        own_words = all(w in said for w in echo.split())
        if (len(echo.split()) >= 3 or len(echo) >= 20) and echo in SYSTEM.lower() and not own_words:
            return "", f"the model repeated its instructions: {line[:60]!r}"
        if len(line) > self.max_growth * len(original) + self.slack:
            return "", f"the model's answer is far longer than the message ({len(line)} chars)"
        return line, None

    def _keep(self, original: str, reason: str) -> Rewrite:
        logger.info("query rewrite kept the message: %s", reason)
        return Rewrite(query=original, original=original, reason=reason)


def _history_text(history: Sequence[Message]) -> str:
    """The last few user and assistant texts, each cut, one per line."""
    lines: list[str] = []
    for m in history:
        if m.role not in ("user", "assistant"):
            continue
        content = " ".join(m.text.split())
        if content:
            lines.append(f"{m.role}: {content[:HISTORY_CHARS]}")
    return "\n".join(lines[-HISTORY_MESSAGES:])


_ASKS_THE_SAME = r"呢[\s？?。.!！]*$|^\s*(?:what about|how about|and)\b"
"""A message asking what the one before it asked: "…呢？", "what about …", "and …"."""
_POINTS_BACK = re.compile(
    rf"它|这款|那款|这个|那个|这台|那台|这种|那种|该(?:产品|型号|款|机)|^\s*(?:那|还有)|{_ASKS_THE_SAME}",
    re.IGNORECASE,
)
"""A message that points back to what the conversation was about: a Chinese pronoun ("它的光源
能用多久？"), or "what about …" ("那价格呢？", "那 X1 Pro 呢？", "and its price?")."""
_ENGLISH_PRONOUN = re.compile(r"\b(?:it|its|it's|they|them|their|(?:this|that) one)\b", re.I)
SHORT_WORDS = 5
"""An English message pointing back with a pronoun has at most this many words ("How heavy is
it?", "Can I keep using it?"): in a longer one "it" is mostly a question's own ("Is it
possible to return an opened projector?" after a price: carried, its search put the spec
sheet in the top 3 and, for "Does it void the warranty if I open the case?" after E-203, the
manual first)."""
CARRY_BACK = 3
"""How many earlier user messages :func:`carried` looks through for one that names its
subject."""
CARRY_CHARS = 200
"""The most of an earlier message :func:`carried` adds to a query."""


_SAME_ASKED = re.compile(_ASKS_THE_SAME, re.IGNORECASE)


def asks_the_same(message: str) -> bool:
    """Whether ``message`` asks what the earlier question asked, of something else or of
    more ("那 Mini M2 呢？", "what about the X1 Pro?", "and its price?"), rather than a
    question of its own ("它有多重？")."""
    return _SAME_ASKED.search(message) is not None


_ASKS_ONLY = re.compile(
    r"怎么样|怎么|怎样|如何|多少|多久|多长时间|多长|多|什么意思|什么|为什么|哪里|哪儿|哪个|哪些|哪|几"
    r"|是否|有没有|没有|有"
    r"|请问|可以|需要|应该|能|要|会|该|还|也|都|就|是|吗|呢|吧|啊|呀|了|的|我们|我|你们|你"
    r"|[\s？?。.!！，,、：:]"
)
"""What only asks in a Chinese question (its question words, particles, pronouns of the
people talking, punctuation): what is left is what the question names of its own."""
_ASKING_MARK = re.compile(r"[？?]|怎么|怎样|如何|多少|多久|多长|什么|为什么|哪|几|吗")
_LATIN_OR_DIGIT = re.compile(r"[A-Za-z0-9]")


def _names_nothing(message: str) -> bool:
    """Whether ``message`` is a Chinese question that names at most one character of its own
    once what only asks is taken off: "怎么修？", "多少钱？", "能退吗？", "多重？", "有货吗？",
    "什么意思？". Chinese leaves out the subject a conversation already has ("E-203 是什么故
    障？" then "怎么修？"); a question of two characters of its own or more ("保修多久？") is
    one of its own, and one naming a code or a model in Latin letters or digits too."""
    if _ASKING_MARK.search(message) is None or _LATIN_OR_DIGIT.search(message):
        return False
    rest = _ASKS_ONLY.sub("", message)
    return len(rest) <= 1 and in_chinese(message)


def points_back(message: str) -> bool:
    """Whether ``message`` points back to what the conversation was about (see
    :data:`_POINTS_BACK`; an English pronoun in a message of :data:`SHORT_WORDS` words at
    most; a Chinese question naming nothing of its own, :func:`_names_nothing`)."""
    if _POINTS_BACK.search(message) is not None:
        return True
    if _ENGLISH_PRONOUN.search(message) is not None and len(message.split()) <= SHORT_WORDS:
        return True
    return _names_nothing(message)


def carried(message: str, history: Sequence[Message]) -> Rewrite | None:
    """The query for a follow-up without a model: ``message`` after the latest earlier user
    message (and the ones before it while they point back too, :func:`points_back`, up to
    :data:`CARRY_BACK`; cut to :data:`CARRY_CHARS`), when ``message`` points back; ``None``
    when it does not, or there is no earlier question.

    "它的光源能用多久？" after "Lumen Mini M2 多少钱？" is searched as "Lumen Mini M2 多少钱？
    它的光源能用多久？": the search finds the Mini M2's spec row, not the warranty's sentence
    about light sources. A message that does not point back ("退货要手续费吗？" after a
    product's price) is searched as typed: a new topic is not mixed with the old one."""
    original = message.strip()
    if not original or not points_back(original):
        return None
    asked = [" ".join(m.text.split()) for m in history if m.role == "user" and m.text.strip()]
    if not asked:
        return None
    chain: list[str] = []
    for earlier in reversed(asked[-CARRY_BACK:]):
        chain.insert(0, earlier)  # one that points back too: with the one before it
        if not points_back(earlier):
            break
    subject = " ".join(chain)[:CARRY_CHARS]
    return Rewrite(query=f"{subject} {original}", original=original, rewritten=True, carried=True)
