"""The HTTP service: ``create_app(app)`` turns a workspace into a FastAPI application.

::

    from shelfhand.app import App
    from shelfhand.api import create_app

    api = create_app(App.from_settings("./.shelfhand"))
    # uvicorn.run(api, host="127.0.0.1", port=8080)   — or: shelfhand serve

Everything that can be wrong in the configuration (API keys, retrieval mode, embedder, model
spec, MCP entries — stdio ones are refused in a service) fails in ``create_app``, before the
server listens. MCP servers connect in the lifespan, in the server's event loop.

Errors have one shape, :class:`~shelfhand.api.schemas.ErrorBody` (``detail``, ``code``,
``trace_id``): 401 missing/unknown key, 404 not yours or missing, 409 session busy, 413/415
upload limits, 422 invalid input, 502 model provider failure, 504 model timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from shelfhand.api import (
    chat_routes,
    job_routes,
    knowledge_routes,
    openai_routes,
    responses_routes,
    trace_routes,
)
from shelfhand.api.deps import (
    Service,
    ServiceConfig,
    ServiceDep,
    caller_for_header,
    hide_paths,
    unauthorized,
)
from shelfhand.api.schemas import ErrorBody, Health, Readiness
from shelfhand.api.text_bodies import BodyLimits, BodyOverLimit, TextBodies
from shelfhand.api.tracing import TraceIdMiddleware, current_trace_id
from shelfhand.core.context import UserContext
from shelfhand.core.errors import DependencyUnavailableError, storage_full_message
from shelfhand.core.version import __version__
from shelfhand.knowledge.ingest.worker import EmbeddingWorker
from shelfhand.service.chat import ChatService
from shelfhand.service.uploads import Uploads

if TYPE_CHECKING:
    from shelfhand.api.metrics import ServiceMetrics
    from shelfhand.app import App

logger = logging.getLogger(__name__)

__all__ = ["build_service", "create_app"]

STATIC_DIR = Path(str(files("shelfhand.api") / "static"))


def build_service(
    app: App, config: ServiceConfig, api_keys: Mapping[str, UserContext] | None = None
) -> Service:
    """Open the stores and build the toolkit and chat service (fails fast on bad settings)."""
    from shelfhand.agent.remember import REMEMBER_TOOL, make_remember_tool

    keys = dict(api_keys) if api_keys is not None else app.api_keys()
    model = app.chat_model()
    jobs = app.ingest_queue()  # database_url set: workers ingest, this service enqueues
    # one writer per workspace: uploads come here, or (with workers) go to them
    kb = app.open_knowledge(writer="serve" if jobs is None else None)
    sessions = app.session_store()
    memories = app.user_memory_store()
    registry = app.upload_registry()
    # built-ins only as opted in (the setting, or a subagent file naming one): a document
    # question is offered retrieve alone, not remember too
    builtins = app.opted_builtins()
    extra = [make_remember_tool(memories)] if REMEMBER_TOOL in builtins else []
    toolkit = app.toolkit(kb, extra=extra, builtins=builtins)
    approvals = app.approvals(timeout=300)
    ledger = app.usage_ledger()
    metrics = _service_metrics()
    tracer = app.tracer()  # None with tracing off: metrics count without spans
    traces = app.trace_store() if app.settings.tracing == "stored" else None
    budgets = app.budgets()
    if budgets is not None and metrics is not None:
        budgets = dataclasses.replace(budgets, count=metrics.count_budget_refusal)
    chat = ChatService(
        app=app,
        kb=kb,
        sessions=sessions,
        memories=memories,
        toolkit=toolkit,
        model=model,
        approvals=approvals,
        memory_token_budget=config.memory_token_budget,
        turn_timeout=config.turn_timeout or app.settings.turn_timeout,
        turn_lock=app.turn_lock(),
        cache_windows=app.settings.database_url is None,  # shared sessions: read each turn
        offload_stores=app.settings.database_url is not None,  # network round trips
        tracer=tracer,
        budgets=budgets,
        ledger=ledger,
        counter=metrics,
        prices=app.settings.prices,
    )
    uploads = Uploads(
        app.settings.workspace / "uploads",
        registry,
        max_file_bytes=config.max_file_bytes,
        max_files=config.max_files,
        max_tenant_bytes=config.max_tenant_bytes,
        max_tenant_files=config.max_tenant_files,
    )
    if jobs is None:  # (workers undo their own killed attempts, job by job)
        uploads.recover(kb)  # undo an upload a crash interrupted; empty the staging folder
    service = Service(
        app=app,
        config=config,
        api_keys=keys,
        kb=kb,
        sessions=sessions,
        memories=memories,
        toolkit=toolkit,
        chat=chat,
        uploads=uploads,
        jobs=jobs,
        traces=traces,
        tracer=tracer,
        metrics=metrics,
        ledger=ledger,
    )
    if metrics is not None:
        metrics.watch(app.governance(), kb, jobs)
    service.closers.extend([registry.close, memories.close, sessions.close, kb.close, app.close])
    service.closers.insert(0, ledger.close)
    if budgets is not None:
        service.closers.insert(0, budgets.book.close)
    if traces is not None:
        service.closers.insert(0, traces.close)
    return service


def _service_metrics() -> ServiceMetrics | None:
    """The service's ``/metrics`` counters; ``None`` without prometheus-client (an install
    of the server extra from before it was added)."""
    try:
        from shelfhand.api.metrics import ServiceMetrics
    except ImportError:
        logger.warning("/metrics is off: pip install 'shelfhand[server]' for prometheus-client")
        return None
    return ServiceMetrics()


def _mcp_configs(app: App) -> list[Any]:
    """MCP servers of the workspace, stdio refused (service mode); none without the extra."""
    try:
        from shelfhand.mcp.config import load_mcp_config
    except ImportError:  # the mcp extra is not installed
        return []
    return load_mcp_config(app.settings.workspace, service_mode=True)


def create_app(
    app: App,
    *,
    config: ServiceConfig | None = None,
    api_keys: Mapping[str, UserContext] | None = None,
) -> FastAPI:
    """The FastAPI application serving ``app``'s workspace.

    Args:
        app: The composition root (settings, model, knowledge).
        config: Limits and switches; defaults to :class:`ServiceConfig`.
        api_keys: Key → caller; defaults to the configured keys (``SHELFHAND_API_KEYS`` or
            ``[[api_keys]]`` in shelfhand.toml).

    Raises:
        ConfigurationError: Invalid settings, keys or MCP configuration.
    """
    cfg = config or ServiceConfig()
    app.settings.workspace.mkdir(parents=True, exist_ok=True)  # a new workspace starts empty
    mcp_configs = _mcp_configs(app)
    service = build_service(app, cfg, api_keys)

    @asynccontextmanager
    async def lifespan(api: FastAPI) -> AsyncIterator[None]:
        # load embedders and index readers before the server listens (and /readyz answers)
        await asyncio.to_thread(app.warm_up, service.kb)
        group = None
        if mcp_configs:
            from shelfhand.mcp.config import servers_from_config

            group = servers_from_config(mcp_configs)
            await service.toolkit.add_mcp(group)
        api.state.service = service
        # Ingest phase 2 in the background: uploads are keyword-searchable at once, vectors follow.
        # (With ingest workers, jobs embed what they store: this service only reads.)
        background = not service.kb.keyword_only and service.jobs is None
        embedder = EmbeddingWorker(service.kb) if background else None
        if embedder is not None:
            embedder.start()
        try:
            yield
        finally:
            await service.chat.tasks.close()  # background subagent tasks end with the server
            if embedder is not None:
                embedder.stop()
            if group is not None:
                try:
                    await group.aclose()
                except Exception:
                    logger.warning("closing MCP servers failed", exc_info=True)
            for close in service.closers:
                close()

    api = FastAPI(
        title="shelfhand",
        version=__version__,
        description="Cited answers from your documents and governed tools, over HTTP. "
        "Authenticate with `Authorization: Bearer <API key>`.",
        lifespan=lifespan,
        docs_url=None,  # served below from local assets: /docs must work offline
        redoc_url=None,
    )
    api.state.service = service
    api.include_router(chat_routes.router)
    api.include_router(knowledge_routes.router)
    api.include_router(job_routes.router)
    api.include_router(trace_routes.router)
    if service.metrics is not None:
        from shelfhand.api.metrics import router as metrics_router

        api.include_router(metrics_router)
    api.include_router(openai_routes.router)
    api.include_router(responses_routes.router)
    _mount_a2a(api, service)
    _add_health_routes(api)
    _add_docs_routes(api)
    _add_error_handlers(api, app.settings.workspace)
    api.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @api.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    # (the A2A routes answer such a body with a JSON-RPC parse error of their own)
    api.add_middleware(TextBodies, refuse=_not_text, skip=("/a2a/",))
    api.add_middleware(
        BodyLimits,
        refuse=_error,
        uploads=cfg.max_files * cfg.max_file_bytes + 1024 * 1024,
        upload_prefix=UPLOADS_PATH,
        admit=functools.partial(_admit_upload, service),
    )
    # outermost: every response gets a trace id, an unhandled error's 500 too
    api.add_middleware(TraceIdMiddleware, on_error=_internal_error)
    return api


def _mount_a2a(api: FastAPI, service: Service) -> None:
    """The A2A server (agent card and JSON-RPC), when the ``a2a`` extra is installed."""
    from importlib.util import find_spec

    if find_spec("a2a") is None:
        logger.debug("A2A is off: install shelfhand[a2a]")
        return
    from shelfhand.api.a2a import mount_a2a

    mount_a2a(api, service)


def _add_health_routes(api: FastAPI) -> None:
    @api.get("/healthz", tags=["health"])
    def healthz() -> Health:
        """Liveness: the process answers."""
        return Health(status="ok")

    @api.get(
        "/readyz",
        tags=["health"],
        responses={503: {"model": Readiness, "description": "Not ready."}},
    )
    async def readyz(service: ServiceDep) -> Response:
        """Readiness: the stores (and Redis, when configured) answer and the chat model is
        reachable (or not configured)."""
        store = "ok"
        try:
            await service.chat.store(service.sessions.check)  # off the loop for PostgreSQL
            await asyncio.to_thread(service.kb.count_chunks)
            redis = service.app.shared_state().redis
            if redis is not None:
                await asyncio.to_thread(redis.ping)
        except Exception as exc:
            store = f"unavailable: {type(exc).__name__}: {exc}"
        model_state = await _model_state(service)
        ready = store == "ok" and not model_state.startswith("unreachable")
        body = Readiness(
            status="ready" if ready else "not ready",
            store=store,
            model=model_state,
            workers=await _workers_state(service) if store == "ok" else None,
        )
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


async def _workers_state(service: Service) -> str | None:
    """How many ingest workers are alive (``None``: uploads are ingested in process)."""
    if service.jobs is None:
        return None
    try:
        alive = await asyncio.to_thread(service.jobs.live_workers)
    except Exception as exc:
        return f"unknown: {type(exc).__name__}: {exc}"
    if not alive:
        return "none alive: uploads wait in the queue (start `shelfhand worker`)"
    return f"{alive} alive"


async def _model_state(service: Service) -> str:
    model = service.chat.model
    if model is None:
        return "not configured (chat answers are cited passages from the knowledge agent)"
    check = getattr(model, "check", None)
    if not callable(check):
        return f"configured: {model.name}"
    try:
        async with asyncio.timeout(5):
            result = check()
            if asyncio.iscoroutine(result):
                await result
    except Exception as exc:
        return f"unreachable: {model.name}: {type(exc).__name__}: {exc}"
    return f"ok: {model.name}"


def docs_assets() -> Path | None:
    """Swagger UI and ReDoc files from the ``fastapi-offline`` package, if installed."""
    from importlib.util import find_spec

    if find_spec("fastapi_offline") is None:
        return None
    folder = Path(str(files("fastapi_offline") / "static"))
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


_NO_DOCS_ASSETS = """<!doctype html><html><head><meta charset="utf-8"><title>shelfhand API</title>
</head><body><h1>shelfhand API</h1><p>The interactive docs need the Swagger UI files of the
<code>fastapi-offline</code> package (part of the <code>server</code> extra), which is not
installed. The API description is at <a href="/openapi.json">/openapi.json</a>.</p></body></html>
"""


def _add_docs_routes(api: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc`` with their scripts served by this server, never
    from a CDN: the docs work on a machine without internet access."""
    from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
    from fastapi.responses import HTMLResponse

    assets = docs_assets()
    if assets is not None:
        api.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")

    def page(render: Callable[..., HTMLResponse], **urls: Any) -> HTMLResponse:
        if assets is None:
            return HTMLResponse(_NO_DOCS_ASSETS)
        return render(openapi_url="/openapi.json", title="shelfhand API", **urls)

    @api.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return page(
            get_swagger_ui_html,
            swagger_js_url="/docs-assets/swagger-ui-bundle.js",
            swagger_css_url="/docs-assets/swagger-ui.css",
            swagger_favicon_url="/docs-assets/favicon.png",
        )

    @api.get("/redoc", include_in_schema=False)
    def redoc() -> HTMLResponse:
        return page(
            get_redoc_html,
            redoc_js_url="/docs-assets/redoc.standalone.js",
            redoc_favicon_url="/docs-assets/favicon.png",
            with_google_fonts=False,
        )


