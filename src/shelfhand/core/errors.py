"""Every error shelfhand raises that a user can see, in one tree, for two audiences.

Model-facing errors describe a problem with a tool call that the model can fix or work around
(unknown tool, bad arguments, a failing tool). They become a tool *result* with
``is_error=True`` and the run continues.

Caller-facing errors propagate to the program or person that runs the agent, with a message
that says what to do (bad configuration, a model provider that is down, an exhausted script).

Each class has a stable :attr:`~ShelfhandError.code` (the API's error ``code``, the audit
log's outcome, what a program matches on); messages may change, codes do not. An error that
also subclasses a builtin (``ValueError``, ``LookupError``) is still caught by code that
expects the builtin.

::

    ShelfhandError                    shelfhand_error
    ├── ConfigurationError            configuration_error   wrong or missing settings (fails fast at start-up)
    │   └── DeclarationError          declaration_error     a subagent declaration (file and line named)
    ├── InvalidArgumentError          invalid_argument      a bad value passed to a shelfhand API (also a ValueError)
    │   └── RoutingError              routing_error         a pipeline's router chose no known route
    ├── NotFoundError                 not_found             no such thing for this caller (also a LookupError)
    │   └── TaskNotFound              task_not_found        a background task id the caller does not own
    ├── ModelError                    model_error           the chat model could not answer
    │   ├── ModelTimeoutError         model_timeout         the provider did not answer in time
    │   ├── ModelProviderError        model_provider_error  the provider answered with an error (HTTP status kept)
    │   └── ContextBudgetError        context_budget        the request cannot fit the model's context window
    ├── ScriptExhaustedError          script_exhausted      a ScriptedModel ran out of turns (tests)
    ├── KnowledgeError                knowledge_error       ingest / store / retrieval problems
    │   ├── UnreadableDocumentError   unreadable_document   a file that cannot be read (reported, then skipped)
    │   │   └── DocumentTooLarge      document_too_large    over a reading limit (bytes, characters, pages, time…)
    │   ├── WorkspaceBusyError        workspace_busy        another process (server or ingest) writes the workspace
    │   ├── EmbeddingUnavailableError embedding_unavailable the embedding service is out of quota or down
    │   └── RerankError               rerank_failed         a reranker could not rank (the fused order is kept)
    ├── DependencyUnavailableError    <dependency>_unavailable  PostgreSQL, Redis or Qdrant cannot answer right now
    ├── SessionBusyError              session_busy          a turn of this session is still running
    ├── BudgetExceededError           budget_exceeded       a tenant's or user's budget (tokens, model calls, turns) is spent
    ├── TurnFailed                    (its own)             a service turn failed: carries the HTTP status and code
    ├── UploadRejected                (its own)             an upload refused as a whole; nothing was stored
    └── ToolError                     tool_error            model-facing: becomes an error tool result
        ├── UnknownToolError          unknown_tool
        ├── ToolArgumentError         invalid_tool_arguments  arguments are not valid JSON or fail validation
        ├── ToolPermissionError       tool_permission_denied  the caller may not use this tool
        ├── ToolTimeoutError          tool_timeout
        └── TransientToolError        tool_transient_failure  raised by a tool for a failure worth retrying
            └── ToolUnavailableError  tool_unavailable        the service behind the tool cannot be reached
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from typing import ClassVar

__all__ = [
    "BudgetExceededError",
    "ConfigurationError",
    "ContextBudgetError",
    "DeclarationError",
    "DependencyUnavailableError",
    "DocumentTooLarge",
    "EmbeddingUnavailableError",
    "InvalidArgumentError",
    "KnowledgeError",
    "ModelError",
    "ModelProviderError",
    "ModelTimeoutError",
    "NotFoundError",
    "RerankError",
    "RoutingError",
    "ScriptExhaustedError",
    "SessionBusyError",
    "ShelfhandError",
    "TaskNotFound",
    "ToolArgumentError",
    "ToolError",
    "ToolPermissionError",
    "ToolTimeoutError",
    "ToolUnavailableError",
    "TransientToolError",
    "TurnFailed",
    "UnknownToolError",
    "UnreadableDocumentError",
    "UploadRejected",
    "WorkspaceBusyError",
]


class ShelfhandError(Exception):
    """Base class of every error raised by shelfhand.

    Attributes:
        code: A stable identifier of the kind of error (see the tree above).
    """

    code: ClassVar[str] = "shelfhand_error"


class ConfigurationError(ShelfhandError):
    """Settings are wrong or missing; the message says which and how to fix it."""

    code = "configuration_error"


class DeclarationError(ConfigurationError):
    """A subagent declaration is wrong; the message names the file and line (or the code)."""

    code = "declaration_error"


class InvalidArgumentError(ShelfhandError, ValueError):
    """A value passed to a shelfhand API is not valid; the message names it and what fits."""

    code = "invalid_argument"


class RoutingError(InvalidArgumentError):
    """A conditional pipeline's router chose no known route and there is no default."""

    code = "routing_error"


