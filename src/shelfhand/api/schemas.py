"""Wire formats of the HTTP API (pydantic lives here, at the edge)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from shelfhand.core.messages import Citation
from shelfhand.knowledge.evidence.citations import label
from shelfhand.sessions.store import SessionInfo

MAX_CONTENT_CHARS = 32_000


class ErrorBody(BaseModel):
    """Every error answer: what went wrong, a stable code, and the request's trace id."""

    detail: Any = Field(description="What went wrong (a list of problems for 422).")
    code: str = ""
    trace_id: str = ""


class CreateSession(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(default="", max_length=200)


class SessionOut(BaseModel):
    id: str
    title: str
    created_at: float
    updated_at: float
    state: Literal["idle", "failed"]
    message_count: int
    last_trace_id: str = ""
    last_error: str = ""

    @classmethod
    def of(cls, info: SessionInfo) -> SessionOut:
        return cls(
            id=info.id,
            title=info.title,
            created_at=info.created_at,
            updated_at=info.updated_at,
            state=info.state,
            message_count=info.message_count,
            last_trace_id=info.last_trace_id,
            last_error=info.last_error,
        )


class SessionList(BaseModel):
    sessions: list[SessionOut]


class SessionDetail(SessionOut):
    messages: list[dict[str, Any]] = Field(
        description="The transcript: messages as in shelfhand.core.messages.Message.to_dict."
    )


class PostMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    stream: bool = Field(
        default=True, description="true: an SSE stream of events; false: one JSON reply."
    )


class Decision(BaseModel):
    """A human's answer to an ``approval_required`` event."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    reason: str = Field(default="", max_length=2000)


class DecisionOut(BaseModel):
    approval_id: str
    approved: bool


class CitationOut(BaseModel):
    index: int
    source: str
    title: str = ""
    section: str = ""
    page: int | None = None
    doc_id: str = ""
    chunk_id: str = ""
    text: str = ""
    score: float | None = None
    relevance: float | None = Field(
        default=None,
        description="The search's evidence strength for the passage, 0..1, comparable across "
        "queries (passages under the workspace's min_relevance are not returned).",
    )
    cosine: float | None = Field(
        default=None,
        description="The passage's cosine to the query in the vector space that scores it "
        "best: how near in meaning, whatever words it shares (null for a keyword search and "
        "for embedders other than the built-in ones).",
    )
    start: int | None = Field(
        default=None, description="Where the passage starts in its document's text."
    )
    end: int | None = None
    spans: list[tuple[int, int]] = Field(
        default_factory=list,
        description="A compressed passage: the document offsets of the pieces its text keeps "
        "(joined with '…' where text was left out); empty for a whole passage.",
    )
    conflicts_with: list[int] = Field(
        default_factory=list,
        description="Numbers of passages of the same evidence that disagree with this one.",
    )
    conflict_note: str = Field(
        default="",
        description="One line per disagreement, e.g. '[2] and [4] disagree: 12 个月 vs 24 个月; "
        "[4] is newer (version 2, effective 2025-01-01).', in Chinese for a query in Chinese "
        "('[2] 与 [4] 不一致：12 个月 vs 24 个月；[4] 较新（第 2 版，2025-01-01 生效）。').",
    )
    label: str = Field(default="", description="title › section (source, p. N)")

    @classmethod
    def of(cls, c: Citation) -> CitationOut:
        return cls(**c.to_dict(), label=label(c))


class ToolStep(BaseModel):
    call_id: str
    name: str
    arguments: str
    content: str = ""
    is_error: bool = False
    failure: str = Field(
        default="",
        description="Why the tool did not answer, for people (`failed: timed out after 5 s`, "
        "`unavailable: circuit open after repeated failures`, `returned an error: …`); empty "
        "when it answered or when the model got the call wrong (`content` says how).",
    )
    duration_ms: float = 0.0


class ChatReply(BaseModel):
    """The answer of a turn when ``stream`` is false."""

    session_id: str
    trace_id: str
    output: str
    citations: list[CitationOut]
    unknown_citations: list[int] = Field(
        default_factory=list,
        description="Numbers the answer cites that no passage of the turn has (not links).",
    )
    grounding: dict[str, Any] | None = Field(
        default=None,
        description="The grounding check of the answer: grounded, method and per sentence "
        "supported / unsupported with the supporting passage, the missing numbers or codes "
        "and the misplaced ones (a table's number from another row than the one named, "
        "the question's code over another code's entry) "
        "(null: not checked, e.g. no passages).",
    )
    extractive: bool = Field(
        default=False,
        description="The output is the passages' own sentences, not the model's words.",
    )
    fallback_reason: str = Field(
        default="",
        description="Why the model's answer was replaced: ungrounded, refusal, declined, "
        "tool_failed, "
        "prompt_echo, posed_as_quoted, heading_echo, off_topic, unanswered, partial, "
        "other_language, repeated_call, "
        "max_iters, "
        "empty, no_model, "
        "budget_exceeded, or "
        "model_error / model_timeout (the chat model failed after the passages were found; "
        "see error).",
    )
    budget: dict[str, Any] | None = Field(
        default=None,
        description="The budget that ran out mid-turn (fallback_reason budget_exceeded: the "
        "output is the passages' own sentences): budget, scope, limit, used, reset_at.",
    )
    error: str = Field(
        default="",
        description="How the chat model failed, when the output is the passages' sentences "
        "because it did (fallback_reason model_error or model_timeout).",
    )
    tool_steps: list[ToolStep]
    stop_reason: str
    usage: dict[str, int | float] = Field(
        default_factory=dict,
        description="What the turn used, its subagents included: input_tokens, "
        "output_tokens, model_calls, tool_calls, retrievals, and cost when the models are "
        "priced (setting prices).",
    )
    events: list[dict[str, Any]] = Field(
        default_factory=list, description="Other events of the turn (e.g. approvals needed)."
    )


class SourceOut(BaseModel):
    source: str
    filename: str
    doc_type: str = ""
    documents: int = 0
    chunks: int = 0
    bytes: int = 0
    uploaded_at: float = 0.0
    uploaded_by: str = ""


class SourceList(BaseModel):
    sources: list[SourceOut]


class IngestFailureOut(BaseModel):
    source: str
    reason: str


class IngestOut(BaseModel):
    """What an upload did."""

    added: list[str]
    updated: list[str]
    unchanged: list[str]
    chunks: int
    embedding_failed: list[IngestFailureOut] = Field(
        default_factory=list,
        description="Stored and keyword-searchable, but without vectors (retried next ingest).",
    )
    seconds: float
    job_id: str | None = Field(
        default=None,
        description="The ingest job that did it, when workers ingest (database_url is set).",
    )


class JobProgressOut(BaseModel):
    """Where an ingest job is (phase queued, index, embed or done)."""

    phase: str = "queued"
    files_done: int = 0
    files_total: int = 0
    bytes_done: int = 0
    bytes_total: int = 0
    chunks_embedded: int = 0
    chunks_to_embed: int = 0


class JobOut(BaseModel):
    """An ingest job run by ``shelfhand worker`` (uploads when database_url is set)."""

    id: str
    kind: str
    status: Literal["queued", "running", "done", "failed"]
    sources: list[str]
    files: int
    bytes: int
    attempts: int = Field(description="Runs so far (a retried job, e.g. after a worker died).")
    progress: JobProgressOut
    error: str | None = Field(default=None, description="Why it failed (or is being retried).")
    code: str | None = None
    result: IngestOut | None = Field(default=None, description="What it did, once done.")
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    note: str | None = Field(
        default=None,
        description="Why the upload answered before its job was done, when it did not wait "
        "the whole job_wait: no ingest worker is alive.",
    )


class JobList(BaseModel):
    jobs: list[JobOut]


class SearchOut(BaseModel):
    query: str
    results: list[CitationOut]
    degraded: str | None = Field(
        default=None, description="Why search ran with less than hybrid retrieval, if it did."
    )


class ToolOut(BaseModel):
    name: str
    description: str
    parameters: dict[str, Any]
    read_only: bool
    permission: str


class ToolList(BaseModel):
    tools: list[ToolOut]


class MemoryOut(BaseModel):
    id: str
    content: str
    created_at: float


class MemoryList(BaseModel):
    memories: list[MemoryOut]


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: Literal["ready", "not ready"]
    store: str
    model: str
    workers: str | None = Field(
        default=None,
        description="With ingest workers (database_url): how many are alive; none alive "
        "does not make the service not ready (uploads wait in the queue).",
    )