def public_detail(detail: Any, workspace: Path) -> Any:
    """``detail`` with the workspace's absolute path taken out of its strings (files named
    relative to the workspace), and any other absolute path shortened to its file name: error
    bodies never show the server's folders."""
    if isinstance(detail, str):
        for root in {str(workspace.resolve()), str(workspace.absolute())}:
            detail = detail.replace(root + "/", "").replace(root, ".")
        return hide_paths(detail)
    if isinstance(detail, list):
        return [public_detail(d, workspace) for d in detail]
    if isinstance(detail, dict):
        return {k: public_detail(v, workspace) for k, v in detail.items()}
    return detail


def _not_text(path: str, problem: str) -> Response:
    """The answer to a JSON body that is not Unicode text (see
    :mod:`~shelfhand.api.text_bodies`): the route's own answer to such input, 400 in
    OpenAI's body on the OpenAI-compatible routes, else 422."""
    if path in openai_routes.OPENAI_PATHS:
        return openai_routes.openai_error(400, f"invalid request: body: {problem}", "invalid_input")
    detail = [{"loc": ["body"], "msg": problem, "type": "string_unicode"}]
    body = ErrorBody(detail=detail, code="invalid_input", trace_id=current_trace_id())
    return JSONResponse(body.model_dump(), status_code=422)