class NotFoundError(ShelfhandError, LookupError):
    """What was asked for does not exist for this caller (or belongs to someone else)."""

    code = "not_found"


class TaskNotFound(NotFoundError):
    """No task with this id belongs to the caller (it may not exist, or be someone else's)."""

    code = "task_not_found"


class ModelError(ShelfhandError):
    """The chat model could not produce an answer."""

    code = "model_error"


class ModelTimeoutError(ModelError):
    """The model provider did not answer within the configured timeout."""

    code = "model_timeout"


class ModelProviderError(ModelError):
    """The model provider answered with an error, or its reply could not be read.

    Attributes:
        status_code: The HTTP status it answered with, when it answered.
        connection_lost: The connection broke (reset, closed mid-reply), as opposed to an
            answer that was an error: after text has reached the caller this is a reply cut
            off half way.
    """

    code = "model_provider_error"

    def __init__(
        self, message: str, *, status_code: int | None = None, connection_lost: bool = False
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.connection_lost = connection_lost


class ContextBudgetError(ModelError):
    """The request cannot fit the model's context window, even with tool results cut; nothing
    was sent (the message says how many tokens were needed and how many fit)."""

    code = "context_budget"


class ScriptExhaustedError(ShelfhandError):
    """A ``ScriptedModel`` was asked for more turns than its script holds."""

    code = "script_exhausted"


class KnowledgeError(ShelfhandError):
    """A problem in ingest, storage or retrieval of documents."""

    code = "knowledge_error"


class UnreadableDocumentError(KnowledgeError):
    """A file could not be read (corrupt, encrypted, unsupported). It is skipped."""

    code = "unreadable_document"


class DocumentTooLarge(UnreadableDocumentError):
    """A file is over one of the reading limits (bytes, characters, pages, nesting, time,
    memory); the message names the limit and how to raise it. It is skipped like any
    unreadable file."""

    code = "document_too_large"


class WorkspaceBusyError(KnowledgeError):
    """Another process writes to the workspace (a server or an ingest); the message names it.

    Attributes:
        holder: What holds the workspace: ``"serve"`` or ``"ingest"`` (or ``""`` if unknown).
        pid: The process id of the holder, when known.
    """

    code = "workspace_busy"

    def __init__(self, message: str, *, holder: str = "", pid: int | None = None) -> None:
        super().__init__(message)
        self.holder = holder
        self.pid = pid


class EmbeddingUnavailableError(KnowledgeError):
    """The embedding service stayed unavailable (quota, rate limit, outage) after retries.

    Retrieval catches this and falls back to keyword search instead of failing.
    """

    code = "embedding_unavailable"


class RerankError(KnowledgeError):
    """A reranker could not rank (error, timeout, malformed answer); the message says why."""

    code = "rerank_failed"


class DependencyUnavailableError(ShelfhandError):
    """A service shelfhand depends on (PostgreSQL, Redis, Qdrant) cannot be reached right now.

    The service answers 503 with the message (which names the dependency, never its
    password) and ``Retry-After``; it never answers from a stale local copy. The next request
    tries again, so the service recovers by itself when the dependency returns.

    Attributes:
        dependency: ``"postgresql"``, ``"redis"`` or ``"qdrant"``.
    """

    code = "dependency_unavailable"

    def __init__(self, message: str, *, dependency: str) -> None:
        super().__init__(message)
        self.dependency = dependency


class SessionBusyError(ShelfhandError):
    """A turn of this session is still running."""

    code = "session_busy"


class BudgetExceededError(ShelfhandError):
    """A budget would be exceeded: the model call (or turn) was not made.

    Attributes:
        budget: Which budget: ``tokens_per_day``, ``tokens_per_month``,
            ``model_calls_per_day``, ``model_calls_per_month`` or ``turns_per_minute``.
        scope: Whose: ``tenant acme`` or ``user acme/alice``.
        limit: The budget.
        used: What is used (or reserved by calls in flight) in this period.
        reset_at: When the period ends (epoch seconds).
    """

    code = "budget_exceeded"

    def __init__(
        self, message: str, *, budget: str, scope: str, limit: int, used: int, reset_at: float
    ) -> None:
        super().__init__(message)
        self.budget = budget
        self.scope = scope
        self.limit = limit
        self.used = used
        self.reset_at = reset_at

    def to_dict(self) -> dict[str, object]:
        return {
            "budget": self.budget,
            "scope": self.scope,
            "limit": self.limit,
            "used": self.used,
            "reset_at": self.reset_at,
        }


class TurnFailed(ShelfhandError):
    """A service turn failed; carries the HTTP status and the code the API answers with
    (its ``code`` is the failure's: ``model_timeout``, ``model_error``, ...), and for a
    spent budget the budget and when to retry."""

    def __init__(
        self,
        message: str,
        *,
        status: int,
        code: str,
        budget: dict[str, object] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code  # type: ignore[misc]  # the failure's code, per instance
        self.budget = budget
        self.retry_after = retry_after


class UploadRejected(ShelfhandError):
    """An upload is refused as a whole; nothing was stored. ``status`` is the HTTP status the
    API answers with and ``code`` says why (``too_large``, ``forbidden``, ...)."""

    def __init__(self, message: str, *, status: int, code: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code  # type: ignore[misc]  # why, per instance


class ToolError(ShelfhandError):
    """A model-facing tool problem: reported to the model as an error result."""

    code = "tool_error"


class UnknownToolError(ToolError):
    """The model called a tool that does not exist (or is not visible to this caller)."""

    code = "unknown_tool"


class ToolArgumentError(ToolError):
    """The tool call's arguments are not valid JSON or do not match the schema."""

    code = "invalid_tool_arguments"


class ToolPermissionError(ToolError):
    """The caller may not use this tool."""

    code = "tool_permission_denied"


class ToolTimeoutError(ToolError):
    """The tool did not finish within its timeout."""

    code = "tool_timeout"


class TransientToolError(ToolError):
    """Raised by a tool for a temporary failure (worth retrying for read-only tools)."""

    code = "tool_transient_failure"


class ToolUnavailableError(TransientToolError):
    """The service behind a tool cannot be reached at all (connection refused or lost, not
    connected). Besides the tool's own circuit breaker it also counts against a ``circuit``
    the tool shares with others (e.g. one MCP server's), unlike a timeout or a 5xx of one call.
    """

    code = "tool_unavailable"


def cause_chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, then what caused it (``__cause__``, else ``__context__``), and so on, each
    once (a chain that loops ends): how to find the error an SDK wrapped in its own. (Not in
    ``__all__``, which lists the error classes.)"""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


_DISK_FULL = ("database or disk is full", "no space left on device", "disk quota exceeded")
_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


def storage_full(exc: BaseException) -> str:
    """Why ``exc`` (or what caused it) failed for a full disk ("" when it did not): an
    ``OSError`` with ``ENOSPC`` or ``EDQUOT``, SQLite's "database or disk is full", an index
    library's message naming it. (Not in ``__all__``, which lists the error classes.)"""
    for error in cause_chain(exc):
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return error.strerror or str(error)
        text = str(error)
        if any(sign in text.lower() for sign in _DISK_FULL):
            return text.splitlines()[0] if text else type(error).__name__
    return ""


STORAGE_FULL = (
    "the disk holding the workspace is full ({reason}): what was stored before is kept; "
    "free space on it, then try again"
)
"""What a caller is told when the workspace's disk is full (HTTP 507, ``storage_full``)."""


def storage_full_message(exc: BaseException) -> str:
    """:data:`STORAGE_FULL` for ``exc`` when it failed for a full disk (:func:`storage_full`),
    else ""."""
    reason = storage_full(exc)
    return STORAGE_FULL.format(reason=reason) if reason else ""
