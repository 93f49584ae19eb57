"""Traces and usage over HTTP: ``GET /v1/traces``, ``GET /v1/traces/{id}`` and
``GET /v1/usage``.

Scoped like sessions: a caller reads traces of their own tenant only, a user their own
turns, an admin every turn of the tenant. Another tenant's trace, or a user's request for a
colleague's, is 404 (as if it did not exist). With ``tracing = off`` both answer 404 with
the code ``tracing_off``.
"""

from __future__ import annotations

import functools
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from fastapi.responses import JSONResponse

from shelfhand.api.chat_routes import error_response
from shelfhand.api.deps import Caller, Service, ServiceDep
from shelfhand.core.context import UserContext
from shelfhand.core.offload import on_state_thread
from shelfhand.usage.budgets import standing

__all__ = ["router"]

router = APIRouter(prefix="/v1")

TraceId = Annotated[str, Path(pattern=r"^[A-Za-z0-9._:-]{8,64}$")]


def _sees_tenant(caller: UserContext) -> bool:
    return caller.permission_level in ("admin", "system")


def _tracing_off() -> JSONResponse:
    return error_response(
        404, "tracing is off on this service (set tracing = stored)", "tracing_off"
    )


async def _written(service: Service) -> None:
    """Write what the tracer has queued: a turn that has just ended is listed and read."""
    if service.tracer is not None:
        await service.chat.store(service.tracer.flush)


@router.get("/traces", tags=["traces"])
async def list_traces(
    service: ServiceDep,
    caller: Caller,
    limit: Annotated[int, Query(ge=1, le=500)] = 20,
    outcome: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Only turns that ended so (off_topic, refusal, model_timeout...); "
            "'any': every turn not answered with the model's answer as written.",
        ),
    ] = None,
) -> Any:
    """The newest traces the caller may read: their own turns, or every turn of their
    tenant for an admin."""
    store = service.traces
    if store is None:
        return _tracing_off()
    await _written(service)
    found = await service.chat.store(
        store.recent, caller, limit=limit, all_users=_sees_tenant(caller), outcome=outcome
    )
    return {"traces": [t.to_dict() for t in found]}


@router.get("/traces/{trace_id}", tags=["traces"])
async def get_trace(trace_id: TraceId, service: ServiceDep, caller: Caller) -> Any:
    """One trace: its summary and its spans (names, parents, times, attributes, events) in
    start order; 404 when the caller may not read it."""
    store = service.traces
    if store is None:
        return _tracing_off()
    await _written(service)
    sees_tenant = _sees_tenant(caller)
    summary = await service.chat.store(store.summary, trace_id, caller, all_users=sees_tenant)
    spans = await service.chat.store(store.spans, trace_id, caller, all_users=sees_tenant)
    if summary is None or spans is None:
        return error_response(404, "trace not found", "not_found")
    return {**summary.to_dict(), "spans": [s.to_dict() for s in spans]}


@router.get("/usage", tags=["traces"])
async def usage(
    service: ServiceDep,
    caller: Caller,
    days: Annotated[int, Query(ge=1, le=366)] = 30,
    user: Annotated[str | None, Query(description="Admins: one user of the tenant.")] = None,
) -> Any:
    """What was used by day and model over the last ``days`` days: the caller's own turns,
    or an admin's whole tenant (``user``: one user of it); and, with budgets, where each
    budget of theirs stands now (``budgets``: the tenant's, and the user's own; each with
    what of it model calls in flight hold, ``reserved``, until ``reserved_until``)."""
    ledger = service.ledger
    if ledger is None:  # pragma: no cover - the service always keeps one
        return {"usage": []}
    sees_tenant = _sees_tenant(caller)
    rows = await service.chat.store(
        ledger.report, caller, days=days, all_users=sees_tenant, user_id=user
    )
    reply: dict[str, Any] = {"days": days, "usage": [r.to_dict() for r in rows]}
    budgets = service.chat.budgets
    if budgets is not None:
        whose = caller
        if sees_tenant and user is not None:
            whose = UserContext(tenant_id=caller.tenant_id, user_id=user)
        tenant_only = sees_tenant and user is None
        # (on a state thread: the counters are a file or a network read away, and may wait)
        reply["budgets"] = await on_state_thread(
            functools.partial(standing, tenant_only=tenant_only),
            budgets.policy,
            budgets.book,
            whose,
        )
    return reply