def _add_error_handlers(api: FastAPI, workspace: Path) -> None:
    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if request.url.path in openai_routes.OPENAI_PATHS:
            detail = public_detail(exc.detail, workspace)
            message = detail if isinstance(detail, str) else json.dumps(detail)
            code = "invalid_api_key" if exc.status_code == 401 else f"http_{exc.status_code}"
            return openai_routes.openai_error(exc.status_code, message, code, exc.headers)
        body = ErrorBody(
            detail=public_detail(exc.detail, workspace),
            code=f"http_{exc.status_code}",
            trace_id=current_trace_id(),
        )
        return JSONResponse(body.model_dump(), status_code=exc.status_code, headers=exc.headers)

    @api.exception_handler(RequestValidationError)
    async def invalid_input(request: Request, exc: RequestValidationError) -> Response:
        # only loc/msg/type: echoing the input back could leak it or fail to encode
        problems = [
            {
                "loc": [str(p) for p in e.get("loc", ())],
                "msg": str(e.get("msg", "")),
                "type": str(e.get("type", "")),
            }
            for e in exc.errors()
        ]
        if request.url.path in openai_routes.OPENAI_PATHS:  # OpenAI answers 400
            where = ", ".join(f"{'.'.join(p['loc'])}: {p['msg']}" for p in problems)
            return openai_routes.openai_error(400, f"invalid request: {where}", "invalid_input")
        body = ErrorBody(detail=problems, code="invalid_input", trace_id=current_trace_id())
        return JSONResponse(body.model_dump(), status_code=422)

    @api.exception_handler(BodyOverLimit)
    async def body_over_limit(request: Request, exc: BodyOverLimit) -> Response:
        return _error(request.url.path, 413, str(exc.detail), exc.code)

    @api.exception_handler(DependencyUnavailableError)
    async def dependency_down(request: Request, exc: DependencyUnavailableError) -> Response:
        logger.warning("%s %s: %s", request.method, request.url.path, exc)
        code = f"{exc.dependency}_unavailable"
        headers = {"Retry-After": chat_routes.DEPENDENCY_RETRY_AFTER}
        return _error(request.url.path, 503, str(exc), code, headers)


