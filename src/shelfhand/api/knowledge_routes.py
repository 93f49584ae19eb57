"""Routes for the knowledge base (``/v1/knowledge``) and the tool list (``/v1/tools``).

Uploads are all or nothing (see :mod:`shelfhand.service.uploads`); search, listing and deleting
see only the caller's tenant, and only sources the caller may read (permission tags); see
:mod:`shelfhand.service.source_access` for who may replace or delete what.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, File, Form, HTTPException, Path, Query, Response, UploadFile
from fastapi.responses import JSONResponse, StreamingResponse

from shelfhand.api.chat_routes import error_response
from shelfhand.api.deps import Caller, Service, ServiceDep, sse_event
from shelfhand.api.job_routes import queued_upload
from shelfhand.api.schemas import (
    CitationOut,
    ErrorBody,
    IngestFailureOut,
    IngestOut,
    JobOut,
    SearchOut,
    SourceList,
    SourceOut,
    ToolList,
    ToolOut,
)
from shelfhand.api.tracing import current_trace_id
from shelfhand.core.context import UserContext
from shelfhand.knowledge.evidence.citations import prepare_evidence, to_citations
from shelfhand.knowledge.ingest.ingestor import IngestEvent, IngestReport
from shelfhand.knowledge.retrieval.hybrid import MAX_QUERY_CHARS
from shelfhand.service import searches
from shelfhand.service.source_access import access
from shelfhand.service.uploads import Staged, UploadRejected

router = APIRouter(prefix="/v1")

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "Missing or unknown API key."},
}
_UPLOAD_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    409: {"model": ErrorBody, "description": "A source of that name belongs to someone else."},
    413: {
        "model": ErrorBody,
        "description": "A file (or the upload) is too large, or the tenant's quota is full.",
    },
    415: {"model": ErrorBody, "description": "A file type the readers do not understand."},
    422: {"model": ErrorBody, "description": "Bad names or unreadable files; nothing stored."},
}


def _ingest_out(report: IngestReport) -> IngestOut:
    return IngestOut(
        added=list(report.added),
        updated=list(report.updated),
        unchanged=list(report.unchanged),
        chunks=report.chunks,
        embedding_failed=[
            IngestFailureOut(source=f.source, reason=f.reason) for f in report.embedding_failed
        ],
        seconds=round(report.total_seconds, 4),
    )


MAX_TAGS = 16
_TAG_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@router.post(
    "/knowledge/files",
    tags=["knowledge"],
    responses={
        **_UPLOAD_ERRORS,
        200: {
            "description": "The ingest report; with stream=true an SSE stream of "
            "ingest_progress events and one ingest_done (or error) event.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        202: {
            "model": JobOut,
            "description": "With ingest workers: the job, queued or running (wait=false, or "
            "not done within the wait); poll GET /v1/knowledge/jobs/{id}.",
        },
    },
    response_model=IngestOut,
)
async def upload_files(
    service: ServiceDep,
    caller: Caller,
    files: Annotated[list[UploadFile], File(description="One or more documents.")],
    stream: Annotated[bool, Query(description="Stream ingest progress as SSE.")] = False,
    wait: Annotated[
        bool,
        Query(
            description="With ingest workers (database_url): follow the job and answer its "
            "result; false answers 202 with the job to poll at once."
        ),
    ] = True,
    tags: Annotated[
        list[str] | None,
        Form(
            description="Permission tags (repeatable): only callers with one of these roles "
            "(or admin) may retrieve the documents; none = the whole tenant. A replaced "
            "source keeps its tags unless tags are given, and always keeps the tags the "
            "caller does not hold (unless admin)."
        ),
    ] = None,
) -> Response:
    """Upload documents and ingest them for the caller's tenant (all or nothing)."""
    uploads = service.uploads
    bad = [t for t in tags or () if not _TAG_RE.match(t)]
    if bad or len(tags or ()) > MAX_TAGS:
        return error_response(
            422,
            f"tags must be at most {MAX_TAGS} names of 1-64 letters, digits, '_', '-', '.' "
            f"or ':' (got {bad or tags})",
            "invalid_tags",
        )
    permission_tags = tuple(tags) if tags else None  # None: replacements keep their tags
    try:
        staged = await uploads.receive(files, caller)
    except UploadRejected as exc:
        return error_response(exc.status, str(exc), exc.code)
    try:  # read within the limits the knowledge base ingests with
        await asyncio.to_thread(uploads.validate, staged, caller, service.kb.read_limits)
    except UploadRejected as exc:
        uploads.discard(staged)
        return error_response(exc.status, str(exc), exc.code)
    except BaseException:
        uploads.discard(staged)
        raise
    if service.jobs is not None:  # workers ingest: enqueue a job, follow it
        try:
            return await queued_upload(
                service, service.jobs, staged, caller, permission_tags, stream=stream, wait=wait
            )
        except UploadRejected as exc:
            return error_response(exc.status, str(exc), exc.code)
        finally:
            uploads.discard(staged)
    if stream:
        return StreamingResponse(
            _ingest_events(service, staged, caller, permission_tags),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        report = await asyncio.to_thread(
            uploads.ingest, staged, caller, service.kb, None, permission_tags
        )
    except UploadRejected as exc:
        return error_response(exc.status, str(exc), exc.code)
    finally:
        uploads.discard(staged)
    return JSONResponse(_ingest_out(report).model_dump())


async def _ingest_events(
    service: Service,
    staged: Staged,
    caller: UserContext,
    permission_tags: tuple[str, ...] | None,
) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

    def progress(event: IngestEvent) -> None:  # called from the ingest thread
        data = {
            "type": "ingest_progress",
            "kind": event.kind,
            "source": event.source,
            "done": event.done,
            "total": event.total,
        }
        loop.call_soon_threadsafe(queue.put_nowait, data)

    task = asyncio.ensure_future(
        asyncio.to_thread(
            service.uploads.ingest, staged, caller, service.kb, progress, permission_tags
        )
    )
    # runs after every progress item already scheduled from the thread (FIFO ready queue)
    task.add_done_callback(lambda _: queue.put_nowait(None))
    n = 0
    try:
        while (item := await queue.get()) is not None:
            n += 1
            yield sse_event(item, n)
        try:
            report = task.result()
            done: dict[str, Any] = {"type": "ingest_done", **_ingest_out(report).model_dump()}
        except UploadRejected as exc:
            done = {"type": "error", "status": exc.status, "code": exc.code, "message": str(exc)}
        yield sse_event(done, n + 1)
    finally:
        if not task.done():  # client went away: let the ingest finish, then clean up
            await asyncio.shield(task)
        service.uploads.discard(staged)


@router.get("/knowledge/sources", tags=["knowledge"], responses=_ERRORS)
def list_sources(service: ServiceDep, caller: Caller) -> SourceList:
    """Sources uploaded by the caller's tenant that the caller may read (or owns), newest
    first."""
    stats = {s.source: s for s in service.kb.sources()}
    records = service.uploads.registry.for_tenant(caller.tenant_id)
    stored = service.kb.source_access([r.source for r in records])
    out = []
    for record in records:
        if access(caller, stored.get(record.source), record) == "none":
            continue
        info = stats.get(record.source)
        out.append(
            SourceOut(
                source=record.source,
                filename=record.filename,
                doc_type=info.doc_type if info else "",
                documents=info.documents if info else 0,
                chunks=info.chunks if info else 0,
                bytes=record.bytes,
                uploaded_at=record.uploaded_at,
                uploaded_by=record.uploaded_by,
            )
        )
    return SourceList(sources=out)


@router.delete(
    "/knowledge/sources/{source:path}",
    status_code=204,
    tags=["knowledge"],
    responses={
        **_ERRORS,
        403: {"model": ErrorBody, "description": "A source the caller may read but not delete."},
        404: {"model": ErrorBody, "description": "No such source (that the caller may read)."},
    },
)
async def delete_source(
    source: Annotated[str, Path(min_length=1, max_length=400)], service: ServiceDep, caller: Caller
) -> Response:
    """Remove a source the caller's tenant uploaded (its documents, chunks and file).

    Tagged sources need one of their tags as a role, ownership or admin.
    """
    try:
        deleted = await asyncio.to_thread(service.uploads.delete, source, caller, service.kb)
    except UploadRejected as exc:
        return error_response(exc.status, str(exc), exc.code)
    if not deleted:
        raise HTTPException(status_code=404, detail="source not found")
    return Response(status_code=204)


@router.get("/knowledge/search", tags=["knowledge"], responses=_ERRORS)
async def search(
    service: ServiceDep,
    caller: Caller,
    q: Annotated[
        str, Query(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for.")
    ],
    top_k: Annotated[int, Query(ge=1, le=20)] = 5,
    mode: Annotated[Literal["hybrid", "keyword", "vector"], Query()] = "hybrid",
) -> SearchOut:
    """Cited passages the caller may read (the knowledge agent: no model, no tokens, except
    with ``rerank = "llm"``: its call is reserved against the caller's budgets, counted and in
    ``GET /v1/usage``); ``degraded`` says why this search fell back to keywords, if it did."""
    found = await searches.search(
        service.chat, q, k=top_k, user=caller, mode=mode, trace_id=current_trace_id()
    )
    citations = prepare_evidence(to_citations(list(found.hits)), q)
    return SearchOut(
        query=q,
        results=[CitationOut.of(c) for c in citations],
        degraded=found.degraded_reason,
    )


@router.get("/tools", tags=["tools"], responses=_ERRORS)
def list_tools(service: ServiceDep, caller: Caller) -> ToolList:
    """The tools the model may call on the caller's behalf (filtered by permission)."""
    out = []
    for t in service.toolkit.visible_tools(caller):
        fn = t.schema()["function"]
        out.append(
            ToolOut(
                name=t.name,
                description=t.description,
                parameters=fn.get("parameters", {}),
                read_only=t.read_only,
                permission=t.permission,
            )
        )
    return ToolList(tools=out)
