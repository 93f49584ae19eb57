"""Hidden context: who is calling, and about which run.

Values of these types are injected by the framework into tool parameters annotated with them.
They never appear in a tool's JSON schema, so the model can neither see nor set them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from shelfhand.core.citations import CitationLedger
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.ids import new_id
from shelfhand.core.results import UsageTally
from shelfhand.core.slots import slot_setters, twin

__all__ = [
    "ANONYMOUS",
    "PRIVILEGED_ROLES",
    "PermissionLevel",
    "RunContext",
    "UserContext",
    "permission_rank",
]

PermissionLevel = Literal["user", "admin", "system"]
_LEVEL_ORDER: dict[str, int] = {"user": 0, "admin": 1, "system": 2}


def permission_rank(level: str) -> int:
    """Order of permission levels: user < admin < system."""
    try:
        return _LEVEL_ORDER[level]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown permission level {level!r}; use user, admin or system"
        ) from None


PRIVILEGED_ROLES: frozenset[str] = frozenset({"admin", "system"})
"""Roles that read every document of their tenant, whatever its permission tags."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UserContext:
    """The caller's identity: tenant, user and roles.

    Roles ``admin`` and ``system`` raise the caller's permission level; every other role is a
    plain ``user`` role that may also be used as a document permission tag.
    """

    tenant_id: str
    user_id: str
    roles: tuple[str, ...] = ()

    def __init__(self, *, tenant_id: str, user_id: str, roles: Iterable[str] = ()) -> None:
        object.__setattr__(self, "tenant_id", str(tenant_id))
        object.__setattr__(self, "user_id", str(user_id))
        object.__setattr__(self, "roles", tuple(str(r) for r in roles))

    @property
    def permission_level(self) -> PermissionLevel:
        if "system" in self.roles:
            return "system"
        if "admin" in self.roles:
            return "admin"
        return "user"

    def may_use(self, level: str) -> bool:
        """Whether this caller may use something that needs ``level``."""
        return permission_rank(self.permission_level) >= permission_rank(level)

    @property
    def scope(self) -> str:
        """A stable key for this caller (used for caches and rate limits)."""
        return f"{self.tenant_id}/{self.user_id}"


ANONYMOUS = UserContext(tenant_id="default", user_id="anonymous", roles=())


@dataclass(frozen=True, slots=True, kw_only=True)
class RunContext:
    """Facts about the current agent run, injectable into tools."""

    run_id: str = field(default_factory=new_id)
    trace_id: str = field(default_factory=new_id)
    agent_name: str = ""
    user: UserContext = ANONYMOUS
    iteration: int = 0
    deps: Any = None
    citations: CitationLedger = field(default_factory=CitationLedger, compare=False, repr=False)
    """This run's citation numbers: every tool call of the run (and of its iterations) shares
    them, so passages keep one number per run; a new run starts from ``[1]``."""
    parent_trace_id: str = ""
    """The trace id of the run that delegated this one (a subagent's run); empty at the top."""
    depth: int = 0
    """How many delegations deep this run is: 0 for the main agent, 1 for its subagents..."""
    delegated: UsageTally = field(default_factory=UsageTally, compare=False, repr=False)
    """What the runs this run delegated used (its subagents' finished runs): added to the
    run's own usage when it ends."""

    def __init__(
        self,
        *,
        run_id: str | None = None,
        trace_id: str | None = None,
        agent_name: str = "",
        user: UserContext = ANONYMOUS,
        iteration: int = 0,
        deps: Any = None,
        citations: CitationLedger | None = None,
        parent_trace_id: str = "",
        depth: int = 0,
        delegated: UsageTally | None = None,
    ) -> None:
        # one per run (and per step for tools that read it): set through the slots (see
        # shelfhand.core.slots); ids, ledger and tally are new unless given
        _run_id(self, new_id() if run_id is None else run_id)
        _trace_id(self, new_id() if trace_id is None else trace_id)
        _agent_name(self, agent_name)
        _user(self, user)
        _iteration(self, iteration)
        _deps(self, deps)
        _citations(self, CitationLedger() if citations is None else citations)
        _parent_trace_id(self, parent_trace_id)
        _depth(self, depth)
        _delegated(self, UsageTally() if delegated is None else delegated)

    @classmethod
    def start(
        cls,
        *,
        agent_name: str,
        user: UserContext | None = None,
        deps: Any = None,
        trace_id: str | None = None,
        parent: RunContext | None = None,
    ) -> RunContext:
        """A new run for ``user`` (anonymous if ``None``), under ``trace_id`` if the caller
        chose one (e.g. the HTTP turn's), else a fresh one.

        ``parent``: the run that delegates this one (a subagent's run). The new run records
        its trace id and is one level deeper; its caller is the parent's caller, always.
        """
        if parent is None:
            return _started(cls, agent_name, user or ANONYMOUS, deps, trace_id or new_id(), "", 0)
        if user is not None and user != parent.user:
            raise InvalidArgumentError(
                "a delegated run belongs to its parent's caller; pass no other user"
            )
        return _started(
            cls, agent_name, parent.user, deps, trace_id or new_id(), parent.trace_id,
            parent.depth + 1,
        )  # fmt: skip


def _started(
    cls: type[RunContext],
    agent_name: str,
    user: UserContext,
    deps: Any,
    trace_id: str,
    parent_trace_id: str,
    depth: int,
) -> RunContext:
    """A new run's context: a new run id, citation ledger and usage tally, at iteration 0.
    One per run: built as a twin (see :mod:`shelfhand.core.slots`) unless ``cls`` is a
    subclass."""
    if cls is not RunContext:
        return cls(
            agent_name=agent_name, user=user, deps=deps, trace_id=trace_id,
            parent_trace_id=parent_trace_id, depth=depth,
        )  # fmt: skip
    run = _RunFields()
    run.run_id = new_id()
    run.trace_id = trace_id
    run.agent_name = agent_name
    run.user = user
    run.iteration = 0
    run.deps = deps
    run.citations = CitationLedger()
    run.parent_trace_id = parent_trace_id
    run.depth = depth
    run.delegated = UsageTally()
    run.__class__ = RunContext
    built: RunContext = run
    return built


(
    _run_id,
    _trace_id,
    _agent_name,
    _user,
    _iteration,
    _deps,
    _citations,
    _parent_trace_id,
    _depth,
    _delegated,
) = slot_setters(
    RunContext,
    "run_id",
    "trace_id",
    "agent_name",
    "user",
    "iteration",
    "deps",
    "citations",
    "parent_trace_id",
    "depth",
    "delegated",
)

_RunFields = twin(RunContext)
