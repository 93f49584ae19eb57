"""The composition root: the one place where concrete classes are chosen from settings.

Everything else receives its collaborators; tests build an :class:`App` from fakes the same way
production builds it from settings.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import AnswerRetrieval, Settings, check_answer_retrieval
from shelfhand.core.settings_table import BUILTIN_TOOLS

if TYPE_CHECKING:
    from shelfhand.agent.agent import Agent
    from shelfhand.agent.answer_check import AnswerCheck, AnswerJudge
    from shelfhand.agent.memory import ConversationMemory
    from shelfhand.agent.retrieve import KnowledgeAgent
    from shelfhand.agent.rewrite import QueryRewriter
    from shelfhand.agent.subagents import Subagent
    from shelfhand.agent.supervisor import Supervisor
    from shelfhand.agent.tasks import TaskRegistry
    from shelfhand.backends.shared import SharedState
    from shelfhand.core.context import UserContext
    from shelfhand.core.pricing import ModelPrice
    from shelfhand.core.tracing import SpanProcessor, Tracer
    from shelfhand.jobs.queue import IngestQueue
    from shelfhand.knowledge.analysis import SynonymTable
    from shelfhand.knowledge.base import KnowledgeBase
    from shelfhand.knowledge.embeddings.router import EmbeddingRouter
    from shelfhand.knowledge.reading.limits import ReadLimits
    from shelfhand.knowledge.retrieval.rerank import Reranker
    from shelfhand.knowledge.stores.tantivy import Access
    from shelfhand.knowledge.stores.workspace_lock import Role
    from shelfhand.models.base import ChatModel
    from shelfhand.service.turn_budgets import Budgets
    from shelfhand.service.turn_lock import TurnLock
    from shelfhand.service.uploads import UploadRecords
    from shelfhand.sessions.store import SessionStore
    from shelfhand.sessions.user_memory import UserMemoryStore
    from shelfhand.tools.approvals import Approvals
    from shelfhand.tools.audit import AuditLog
    from shelfhand.tools.governance import Governance
    from shelfhand.tools.toolkit import Toolkit
    from shelfhand.traces.store import SqlTraceStore
    from shelfhand.usage.budgets import BudgetBook, BudgetPolicy
    from shelfhand.usage.ledger import SqlUsageLedger

logger = logging.getLogger(__name__)

DEMO_SHOP = "demo-shop.db"
"""The demo shop database of ``serve --demo-tools``, in the workspace."""


def _remote(spec: Subagent) -> Subagent:
    """``spec`` with its A2A client, when it names a remote agent (``a2a: URL``)."""
    if not spec.a2a or spec.agent is not None:
        return spec
    try:
        from shelfhand.providers.a2a_client import RemoteA2AAgent
    except ImportError as exc:
        raise ConfigurationError(
            f"subagent {spec.id!r} ({spec.origin}) is a remote A2A agent: "
            "pip install 'shelfhand[a2a]'"
        ) from exc
    agent = RemoteA2AAgent(
        spec.a2a,
        name=spec.id,
        token_env=spec.a2a_token_env,
        forward_identity=spec.forward_identity,
    )
    return dataclasses.replace(spec, agent=agent)


@dataclass(slots=True)
class App:
    """Builds models, knowledge bases, toolkits and agents from :class:`Settings`.

    Args:
        settings: Where and how.
        model: A chat model to use instead of the configured one (tests, demos).
        router: Embedders to use instead of the configured ones.
    """

    settings: Settings
    model: ChatModel | None = None
    router: EmbeddingRouter | None = None
    _model_built: bool = field(default=False, repr=False)
    _governance: Governance | None = field(default=None, repr=False)
    _shared: SharedState | None = field(default=None, repr=False)
    _ingest_queue: IngestQueue | None = field(default=None, repr=False)
    _tracer: Tracer | None = field(default=None, repr=False)
    extra_tools: tuple[Any, ...] = ()
    """Tools every toolkit of this app offers besides ``retrieve`` (e.g. :meth:`use_demo_tools`)."""
    _own_tools: list[tuple[str, Any]] | None = field(default=None, init=False, repr=False)

    @classmethod
    def from_settings(cls, workspace: str | Path | None = None) -> App:
        """Read settings (env, ``shelfhand.toml``); invalid explicit settings fail here."""
        return cls(settings=Settings.load(workspace))

    # --- chat model -----------------------------------------------------------------------
    def chat_model(self) -> ChatModel | None:
        """The configured chat model, or ``None`` when none is configured.

        ``scripted:<path.json>`` plays a script file instead of calling a provider (demos,
        end-to-end tests and load benchmarks; see :func:`shelfhand.testing.load_scripted_model`).
        """
        if self.model is None and not self._model_built:
            self._model_built = True
            s = self.settings
            if s.model and s.model.startswith("scripted:"):
                from shelfhand.models.scripted import load_scripted_model

                self.model = load_scripted_model(s.model.split(":", 1)[1])
            elif s.model:
                from shelfhand.providers.openai_chat import OpenAIChatModel

                self.model = OpenAIChatModel.from_env(s)  # model, base_url, api_key, timeout
        return self.model

    # --- knowledge ------------------------------------------------------------------------
    def knowledge_exists(self) -> bool:
        """Whether there is a knowledge store to open: always with a ``database_url`` (the
        PostgreSQL store), else when the workspace holds ``knowledge.db``."""
        if self.settings.database_url:
            return True
        return (self.settings.workspace / "knowledge.db").is_file()

    def knowledge_store(self) -> str:
        """Which knowledge store this app uses, for status output (no password)."""
        from shelfhand.backends.urls import redact_url

        if self.settings.database_url:
            store = f"postgresql ({redact_url(self.settings.database_url)})"
        else:
            store = f"embedded ({self.settings.workspace})"
        if self.settings.qdrant_url:
            store += f", search on qdrant ({redact_url(self.settings.qdrant_url)})"
        return store

    def check_database(self) -> None:
        """Provider modes (R11): with a ``database_url`` the knowledge lives in PostgreSQL in
        every mode (``auto``, ``pg``, ``simple``, ``keyword``), never in a local copy; it must
        be reachable and have pgvector, or start-up fails here.

        Raises:
            ConfigurationError: unreachable, or pgvector missing (what to do is in the message).
        """
        if self.settings.database_url:
            from shelfhand.backends.postgres import check_postgres

            check_postgres(self.settings.database_url, need_vector=True)

    def embedding_router(self) -> tuple[EmbeddingRouter | None, str | None]:
        """The router for the configured mode and, for ``auto``, why it degraded (if it did).

        ``simple`` needs working embedders and fails fast with :class:`ConfigurationError`;
        ``keyword`` uses none; ``auto`` tries the embedders and falls back to keyword search.
        """
        mode = self.settings.retrieval_mode
        if mode == "keyword":
            return None, None
        if self.router is not None:
            return self.router, None
        # (an unknown name fails in any mode)
        router = _build_router(self.settings.embedder, cross_language=self.settings.cross_language)
        try:
            if mode == "simple":  # explicit: a broken model must fail now, at start-up
                for space in router.routed_spaces:
                    router.embedder(space).embed_query("warm up")
            else:  # auto: check cheaply; a failure later degrades to keyword search
                for space in router.routed_spaces:
                    check = getattr(router.embedder(space), "check", None)
                    if callable(check):
                        check()
        except Exception as exc:
            if mode == "simple":
                raise ConfigurationError(
                    f"retrieval mode 'simple' needs a working embedder ({self.settings.embedder}): "
                    f"{exc}. Fix the embedder or set SHELFHAND_RETRIEVAL_MODE=keyword."
                ) from exc
            reason = f"embeddings unavailable ({exc}); using keyword search only"
            logger.warning("retrieval mode auto degraded: %s", reason)
            return None, reason
        self.router = router
        return router, None

    def read_limits(self) -> ReadLimits:
        """The per-file reading limits from ``[limits]`` (a bad table fails here)."""
        from shelfhand.knowledge.reading.limits import ReadLimits

        return ReadLimits.from_mapping(self.settings.limits)

    def open_knowledge(
        self,
        *,
        embed: bool = True,
        writer: Role | None = None,
        wait: float = 0.0,
        on_wait: Callable[[str], None] | None = None,
    ) -> KnowledgeBase:
        """The workspace's knowledge base; ``embed=False`` for listing and forgetting only.

        Its ingest reads each file within the ``[limits]`` of the settings (:meth:`read_limits`).

        Args:
            embed: Build the embedders (``False``: keyword-only, for listing and forgetting).
            writer: Take the workspace's writer lock for this role (``serve``, ``ingest``,
                ``forget``) before anything is opened; the knowledge base releases it when
                closed. ``None`` opens without it (read-only use).
            wait: Seconds to wait for another writer to finish.
            on_wait: Told the busy message once, when waiting starts.

        Without ``writer`` the knowledge base is for reading: it never keeps the keyword
        index's writer, and while another process holds the writer lock it does not touch the
        index files at all (it searches what that process has committed).

        With a ``database_url`` the knowledge base is the PostgreSQL store in every retrieval
        mode (``keyword`` then searches PostgreSQL by keywords only), and no workspace lock is
        taken: several replicas and workers share the database (see :meth:`check_database`).

        Raises:
            WorkspaceBusyError: Another process holds the writer lock (the message says who).
            ConfigurationError: The configured PostgreSQL is unreachable or lacks pgvector.
        """
        from shelfhand.knowledge.base import KnowledgeBase
        from shelfhand.knowledge.stores.workspace_lock import WorkspaceLock

        read_limits = self.read_limits()  # a bad [limits] table fails before any lock is taken
        lock = None
        access: Access = "write"
        database_url = self.settings.database_url
        if database_url:
            # PostgreSQL takes concurrent writers (replicas, workers): no workspace lock. The
            # workspace folder still holds settings, sessions and audit: make it exist.
            self.check_database()
            self.settings.workspace.mkdir(parents=True, exist_ok=True)
        elif writer is not None:
            lock = WorkspaceLock(self.settings.workspace, writer)
            lock.acquire(wait=wait, on_wait=on_wait)
        else:  # a reader: never hold the index's writer, and never write while another does
            access = "read" if WorkspaceLock.is_free(self.settings.workspace) else "read-only"
        try:
            router, reason = self.embedding_router() if embed else (None, None)
            reranker = self.reranker() if embed else None
            return KnowledgeBase(
                self.settings.workspace,
                router,
                mode=self.settings.retrieval_mode,
                degraded_reason=reason,
                max_tokens=self.settings.chunk_tokens,
                overlap_tokens=self.settings.chunk_overlap,
                lock=lock,
                access=access,
                embed_timeout=self.settings.embed_timeout,
                reranker=reranker,
                rerank_candidates=self.settings.rerank_candidates,
                min_relevance=self.settings.min_relevance,
                fusion=self.settings.fusion,
                keyword_common_share=self.settings.keyword_common_share,
                synonyms=self.settings.synonyms,
                pg_timeout=self.settings.pg_timeout,
                database_url=database_url,
                read_limits=read_limits,
                qdrant_url=self.settings.qdrant_url,
                qdrant_api_key=self.settings.qdrant_api_key,
            )
        except BaseException:
            if lock is not None:
                lock.release()
            raise

    def reranker(self) -> Reranker | None:
        """The configured reranker (``rerank`` setting), ``None`` when off (the default).

        ``endpoint`` calls ``rerank_url``; ``llm`` asks the chat model, through a model object
        of its own (it runs on the reranker's own event loop).

        Raises:
            ConfigurationError: ``llm`` without a chat model configured.
        """
        s = self.settings
        if s.rerank == "endpoint" and s.rerank_url:
            from shelfhand.knowledge.retrieval.rerank import HttpReranker

            return HttpReranker(
                s.rerank_url,
                model=s.rerank_model,
                api_key=s.rerank_api_key,
                timeout=s.rerank_timeout,
            )
        if s.rerank == "llm":
            from shelfhand.agent.llm_rerank import LlmReranker

            model: ChatModel | None
            if self.model is not None or not s.model:
                model = self.model
            elif s.model.startswith("scripted:"):
                from shelfhand.models.scripted import load_scripted_model

                model = load_scripted_model(s.model.split(":", 1)[1])
            else:
                from shelfhand.providers.openai_chat import OpenAIChatModel

                overrides = {"model": s.rerank_model} if s.rerank_model else {}
                model = OpenAIChatModel.from_env(s, **overrides)
            if model is None:
                raise ConfigurationError(
                    "rerank = llm needs a chat model: set SHELFHAND_MODEL (and OPENAI_BASE_URL), "
                    "or use rerank = endpoint or off"
                )
            return LlmReranker(model, timeout=s.rerank_timeout, price=self._price(model))
        return None

    def query_rewriter(self, model: ChatModel) -> QueryRewriter | None:
        """The query rewriter over ``model`` when ``query_rewrite`` is on, else ``None``."""
        if not self.settings.query_rewrite:
            return None
        from shelfhand.agent.rewrite import QueryRewriter

        return QueryRewriter(model, price=self._price(model))

    def _price(self, model: ChatModel) -> ModelPrice | None:
        """``model``'s price (setting ``prices``), for the cost of its side calls (the
        rewrite, the judge, the reranker) in a run's usage; ``None`` when unknown."""
        prices = self.settings.prices
        return prices.get(model.name) if prices else None

    def warm_up(self, kb: KnowledgeBase | None) -> None:
        """Load what the first search would load (query embedders, index readers) now:
        servers call this before they report ready, so loading never counts against a
        request's or a tool call's timeout."""
        if kb is None:
            return
        import time

        started = time.perf_counter()
        kb.warm_up()
        logger.info("knowledge warmed up in %.0f ms", (time.perf_counter() - started) * 1000)

    # --- ingest jobs ----------------------------------------------------------------------
    def ingest_queue(self) -> IngestQueue | None:
        """The ingest job queue on ``database_url`` (procrastinate over PostgreSQL), or
        ``None`` without one (uploads and ``shelfhand ingest`` then ingest in process).

        With it, uploads and ``shelfhand ingest`` enqueue jobs that ``shelfhand worker``
        processes run. Fails fast with :class:`ConfigurationError` when PostgreSQL cannot be
        reached or the ``worker`` extra is missing.
        """
        if not self.settings.database_url:
            return None
        if self._ingest_queue is None:
            from shelfhand.jobs.queue import IngestQueue

            self._ingest_queue = IngestQueue.open(self.settings.database_url)
        return self._ingest_queue

    def upload_registry(self) -> UploadRecords:
        """Who owns each uploaded source: in PostgreSQL with ``database_url`` (shared by
        replicas and workers), else in ``<workspace>/sessions.db``."""
        if self.settings.database_url:
            from shelfhand.service.pg_uploads import PgUploadRegistry

            return PgUploadRegistry.open(self.settings.database_url)
        from shelfhand.service.uploads import UploadRegistry

        return UploadRegistry(self.settings.workspace / "sessions.db")

    # --- tools and agents -----------------------------------------------------------------
    def governance(self) -> Governance:
        """One governance state per app (cache, breakers, rate limits), audited into
        ``<workspace>/audit.db`` (PostgreSQL with ``database_url``); every toolkit the app
        builds shares it. With ``redis_url`` its state lives in Redis, shared by replicas."""
        if self._governance is None:
            from shelfhand.tools.governance import Governance
            from shelfhand.tools.policy import GovernancePolicy

            shared = None
            redis = self.shared_state().redis
            if redis is not None:
                from shelfhand.tools.redis_state import RedisGovernanceState

                shared = RedisGovernanceState(redis)
            policy = GovernancePolicy(max_result_chars=self.settings.tool_result_chars)
            self._governance = Governance(policy, audit=self.audit_log(), shared=shared)
        return self._governance

    def toolkit(
        self,
        kb: KnowledgeBase | None,
        *,
        extra: Sequence[Any] = (),
        governed: bool = True,
        builtins: Sequence[str] | None = None,
        retrieve: bool = True,
    ) -> Toolkit:
        """``retrieve`` (which says "not configured" without a kb), the opted-in built-ins and
        ``extra``.

        Args:
            kb: The knowledge base behind ``retrieve``.
            extra: More tools to add (e.g. the service's ``remember``).
            governed: Share the app's audited governance; ``False`` for listing tools only.
            builtins: Names of built-in tools to add (``calculator``, ``current_time``,
                ``http_get``); ``None``: the ``builtin_tools`` setting, empty by default, so
                a document question is offered ``retrieve`` alone.
            retrieve: ``False`` leaves ``retrieve`` out (a chat with nothing indexed: offered,
                it only ever answers "not configured", and a small model answers that).
        """
        from shelfhand.agent.retrieve import make_retrieve_tool
        from shelfhand.tools.builtins import builtin_tools
        from shelfhand.tools.toolkit import Toolkit

        wanted = set(self.settings.builtin_tools if builtins is None else builtins)
        tools = [
            *(
                [make_retrieve_tool(kb, compress_tokens=self._compress_tokens())]
                if retrieve
                else []
            ),
            *(t for t in builtin_tools() if t.name in wanted),
            *self.extra_tools,
            *extra,
        ]
        taken = {t.name for t in tools}
        for spec, own in self.own_tools():
            if own.name in taken:
                raise ConfigurationError(
                    f"tools: {spec!r} gives a tool named {own.name!r}, as one of shelfhand's "
                    "own tools is; pass name=... to @tool"
                )
            tools.append(own)
        return Toolkit(tools, governance=self.governance()) if governed else Toolkit(tools)

    def own_tools(self) -> list[tuple[str, Any]]:
        """The tools the ``tools`` setting names, each with the name that brought it; imported
        once, on first use (from the folder shelfhand runs in, or installed).

        Raises:
            ConfigurationError: see :func:`shelfhand.tools.loading.load_tools`.
        """
        if self._own_tools is None:
            from shelfhand.tools.loading import load_tools

            specs = self.settings.tools
            self._own_tools = load_tools(specs, folder=Path.cwd()) if specs else []
        return self._own_tools

    def use_demo_tools(self) -> None:
        """Offer the reference scenario's tools (:mod:`shelfhand.tools.demo`: stock, prices,
        the caller's orders, returns needing confirmation) over a demo shop database in
        ``<workspace>/demo-shop.db`` (created with the spec sheet's products on first use)."""
        from shelfhand.tools.demo import demo_database, make_tools

        self.settings.workspace.mkdir(parents=True, exist_ok=True)
        db = demo_database(self.settings.workspace / DEMO_SHOP)
        self.extra_tools = (*self.extra_tools, *make_tools(db))

    def answer_check(self, model: ChatModel | None = None) -> AnswerCheck | None:
        """The check of chat answers against their passages (setting ``answer_check``):
        ``fallback`` replaces an answer that cannot be trusted by the passages' own sentences,
        ``flag`` only flags it, ``off`` returns ``None``. With ``answer_judge = "model"``,
        ``model`` also judges each sentence (:mod:`shelfhand.agent.model_check`)."""
        mode = self.settings.answer_check
        if mode == "off":
            return None
        from shelfhand.agent.answer_check import AGENT_SCAFFOLDS, AnswerCheck
        from shelfhand.providers.tool_modes import PROMPT_TEXTS

        judge: AnswerJudge | None = None
        s = self.settings
        if model is not None and s.answer_judge == "model":
            from shelfhand.agent.model_check import ModelJudge

            judge = ModelJudge(
                model=model, timeout=s.answer_judge_timeout, price=self._price(model)
            )
        elif s.answer_judge == "rerank" and s.rerank_url:
            from shelfhand.agent.rerank_check import RerankJudge
            from shelfhand.knowledge.retrieval.rerank import HttpReranker

            scorer = HttpReranker(
                s.rerank_url, model=s.rerank_model, api_key=s.rerank_api_key,
                timeout=s.rerank_timeout,
            )  # fmt: skip
            judge = RerankJudge(
                scorer=scorer, min_score=s.answer_judge_min_score, timeout=s.answer_judge_timeout
            )
        return AnswerCheck(
            fallback=mode == "fallback",
            scaffolds=AGENT_SCAFFOLDS + PROMPT_TEXTS,
            judge=judge,
            synonyms=self.synonym_table(),
        )

    def synonym_table(self) -> SynonymTable | None:
        """The word groups questions are read with: the built-in groups and the workspace's
        ``synonyms`` (``None`` when it has none: the built-in groups are the default)."""
        if not self.settings.synonyms:
            return None
        from shelfhand.knowledge.analysis import SYNONYMS, synonym_table

        return synonym_table((*SYNONYMS, *self.settings.synonyms))

    def chat_agent(
        self,
        model: ChatModel,
        kb: KnowledgeBase | None,
        *,
        memory: ConversationMemory | None = None,
        toolkit: Toolkit | None = None,
        system_prompt: str | None = None,
        retrieval: AnswerRetrieval | None = None,
    ) -> Agent:
        """The chat agent; a service passes its shared ``toolkit`` (governance state lives
        there) and a per-caller ``system_prompt`` (e.g. with the user's memory section).

        ``retrieval`` (default: the ``answer_retrieval`` setting) says where answers get their
        passages: ``context``, ``tool`` or ``both`` (see :mod:`shelfhand.agent.grounding`).
        Without a knowledge base there is nothing to retrieve up front, so it is ``tool``, and
        ``retrieve`` is not offered (the model answers alone, as ``ask`` and ``chat`` say).

        ``confirm=True`` tools need an ``Approvals`` registry passed to ``run``/``stream``
        (the service and the CLI do); without one they are refused, never left waiting.
        """
        from shelfhand.agent.agent import DEFAULT_SYSTEM_PROMPT, Agent

        mode = check_answer_retrieval(retrieval or self.settings.answer_retrieval)
        return Agent(
            name="assistant",
            model=model,
            toolkit=toolkit if toolkit is not None else self.toolkit(kb, retrieve=kb is not None),
            memory=memory,
            system_prompt=system_prompt or DEFAULT_SYSTEM_PROMPT,
            retrieval=mode if kb is not None else "tool",
            rewriter=self.query_rewriter(model),
            answer_check=self.answer_check(model) if kb is not None else None,
            prices=self.settings.prices,
        )

    def subagents(self, code: Sequence[Subagent] = ()) -> list[Subagent]:
        """The subagents: ``code`` declarations plus ``<workspace>/agents/*.md`` files.

        Raises:
            DeclarationError: a bad file (file and line) or an id declared twice (both places).
        """
        from shelfhand.agent.subagents import (
            AGENTS_FOLDER,
            load_subagent_files,
            merge_declarations,
        )

        files = load_subagent_files(self.settings.workspace / AGENTS_FOLDER)
        return [_remote(s) for s in merge_declarations(code, files)]

    def supervisor(
        self,
        model: ChatModel,
        kb: KnowledgeBase | None,
        *,
        subagents: Sequence[Subagent] = (),
        memory: ConversationMemory | None = None,
        toolkit: Toolkit | None = None,
        system_prompt: str | None = None,
        tasks: TaskRegistry | None = None,
        fingerprints: OrderedDict[tuple[str, str], str] | None = None,
    ) -> Supervisor:
        """A main agent delegating to the workspace's subagents (and ``subagents`` from code).

        A subagent file naming another ``model`` gets that model on the configured endpoint
        (with a ``scripted:`` model, the script plays every part). ``tasks`` adds the
        lifecycle tools (background tasks); ``system_prompt`` and ``fingerprints`` as in
        :class:`~shelfhand.agent.supervisor.Supervisor`.

        Raises:
            DeclarationError: see :meth:`subagents`; an unknown tool name in a declaration.
        """
        from shelfhand.agent.supervisor import SUPERVISOR_PROMPT, Supervisor

        subs = self.subagents(subagents)
        builtins = self.opted_builtins(subs)
        models: dict[str, ChatModel] = {}
        for sub in subs:
            named = sub.model
            if isinstance(named, str) and named != model.name and named not in models:
                models[named] = self._named_model(named, model)
        return Supervisor(
            model=model,
            toolkit=toolkit if toolkit is not None else self.toolkit(kb, builtins=builtins),
            subagents=subs,
            models=models,
            memory=memory,
            system_prompt=system_prompt or SUPERVISOR_PROMPT,
            tasks=tasks,
            fingerprints=fingerprints,
            # like the chat agent: without documents there is nothing to retrieve up front
            retrieval=self.settings.answer_retrieval if kb is not None else "tool",
            rewriter=self.query_rewriter(model),
            prices=self.settings.prices,
        )

    def opted_builtins(self, subagents: Sequence[Subagent] | None = None) -> list[str]:
        """The built-in tools a toolkit shared with ``subagents`` (default: the workspace's)
        offers: the ``builtin_tools`` setting and those a subagent file names (the
        subagent gets only its own; the others see them in the shared toolkit)."""
        subs = self.subagents() if subagents is None else subagents
        opted = {t for sub in subs for t in sub.tools} & set(BUILTIN_TOOLS)
        return [*self.settings.builtin_tools, *sorted(opted - set(self.settings.builtin_tools))]

    def _named_model(self, name: str, main: ChatModel) -> ChatModel:
        s = self.settings
        if not s.model or s.model.startswith("scripted:"):
            return main
        from dataclasses import replace

        from shelfhand.providers.openai_chat import OpenAIChatModel

        return OpenAIChatModel.from_env(replace(s, model=name))  # same endpoint and options

    def knowledge_agent(self, kb: KnowledgeBase) -> KnowledgeAgent:
        from shelfhand.agent.retrieve import KnowledgeAgent

        # an answer check on: the passages' best sentences, not whole passages
        return KnowledgeAgent(
            kb,
            compress_tokens=self._compress_tokens(),
            extractive=self.settings.answer_check != "off",
            synonyms=self.synonym_table(),
        )

    def _compress_tokens(self) -> int | None:
        """The per-passage budget of retrieved passages (``None``: compression off)."""
        return self.settings.compress_tokens if self.settings.compress else None

    # --- service state --------------------------------------------------------------------
    def shared_state(self) -> SharedState:
        """The connections to the services replicas share (opened once, checked now: an
        unreachable ``redis_url`` or ``database_url`` fails here, at start-up)."""
        if self._shared is None:
            from shelfhand.backends.shared import SharedState

            self._shared = SharedState.open(
                redis_url=self.settings.redis_url, database_url=self.settings.database_url
            )
        return self._shared

    def session_store(self) -> SessionStore:
        """Conversation sessions: in PostgreSQL with ``database_url``, else in
        ``<workspace>/sessions.db``."""
        pool = self.shared_state().pool
        if pool is not None:
            from shelfhand.sessions.pg import PgSessionStore

            return PgSessionStore(
                pool, url=str(self.settings.database_url), deadline=self.settings.pg_timeout
            )
        from shelfhand.sessions.store import SqliteSessionStore

        return SqliteSessionStore(self.settings.workspace / "sessions.db")

    def user_memory_store(self) -> UserMemoryStore:
        """Long-term memory per user: in PostgreSQL with ``database_url``, else in
        ``<workspace>/sessions.db``."""
        pool = self.shared_state().pool
        if pool is not None:
            from shelfhand.sessions.pg import PgUserMemoryStore

            return PgUserMemoryStore(
                pool, url=str(self.settings.database_url), deadline=self.settings.pg_timeout
            )
        from shelfhand.sessions.user_memory import SqliteUserMemoryStore

        return SqliteUserMemoryStore(self.settings.workspace / "sessions.db")

    def audit_log(self) -> AuditLog:
        """A new handle on the audit log: PostgreSQL with ``database_url``, else
        ``<workspace>/audit.db``."""
        pool = self.shared_state().pool
        if pool is not None:
            from shelfhand.tools.pg_audit import PgAuditLog

            return PgAuditLog(
                pool, url=str(self.settings.database_url), deadline=self.settings.pg_timeout
            )
        from shelfhand.tools.audit import AuditLog

        self.settings.workspace.mkdir(parents=True, exist_ok=True)
        return AuditLog.for_workspace(self.settings.workspace)

    def approvals(self, *, timeout: float | None = 300.0) -> Approvals:
        """Where ``confirm=True`` calls wait for a decision: in Redis with ``redis_url``
        (decided through any replica), else in the process."""
        redis = self.shared_state().redis
        if redis is not None:
            from shelfhand.tools.redis_approvals import RedisApprovals

            return RedisApprovals(redis, timeout=timeout)
        from shelfhand.tools.approvals import Approvals

        return Approvals(timeout=timeout)

    def turn_lock(self) -> TurnLock:
        """One turn at a time per session: in Redis with ``redis_url`` (across replicas),
        else in the process."""
        from shelfhand.service.turn_lock import LocalTurnLock, RedisTurnLock

        redis = self.shared_state().redis
        return LocalTurnLock() if redis is None else RedisTurnLock(redis)

    def budget_policy(self) -> BudgetPolicy | None:
        """The budgets of ``[budgets]`` in shelfhand.toml and of the API keys; ``None`` when
        they set none.

        Raises:
            ConfigurationError: an unknown budget or a value that is not a whole number.
        """
        from shelfhand.core.auth import load_key_budgets
        from shelfhand.usage.budgets import BudgetPolicy

        return BudgetPolicy.from_toml(
            self.settings.budgets, load_key_budgets(self.settings.workspace)
        )

    def budget_book(self) -> BudgetBook:
        """Where the budgets are counted: in Redis with ``redis_url``, else in PostgreSQL
        with ``database_url`` (either: across replicas), else in ``<workspace>/budgets.db``
        (kept across restarts). Close it when done."""
        shared = self.shared_state()
        if shared.redis is not None:
            from shelfhand.usage.redis_budgets import RedisBudgetBook

            return RedisBudgetBook(shared.redis)
        if shared.pool is not None:
            from shelfhand.usage.pg import PgBudgetBook

            return PgBudgetBook(
                shared.pool, url=str(self.settings.database_url), deadline=self.settings.pg_timeout
            )
        from shelfhand.usage.sql_budgets import SqliteBudgetBook

        return SqliteBudgetBook.for_workspace(self.settings.workspace)

    def budgets(self) -> Budgets | None:
        """The service's budgets (:meth:`budget_policy`), counted in :meth:`budget_book`,
        their refusals audited; ``None`` without budgets.

        Raises:
            ConfigurationError: an unknown budget or a value that is not a whole number.
        """
        from shelfhand.service.turn_budgets import Budgets

        policy = self.budget_policy()
        if policy is None:
            return None
        return Budgets(
            policy=policy,
            book=self.budget_book(),
            audit=self.governance().audit,
            lease=self.settings.budget_lease,
        )

    def usage_ledger(self) -> SqlUsageLedger:
        """What each tenant, user and session used per day and model: PostgreSQL with
        ``database_url``, else ``<workspace>/usage.db``."""
        pool = self.shared_state().pool
        if pool is not None:
            from shelfhand.usage.pg import PgUsageLedger

            return PgUsageLedger(
                pool, url=str(self.settings.database_url), deadline=self.settings.pg_timeout
            )
        from shelfhand.usage.ledger import SqliteUsageLedger

        return SqliteUsageLedger(self.settings.workspace / "usage.db")

    def trace_store(self) -> SqlTraceStore:
        """Where traces are kept: PostgreSQL with ``database_url``, else
        ``<workspace>/traces.db``."""
        pool = self.shared_state().pool
        if pool is not None:
            from shelfhand.traces.pg import PgTraceStore

            return PgTraceStore(
                pool, url=str(self.settings.database_url), deadline=self.settings.pg_timeout
            )
        from shelfhand.traces.store import SqliteTraceStore

        return SqliteTraceStore(self.settings.workspace / "traces.db")

    def tracer(self, extra: Sequence[SpanProcessor] = ()) -> Tracer | None:
        """The service's tracer (one per app): spans stored (``tracing = stored``), exported
        over OTLP (``OTEL_EXPORTER_OTLP_ENDPOINT``) and handed to ``extra`` processors;
        ``None`` when there is nowhere for spans to go (then no span is made; the service's
        metrics count steps without them).

        Raises:
            ConfigurationError: an OTLP endpoint is set but ``shelfhand[otel]`` is not
                installed.
        """
        if self._tracer is not None:
            return self._tracer
        from shelfhand.core.tracing import Tracer
        from shelfhand.traces.recorder import StoreRecorder

        s = self.settings
        processors: list[SpanProcessor] = list(extra)
        if s.tracing == "stored":
            processors.append(
                StoreRecorder(
                    self.trace_store(),
                    max_traces=s.trace_max_traces,
                    max_age_days=s.trace_retention_days,
                )
            )
        if s.otel_endpoint:
            from shelfhand.providers.otel import otlp_processor

            processors.append(otlp_processor(s.otel_endpoint))
        if not processors:
            return None
        self._tracer = Tracer(
            processors, record_content=s.trace_content, sample_ratio=s.trace_sample_ratio
        )
        return self._tracer

    def close(self) -> None:
        """Flush and close what the app opened (the audit log, shared connections, the ingest
        queue, the tracer's recorders)."""
        if self._tracer is not None:
            self._tracer.close()
            self._tracer = None
        if self._governance is not None and self._governance.audit is not None:
            self._governance.audit.close()
        if self._shared is not None:
            self._shared.close()
            self._shared = None
        if self._ingest_queue is not None:
            self._ingest_queue.close()
            self._ingest_queue = None

    def api_keys(self) -> dict[str, UserContext]:
        """API key → caller, from ``SHELFHAND_API_KEYS`` or ``[[api_keys]]`` in shelfhand.toml."""
        from shelfhand.core.auth import load_api_keys

        return load_api_keys(self.settings.workspace)


def _build_router(spec: str, *, cross_language: bool = True) -> EmbeddingRouter:
    """``default`` (MiniLM for English + USE for Chinese; English by USE too with
    ``cross_language``), ``hashing``, or ``openai:<model>``."""
    from shelfhand.knowledge.embeddings.router import EmbeddingRouter

    if spec == "default":
        from shelfhand.knowledge.embeddings.local import default_router

        return default_router(cross_language=cross_language)
    if spec == "hashing":
        from shelfhand.knowledge.embeddings.local import HashingEmbedder

        return EmbeddingRouter({"any": HashingEmbedder()})
    if spec.startswith("openai:"):
        from shelfhand.providers.openai_embeddings import OpenAIEmbedder

        return EmbeddingRouter({"any": OpenAIEmbedder(spec.split(":", 1)[1])})
    raise ConfigurationError(
        f"unknown embedder {spec!r}: use default, hashing or openai:<model> (SHELFHAND_EMBEDDER)"
    )
