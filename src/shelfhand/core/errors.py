"""Errors, for two audiences.

Model-facing errors describe a problem with a tool call that the model can fix or work around
(unknown tool, bad arguments, a failing tool). They become a tool *result* with
``is_error=True`` and the run continues.

Caller-facing errors propagate to the program or person that runs the agent, with a message
that says what to do (bad configuration, a model provider that is down, an exhausted script).

::

    ShelfhandError
    ├── ConfigurationError          wrong or missing settings (fails fast at start-up)
    ├── ModelError                  the chat model could not answer
    │   ├── ModelTimeoutError       the provider did not answer in time
    │   ├── ModelProviderError      the provider answered with an error (HTTP status kept)
    │   └── ContextBudgetError      the request cannot fit the model's context window
    ├── ScriptExhaustedError        a ScriptedModel ran out of turns (tests)
    ├── KnowledgeError              ingest / store / retrieval problems
    │   ├── UnreadableDocumentError a file that cannot be read (reported, then skipped)
    │   │   └── DocumentTooLarge    over a reading limit (bytes, characters, pages, time…)
    │   ├── WorkspaceBusyError      another process (server or ingest) writes the workspace
    │   └── EmbeddingUnavailableError the embedding service is out of quota or down
    └── ToolError                   model-facing: becomes an error tool result
        ├── UnknownToolError
        ├── ToolArgumentError       arguments are not valid JSON or fail validation
        ├── ToolPermissionError     the caller may not use this tool
        ├── ToolTimeoutError
        └── TransientToolError      raised by a tool for a failure worth retrying
            └── ToolUnavailableError the service behind the tool cannot be reached
"""

from __future__ import annotations


class ShelfhandError(Exception):
    """Base class of every error raised by shelfhand."""


class ConfigurationError(ShelfhandError):
    """Settings are wrong or missing; the message says which and how to fix it."""


class ModelError(ShelfhandError):
    """The chat model could not produce an answer."""


class ModelTimeoutError(ModelError):
    """The model provider did not answer within the configured timeout."""


class ModelProviderError(ModelError):
    """The model provider answered with an error."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ContextBudgetError(ModelError):
    """The request cannot fit the model's context window, even with tool results cut; nothing
    was sent (the message says how many tokens were needed and how many fit)."""


class ScriptExhaustedError(ShelfhandError):
    """A ``ScriptedModel`` was asked for more turns than its script holds."""


class KnowledgeError(ShelfhandError):
    """A problem in ingest, storage or retrieval of documents."""


class UnreadableDocumentError(KnowledgeError):
    """A file could not be read (corrupt, encrypted, unsupported). It is skipped."""


class EmbeddingUnavailableError(KnowledgeError):
    """The embedding service stayed unavailable (quota, rate limit, outage) after retries.

    Retrieval catches this and falls back to keyword search instead of failing.
    """


class ToolError(ShelfhandError):
    """A model-facing tool problem: reported to the model as an error result."""


class UnknownToolError(ToolError):
    """The model called a tool that does not exist (or is not visible to this caller)."""


class ToolArgumentError(ToolError):
    """The tool call's arguments are not valid JSON or do not match the schema."""


class ToolPermissionError(ToolError):
    """The caller may not use this tool."""


class ToolTimeoutError(ToolError):
    """The tool did not finish within its timeout."""


class TransientToolError(ToolError):
    """Raised by a tool for a temporary failure (worth retrying for read-only tools)."""


class DocumentTooLarge(UnreadableDocumentError):
    """A file is over one of the reading limits (bytes, characters, pages, nesting, time,
    memory); the message names the limit and how to raise it. It is skipped like any
    unreadable file."""


class WorkspaceBusyError(KnowledgeError):
    """Another process writes to the workspace (a server or an ingest); the message names it.

    Attributes:
        holder: What holds the workspace: ``"serve"`` or ``"ingest"`` (or ``""`` if unknown).
        pid: The process id of the holder, when known.
    """

    def __init__(self, message: str, *, holder: str = "", pid: int | None = None) -> None:
        super().__init__(message)
        self.holder = holder
        self.pid = pid


class ToolUnavailableError(TransientToolError):
    """The service behind a tool cannot be reached at all (connection refused or lost, not
    connected). Besides the tool's own circuit breaker it also counts against a ``circuit``
    the tool shares with others (e.g. one MCP server's), unlike a timeout or a 5xx of one call.
    """


class DependencyUnavailableError(ShelfhandError):
    """A service shelfhand depends on (PostgreSQL, Redis) cannot be reached right now.

    The service answers 503 with the message (which names the dependency, never its
    password) and ``Retry-After``; it never answers from a stale local copy. The next request
    tries again, so the service recovers by itself when the dependency returns.

    Attributes:
        dependency: ``"postgresql"`` or ``"redis"``.
    """

    def __init__(self, message: str, *, dependency: str) -> None:
        super().__init__(message)
        self.dependency = dependency