UPLOADS_PATH = "/v1/knowledge/files"
"""Uploads (and the list and deletes of uploaded files, under the same path)."""


def _admit_upload(service: Service, scope: Scope) -> Response | None:
    """401 for an upload whose caller has no valid key, before its files are read (they
    are spooled to disk before the route's own check of the key runs)."""
    headers = dict(scope.get("headers", ()))
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    if caller_for_header(service, authorization) is not None:
        return None
    refused = unauthorized(presented=bool(authorization))
    return chat_routes.error_response(
        401, str(refused.detail), "http_401", dict(refused.headers or {})
    )


def _error(
    path: str, status: int, message: str, code: str, headers: dict[str, str] | None = None
) -> Response:
    """An error answer in OpenAI's body on the OpenAI-compatible routes, else shelfhand's."""
    if path in openai_routes.OPENAI_PATHS:
        return openai_routes.openai_error(status, message, code, headers)
    return chat_routes.error_response(status, message, code, headers)


def _internal_error(scope: Scope, exc: Exception) -> Response:
    """The 500 answer to an unhandled error, logged with the request's trace id (sent by
    :class:`TraceIdMiddleware` while the id is still set); 507 for a full disk."""
    path, method = str(scope.get("path", "")), scope.get("method")
    full = storage_full_message(exc)
    if full:  # no bug: the disk is full, and the caller is told so
        logger.error("%s %s: %s", method, path, full)
        return _error(path, 507, full, "storage_full")
    logger.error("unhandled error on %s %s", method, path, exc_info=exc)
    return _error(path, 500, "internal error; the trace id finds it in the logs", "internal_error")
