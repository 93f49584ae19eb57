"""Immutable messages and content blocks (docs/design.md K1).

A :class:`Message` has a role, a tuple of content blocks, an id, a timestamp and metadata.
Blocks are :class:`TextBlock`, :class:`ToolCallBlock`, :class:`ToolResultBlock` and
:class:`CitationBlock`. ``Message.to_dict`` / ``Message.from_dict`` (and the ``*_json``
variants) round-trip losslessly.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.ids import new_id
from shelfhand.core.names import valid_text
from shelfhand.core.slots import slot_setters, twin

__all__ = [
    "MAX_ARGUMENT_DEPTH",
    "Block",
    "Citation",
    "CitationBlock",
    "Message",
    "Role",
    "TextBlock",
    "ToolCallBlock",
    "ToolResultBlock",
    "messages_from_json",
    "messages_to_json",
    "too_deep",
]

Role = Literal["system", "user", "assistant", "tool"]

_scan_json: Callable[[str, int], tuple[Any, int]] = getattr(json.JSONDecoder(), "scan_once")  # noqa: B009 - not in typeshed
"""What ``json.loads`` runs for a string (the same C scanner, strict, no hooks)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Citation:
    """Where a piece of evidence comes from."""

    index: int
    """The number the model cites it by: ``[index]``."""
    source: str
    title: str = ""
    section: str = ""
    page: int | None = None
    doc_id: str = ""
    chunk_id: str = ""
    text: str = ""
    score: float | None = None
    relevance: float | None = None
    """The search's evidence strength for the passage, 0..1, comparable across queries (the
    hit's ``relevance``; ``None``: not from a search)."""
    cosine: float | None = None
    """How near in meaning the passage is to the query its search was for (the hit's
    ``cosine``; ``None``: not from a search, or no vector space scored it)."""
    start: int | None = None
    """Where the passage starts in its document's text (``None``: not known)."""
    end: int | None = None
    spans: tuple[tuple[int, int], ...] = ()
    """For a compressed passage: the document offsets of the pieces ``text`` keeps, in order
    (``text`` is these pieces joined, with "…" where something was left out); empty when
    ``text`` is the whole passage."""
    conflicts_with: tuple[int, ...] = ()
    """Numbers of passages of the same evidence that disagree with this one."""
    conflict_note: str = ""
    """One line per disagreement, e.g. ``[2] and [4] disagree: 12 个月 vs 24 个月; [4] is
    newer (version 2, effective 2025-01-01).``; in Chinese for a query in Chinese (``[2] 与
    [4] 不一致：12 个月 vs 24 个月；[4] 较新（第 2 版，2025-01-01 生效）。``)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "source": self.source,
            "title": self.title,
            "section": self.section,
            "page": self.page,
            "doc_id": self.doc_id,
            "chunk_id": self.chunk_id,
            "text": self.text,
            "score": self.score,
            "relevance": self.relevance,
            "cosine": self.cosine,
            "start": self.start,
            "end": self.end,
            "spans": [list(s) for s in self.spans],
            "conflicts_with": list(self.conflicts_with),
            "conflict_note": self.conflict_note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Citation:
        return cls(
            index=int(data["index"]),
            source=str(data["source"]),
            title=str(data.get("title", "")),
            section=str(data.get("section", "")),
            page=None if data.get("page") is None else int(data["page"]),
            doc_id=str(data.get("doc_id", "")),
            chunk_id=str(data.get("chunk_id", "")),
            text=str(data.get("text", "")),
            score=None if data.get("score") is None else float(data["score"]),
            relevance=None if data.get("relevance") is None else float(data["relevance"]),
            cosine=None if data.get("cosine") is None else float(data["cosine"]),
            start=None if data.get("start") is None else int(data["start"]),
            end=None if data.get("end") is None else int(data["end"]),
            spans=tuple((int(s[0]), int(s[1])) for s in data.get("spans") or ()),
            conflicts_with=tuple(int(n) for n in data.get("conflicts_with") or ()),
            conflict_note=str(data.get("conflict_note") or ""),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TextBlock:
    text: str
    type: Literal["text"] = "text"

    def __init__(self, *, text: str, type: Literal["text"] = "text") -> None:
        _text_text(self, text)
        _text_type(self, type)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallBlock:
    """A tool call requested by the model. ``arguments`` is the JSON text as the model sent it."""

    id: str
    name: str
    arguments: str = "{}"
    type: Literal["tool_call"] = "tool_call"

    def __init__(
        self,
        *,
        id: str,
        name: str,
        arguments: str = "{}",
        type: Literal["tool_call"] = "tool_call",
    ) -> None:
        _call_id(self, id)
        _call_name(self, name)
        _call_arguments(self, arguments)
        _call_type(self, type)

    def parsed_arguments(self) -> Any:
        """The arguments decoded from JSON.

        Raises:
            json.JSONDecodeError: Not JSON, or nested deeper than :data:`MAX_ARGUMENT_DEPTH`
                levels. A model's ``[[[…]]]`` 100,000 levels deep raised ``RecursionError``
                in the decoder, and 900 levels in the masking of secrets for the trace and
                the audit log: either ended the whole run.
        """
        text = self.arguments
        if text[:1] == "{" and text[-1:] == "}":
            # the common case, one object and nothing around it: straight to the scanner that
            # json.loads ends in (its three Python layers cost twice the scan of small
            # arguments); anything else, errors included, goes through json.loads
            try:
                value, end = _scan_json(text, 0)
            except (StopIteration, ValueError, RecursionError):
                pass
            else:
                if end == len(text):
                    # (nesting past the limit takes twice as many brackets: 2 * 64)
                    if end > 128 and too_deep(text, value):
                        raise json.JSONDecodeError(_TOO_DEEP, text, 0)
                    return value
        try:
            value = json.loads(text) if text.strip() else {}
        except RecursionError:
            raise json.JSONDecodeError(_TOO_DEEP, text, 0) from None
        if len(text) > 128 and too_deep(text, value):
            raise json.JSONDecodeError(_TOO_DEEP, text, 0)
        return value


MAX_ARGUMENT_DEPTH = 64
"""The deepest nesting of a call's arguments that :meth:`ToolCallBlock.parsed_arguments`
takes (deeper is not valid arguments: the toolkit refuses the call)."""
_TOO_DEEP = f"nested deeper than {MAX_ARGUMENT_DEPTH} levels"


def too_deep(text: str, value: Any) -> bool:
    """Whether ``value`` (parsed from ``text``) nests deeper than :data:`MAX_ARGUMENT_DEPTH`
    (text with fewer brackets than that cannot: one count of each, no walk)."""
    if text.count("[") + text.count("{") <= MAX_ARGUMENT_DEPTH:
        return False
    level = [value]
    for _ in range(MAX_ARGUMENT_DEPTH):
        level = [
            item
            for container in level
            if isinstance(container, dict | list)
            for item in (container.values() if isinstance(container, dict) else container)
        ]
        if not level:
            return False
    return any(isinstance(item, dict | list) for item in level)


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolResultBlock:
    """The outcome of one tool call, as the model will read it."""

    call_id: str
    name: str
    content: str
    is_error: bool = False
    citations: tuple[Citation, ...] = ()
    type: Literal["tool_result"] = "tool_result"
    failure: str = ""
    """Why the tool did not answer, as a person may read it (``failed: timed out after
    5 s``, ``failed after 3 attempts: ConnectionError``, ``unavailable: circuit open after
    repeated failures``, ``returned an error: …``); "" when it answered, and for a call the
    model got wrong (an unknown tool, invalid arguments, not permitted), which is no failure
    of the tool. Set by the toolkit; what the model reads is ``content``."""

    def __init__(
        self,
        *,
        call_id: str,
        name: str,
        content: str,
        is_error: bool = False,
        citations: tuple[Citation, ...] = (),
        type: Literal["tool_result"] = "tool_result",
        failure: str = "",
    ) -> None:
        _result_call_id(self, call_id)
        _result_name(self, name)
        _result_content(self, content)
        _result_is_error(self, is_error)
        _result_citations(self, citations)
        _result_type(self, type)
        _result_failure(self, failure)


@dataclass(frozen=True, slots=True, kw_only=True)
class CitationBlock:
    """Citations attached to an answer (e.g. the evidence a final answer used)."""

    citations: tuple[Citation, ...]
    type: Literal["citations"] = "citations"


_text_text, _text_type = slot_setters(TextBlock, "text", "type")
_call_id, _call_name, _call_arguments, _call_type = slot_setters(
    ToolCallBlock, "id", "name", "arguments", "type"
)
(
    _result_call_id,
    _result_name,
    _result_content,
    _result_is_error,
    _result_citations,
    _result_type,
    _result_failure,
) = slot_setters(
    ToolResultBlock, "call_id", "name", "content", "is_error", "citations", "type", "failure"
)

Block: TypeAlias = TextBlock | ToolCallBlock | ToolResultBlock | CitationBlock


def _block_to_dict(block: Block) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolCallBlock):
        return {
            "type": "tool_call",
            "id": block.id,
            "name": block.name,
            "arguments": block.arguments,
        }
    if isinstance(block, ToolResultBlock):
        result: dict[str, Any] = {
            "type": "tool_result",
            "call_id": block.call_id,
            "name": block.name,
            "content": block.content,
            "is_error": block.is_error,
            "citations": [c.to_dict() for c in block.citations],
        }
        if block.failure:
            result["failure"] = block.failure
        return result
    return {"type": "citations", "citations": [c.to_dict() for c in block.citations]}


def _block_from_dict(data: Mapping[str, Any]) -> Block:
    kind = data.get("type")
    if kind == "text":
        return TextBlock(text=str(data["text"]))
    if kind == "tool_call":
        return ToolCallBlock(
            id=str(data["id"]), name=str(data["name"]), arguments=str(data["arguments"])
        )
    if kind == "tool_result":
        return ToolResultBlock(
            call_id=str(data["call_id"]),
            name=str(data["name"]),
            content=str(data["content"]),
            is_error=bool(data.get("is_error", False)),
            citations=tuple(Citation.from_dict(c) for c in data.get("citations", ())),
            failure=str(data.get("failure") or ""),
        )
    if kind == "citations":
        return CitationBlock(citations=tuple(Citation.from_dict(c) for c in data["citations"]))
    raise InvalidArgumentError(f"unknown content block type {kind!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    """One message of a conversation. Immutable; build new ones with the factories."""

    role: Role
    content: tuple[Block, ...] = ()
    name: str | None = None
    id: str = field(default_factory=new_id)
    """Unique across processes (see :func:`~shelfhand.core.ids.new_id`); a new one unless
    given."""
    created_at: float = field(default_factory=time.time)
    """Epoch seconds; now unless given."""
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        *,
        role: Role,
        content: tuple[Block, ...] = (),
        name: str | None = None,
        id: str | None = None,
        created_at: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        # several of these per agent step: the dataclass's own __init__ would look each field up
        # by name (object.__setattr__), see shelfhand.core.slots
        _role(self, role)
        _content(self, content)
        _name(self, name)
        _id(self, new_id() if id is None else id)
        _created_at(self, time.time() if created_at is None else created_at)
        _metadata(self, {} if metadata is None else metadata)

    # --- factories -------------------------------------------------------------------------
    # without keywords (the common case) a message is built as a twin: see shelfhand.core.slots
    @classmethod
    def system(cls, text: str, **kw: Any) -> Message:
        if kw or cls is not Message:
            return cls(role="system", content=(TextBlock(text=text),), **kw)
        return new_message("system", (text_block(text),))

    @classmethod
    def user(cls, text: str, **kw: Any) -> Message:
        if kw or cls is not Message:
            return cls(role="user", content=(TextBlock(text=text),), **kw)
        return new_message("user", (text_block(text),))

    @classmethod
    def assistant(
        cls,
        text: str = "",
        *,
        tool_calls: Iterable[ToolCallBlock] = (),
        citations: Sequence[Citation] = (),
        **kw: Any,
    ) -> Message:
        blocks: list[Block] = []
        if text:
            blocks.append(text_block(text))
        blocks.extend(tool_calls)
        if citations:
            blocks.append(CitationBlock(citations=tuple(citations)))
        if kw or cls is not Message:
            return cls(role="assistant", content=tuple(blocks), **kw)
        return new_message("assistant", tuple(blocks))

    @classmethod
    def tool(cls, results: Iterable[ToolResultBlock], **kw: Any) -> Message:
        if kw or cls is not Message:
            return cls(role="tool", content=tuple(results), **kw)
        return new_message("tool", tuple(results))

    # --- views -----------------------------------------------------------------------------
    # the loop reads a reply's text and calls at every step: the common shapes (one block, no
    # call) are answered without a generator, which costs more than the rest of the read

    @property
    def text(self) -> str:
        """All text blocks joined."""
        content = self.content
        if len(content) == 1:
            block = content[0]
            return block.text if isinstance(block, TextBlock) else ""
        return "".join([b.text for b in content if isinstance(b, TextBlock)])

    @property
    def tool_calls(self) -> tuple[ToolCallBlock, ...]:
        content = self.content
        for block in content:
            if isinstance(block, ToolCallBlock):
                return tuple([b for b in content if isinstance(b, ToolCallBlock)])
        return ()

    @property
    def tool_results(self) -> tuple[ToolResultBlock, ...]:
        return tuple(b for b in self.content if isinstance(b, ToolResultBlock))

    @property
    def citations(self) -> tuple[Citation, ...]:
        out: list[Citation] = []
        for b in self.content:
            if isinstance(b, (ToolResultBlock, CitationBlock)):
                out.extend(b.citations)
        return tuple(out)

    # --- serialisation ---------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "role": self.role,
            "name": self.name,
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
            "content": [_block_to_dict(b) for b in self.content],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Message:
        role = data["role"]
        if role not in ("system", "user", "assistant", "tool"):
            raise InvalidArgumentError(f"unknown message role {role!r}")
        return cls(
            role=role,
            content=tuple(_block_from_dict(b) for b in data.get("content", ())),
            name=data.get("name"),
            id=str(data["id"]),
            created_at=float(data["created_at"]),
            metadata=dict(data.get("metadata") or {}),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Message:
        return cls.from_dict(json.loads(text))


_role, _content, _name, _id, _created_at, _metadata = slot_setters(
    Message, "role", "content", "name", "id", "created_at", "metadata"
)


_TextFields = twin(TextBlock)
_ResultFields = twin(ToolResultBlock)
_MessageFields = twin(Message)


def text_block(text: str) -> TextBlock:
    """``TextBlock(text=text)``, built as a twin (see :mod:`shelfhand.core.slots`)."""
    block = _TextFields()
    block.text = text
    block.type = "text"
    block.__class__ = TextBlock
    built: TextBlock = block
    return built


def tool_result(
    *,
    call_id: str,
    name: str,
    content: str,
    is_error: bool = False,
    citations: tuple[Citation, ...] = (),
    failure: str = "",
) -> ToolResultBlock:
    """``ToolResultBlock(...)`` of these fields, built as a twin (one per tool call);
    ``content`` made storable (:func:`~shelfhand.core.names.valid_text`: a tool may return
    a name read with ``surrogateescape``, an MCP server half of a surrogate pair)."""
    block = _ResultFields()
    block.call_id = call_id
    block.name = name
    block.content = content if content.isascii() else valid_text(content)
    block.is_error = is_error
    block.citations = citations
    block.type = "tool_result"
    block.failure = failure
    block.__class__ = ToolResultBlock
    built: ToolResultBlock = block
    return built


def new_message(role: Role, content: tuple[Block, ...]) -> Message:
    """A message of ``role`` and ``content`` with a new id, the time now, no name and no
    metadata: the factories' common case, built as a twin (see :mod:`shelfhand.core.slots`)."""
    message = _MessageFields()
    message.role = role
    message.content = content
    message.name = None
    message.id = new_id()
    message.created_at = time.time()
    message.metadata = {}
    message.__class__ = Message
    built: Message = message
    return built


def messages_to_json(messages: Iterable[Message]) -> str:
    return json.dumps([m.to_dict() for m in messages], ensure_ascii=False)


def messages_from_json(text: str) -> list[Message]:
    return [Message.from_dict(d) for d in json.loads(text)]
