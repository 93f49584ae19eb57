"""Budgets per tenant and per user: tokens and model calls per day or month, turns per minute.

Configured in ``shelfhand.toml``::

    [budgets.tenant]                 # every tenant's budget
    tokens_per_day = 2_000_000
    model_calls_per_day = 20_000
    [budgets.user]                   # every user's budget, within their tenant's
    tokens_per_day = 200_000
    turns_per_minute = 10
    [budgets.tenants.acme]           # one tenant's own budget (replaces budgets.tenant)
    tokens_per_month = 50_000_000

A model call **reserves** before it is made (its largest possible size: the model's context
window, which holds the request and the reply) and **settles** after with
what the provider reported, so concurrent turns can never spend past a budget together: a
reservation that does not fit is refused before the call. Streamed and non-streamed calls
reserve and settle the same way. The counters live in a :class:`BudgetBook`: in the process
(:class:`LocalBudgetBook`, a lock), in SQL (the workspace's ``budgets.db``, or PostgreSQL for
several replicas: :mod:`shelfhand.usage.sql_budgets`) or in Redis for several replicas
(:class:`~shelfhand.usage.redis_budgets.RedisBudgetBook`, one Lua script per reservation).

**A call whose process stops.** A reservation of tokens is held under a :class:`Lease`
(:data:`LEASE_S`, 15 minutes). A call that settles ends its lease; a call that never does
(its process was killed mid-call) has its lease given back by the book when it next charges
that counter, or reads it. Before, such a reservation (the model's whole context window) stayed
counted until its period ended: a day, or a month, of budget lost for each call in flight at
a crash. A call that outlives its lease is still counted in full when it settles.

Periods are UTC: a day ends at midnight UTC, a month on the first of the next.
"""

from __future__ import annotations

import asyncio
import calendar
import itertools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from shelfhand.core.context import UserContext
from shelfhand.core.errors import BudgetExceededError, ConfigurationError
from shelfhand.core.ids import new_id
from shelfhand.core.offload import soon_if
from shelfhand.core.results import Usage

__all__ = [
    "BUDGET_NAMES",
    "LEASE_S",
    "BudgetBook",
    "BudgetLimits",
    "BudgetPolicy",
    "Charge",
    "Lease",
    "LocalBudgetBook",
    "TurnMeter",
]

Period = Literal["minute", "day", "month"]
BUDGET_NAMES: tuple[str, ...] = (
    "tokens_per_day",
    "tokens_per_month",
    "model_calls_per_day",
    "model_calls_per_month",
    "turns_per_minute",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetLimits:
    """One scope's budgets (``None``: no limit)."""

    tokens_per_day: int | None = None
    tokens_per_month: int | None = None
    model_calls_per_day: int | None = None
    model_calls_per_month: int | None = None
    turns_per_minute: int | None = None

    @classmethod
    def from_table(cls, table: Mapping[str, Any], where: str) -> BudgetLimits:
        """Read ``[budgets.*]``; an unknown key or a value that is not a positive whole
        number fails fast."""
        values: dict[str, int] = {}
        for key, raw in table.items():
            if key not in BUDGET_NAMES:
                known = ", ".join(BUDGET_NAMES)
                raise ConfigurationError(f"{where}: unknown budget {key!r} (known: {known})")
            if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
                raise ConfigurationError(f"{where}.{key} must be a whole number above 0")
            values[key] = raw
        return cls(**values)

    def items(self) -> list[tuple[str, int]]:
        return [(n, v) for n in BUDGET_NAMES if (v := getattr(self, n)) is not None]


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetPolicy:
    """Every budget of the service."""

    tenant: BudgetLimits = field(default_factory=BudgetLimits)
    user: BudgetLimits = field(default_factory=BudgetLimits)
    tenants: Mapping[str, BudgetLimits] = field(default_factory=dict)
    users: Mapping[str, BudgetLimits] = field(default_factory=dict)
    """One caller's own budgets (from its API key), by scope (``tenant/user``): instead of
    :attr:`user` for that caller."""

    @classmethod
    def from_toml(
        cls,
        table: Mapping[str, Any] | None,
        keys: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> BudgetPolicy | None:
        """The ``[budgets]`` table of shelfhand.toml and the ``budgets`` of API keys (by
        caller scope); ``None`` when they set no budget."""
        users = {
            scope: BudgetLimits.from_table(limits, f"the budgets of API key {scope}")
            for scope, limits in (keys or {}).items()
        }
        if not table:
            policy = cls(users=users)
            return policy if policy.any() else None
        tenants = table.get("tenants", {})
        if not isinstance(tenants, Mapping):
            raise ConfigurationError("budgets.tenants must be a table of tenants")
        unknown = set(table) - {"tenant", "user", "tenants"}
        if unknown:
            raise ConfigurationError(
                f"budgets: unknown key(s) {', '.join(sorted(unknown))} (tenant, user, tenants)"
            )
        policy = cls(
            tenant=BudgetLimits.from_table(table.get("tenant", {}), "budgets.tenant"),
            user=BudgetLimits.from_table(table.get("user", {}), "budgets.user"),
            tenants={
                str(t): BudgetLimits.from_table(v, f"budgets.tenants.{t}")
                for t, v in tenants.items()
            },
            users=users,
        )
        return policy if policy.any() else None

    def any(self) -> bool:
        return bool(
            self.tenant.items()
            or self.user.items()
            or any(v.items() for v in self.tenants.values())
            or any(v.items() for v in self.users.values())
        )

    def scopes(self, user: UserContext) -> list[tuple[str, BudgetLimits]]:
        """The caller's budgets: their tenant's, then their own (their API key's, else
        every user's)."""
        tenant = self.tenants.get(user.tenant_id, self.tenant)
        own = self.users.get(user.scope, self.user)
        return [(f"tenant {user.tenant_id}", tenant), (f"user {user.scope}", own)]


@dataclass(frozen=True, slots=True, kw_only=True)
class Charge:
    """One counter to add ``amount`` to, if it stays within ``limit``."""

    key: str
    amount: int
    limit: int
    reset_at: float
    budget: str
    scope: str


LEASE_S = 900.0
"""Seconds a reservation of tokens is held for its call: a call that has not settled by then is
taken for one whose process stopped, and its reservation is given back."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Lease:
    """The reservation of one model call: ``charges`` (its tokens budgets, each at the call's
    largest possible size) are held until the call settles, or until ``until`` if it never
    does (its process stopped), when the book gives them back."""

    id: str
    until: float
    charges: tuple[Charge, ...]


class BudgetBook(Protocol):
    """Counters of used budget, changed atomically, and the leases of calls in flight."""

    blocking: bool
    """Its methods wait on a file or a server: a turn asks them from a worker thread
    (:mod:`shelfhand.core.metering`)."""

    def take(
        self, charges: Sequence[Charge], now: float, lease: Lease | None = None
    ) -> Charge | None:
        """Add every charge if each stays within its limit, else add none; returns the first
        charge that does not fit (``None``: all were added). With ``lease``, its charges (some
        of ``charges``) are held under it until :meth:`settle`. Leases of these counters whose
        time has passed are given back first."""
        ...

    def used(self, key: str) -> int:
        """What a counter holds now (leases whose time has passed not counted)."""
        ...

    def reserved(self, key: str) -> tuple[int, float | None]:
        """What of a counter the leases of calls in flight hold, and when the last of them
        ends (``None``: no call in flight)."""
        ...

    def settle(self, lease: Lease, spent: int | None) -> None:
        """The lease's call ended having used ``spent`` tokens (``0``: it was never made;
        ``None``: unknown, so counted as what was reserved): each of its counters then holds
        ``spent`` in place of the reservation. A lease already given back (the call outlived
        it) adds ``spent``. A shared book that cannot be reached right now finishes it once
        it can, rather than fail the caller, whose model call has answered."""
        ...

    def close(self) -> None:
        """Let go of what the book holds open (a file; nothing for a shared client)."""
        ...


def settled(charge: Charge, held: int | None, spent: int | None) -> int:
    """What settling ``charge`` adds to its counter: ``held`` is the amount its lease still
    held (``None``: the lease was given back), ``spent`` the call's tokens (``None``: as
    reserved)."""
    used = charge.amount if spent is None else spent
    return used if held is None else used - held


class LocalBudgetBook:
    """Counters in this process, under one lock (one replica)."""

    blocking = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, float]] = {}
        self._leases: dict[str, dict[str, tuple[int, float]]] = {}
        """By counter: each lease's id, its amount and until when it holds."""

    def _given_back(self, key: str, now: float) -> int:
        """The counter after giving back its leases past their time (under the lock)."""
        used, reset_at = self._counts.get(key, (0, now))
        leases = self._leases.get(key)
        if leases:
            late = [lid for lid, (_a, until) in leases.items() if until < now]
            for lid in late:
                used -= leases.pop(lid)[0]
            if late:
                used = max(0, used)
                self._counts[key] = (used, reset_at)
        return used if reset_at > now else 0

    def take(
        self, charges: Sequence[Charge], now: float, lease: Lease | None = None
    ) -> Charge | None:
        with self._lock:
            counts = self._counts
            used = {charge.key: self._given_back(charge.key, now) for charge in charges}
            for charge in charges:
                if used[charge.key] + charge.amount > charge.limit:
                    return charge
            for charge in charges:
                counts[charge.key] = (used[charge.key] + charge.amount, charge.reset_at)
            if lease is not None:
                for charge in lease.charges:
                    self._leases.setdefault(charge.key, {})[lease.id] = (charge.amount, lease.until)
            if len(counts) > 100_000:  # ended periods are never read again
                for key in [k for k, (_u, r) in counts.items() if r <= now]:
                    del counts[key]
                    self._leases.pop(key, None)
            return None

    def used(self, key: str) -> int:
        with self._lock:
            now = time.time()
            return self._given_back(key, now) if key in self._counts else 0

    def reserved(self, key: str) -> tuple[int, float | None]:
        now = time.time()
        with self._lock:
            live = [(a, u) for a, u in self._leases.get(key, {}).values() if u >= now]
        return sum(a for a, _ in live), max((u for _, u in live), default=None)

    def settle(self, lease: Lease, spent: int | None) -> None:
        with self._lock:
            for charge in lease.charges:
                held = self._leases.get(charge.key, {}).pop(lease.id, None)
                delta = settled(charge, None if held is None else held[0], spent)
                used, reset_at = self._counts.get(charge.key, (0, charge.reset_at))
                self._counts[charge.key] = (max(0, used + delta), reset_at)

    def close(self) -> None:
        """Nothing to close."""


def period_key(period: Period, now: float) -> tuple[str, float]:
    """The period's name and when it ends (UTC)."""
    t = time.gmtime(now)
    if period == "minute":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, 0))
        return time.strftime("%Y%m%dT%H%M", t), float(start + 60)
    if period == "day":
        start = calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
        return time.strftime("%Y%m%d", t), float(start + 86400)
    year, month = (t.tm_year + 1, 1) if t.tm_mon == 12 else (t.tm_year, t.tm_mon + 1)
    return time.strftime("%Y%m", t), float(calendar.timegm((year, month, 1, 0, 0, 0)))


_PERIOD: dict[str, Period] = {
    "tokens_per_day": "day",
    "tokens_per_month": "month",
    "model_calls_per_day": "day",
    "model_calls_per_month": "month",
    "turns_per_minute": "minute",
}


def charges(
    policy: BudgetPolicy, user: UserContext, amounts: Mapping[str, int], now: float
) -> list[Charge]:
    """The charges of ``amounts`` (by kind: ``tokens``, ``model_calls``, ``turns``) against
    the caller's budgets."""
    found: list[Charge] = []
    for scope, limits in policy.scopes(user):
        for budget, limit in limits.items():
            kind = budget.rsplit("_per_", 1)[0]
            amount = amounts.get(kind)
            if not amount:
                continue
            name, reset_at = period_key(_PERIOD[budget], now)
            key = f"{scope.replace(' ', ':')}:{budget}:{name}"
            found.append(
                Charge(
                    key=key, amount=amount, limit=limit, reset_at=reset_at, budget=budget,
                    scope=scope,
                )
            )  # fmt: skip
    return found


def standing(
    policy: BudgetPolicy,
    book: BudgetBook,
    user: UserContext,
    *,
    tenant_only: bool = False,
    now: float | None = None,
) -> list[dict[str, Any]]:
    """Each budget of ``user`` (their tenant's, then their own; ``tenant_only``: the
    tenant's alone) in its current period: ``budget``, ``scope``, ``limit``, ``used``
    (reserved by calls in flight included), ``remaining``, ``reset_at``, ``reserved`` (what
    of ``used`` calls in flight hold) and ``reserved_until`` (when the last of their leases
    ends, given back if never settled; ``None``: no call in flight)."""
    at = time.time() if now is None else now
    found: list[dict[str, Any]] = []
    for charge in charges(policy, user, {"tokens": 1, "model_calls": 1, "turns": 1}, at):
        if tenant_only and not charge.scope.startswith("tenant "):
            continue
        used = book.used(charge.key)
        held, until = book.reserved(charge.key) if charge.budget.startswith("tokens") else (0, None)
        found.append(
            {
                "budget": charge.budget,
                "scope": charge.scope,
                "limit": charge.limit,
                "used": used,
                "remaining": max(0, charge.limit - used),
                "reset_at": charge.reset_at,
                "reserved": held,
                "reserved_until": until,
            }
        )
    return found


def refusal(book: BudgetBook, charge: Charge, now: float) -> BudgetExceededError:
    used = book.used(charge.key)
    wait = max(1, int(charge.reset_at - now + 0.999))
    name = charge.budget.replace("_", " ")
    if charge.amount > charge.limit:  # can never fit: say so rather than "spent"
        message = (
            f"one model call may use up to {charge.amount} tokens (the model's context "
            f"window), more than the whole {name} budget of {charge.scope} ({charge.limit}): "
            "raise the budget or lower context_tokens"
        )
    else:
        message = (
            f"the {name} budget of {charge.scope} is spent ({used} of {charge.limit} used "
            f"or reserved); it resets in {wait} s"
        )
    return BudgetExceededError(
        message,
        budget=charge.budget,
        scope=charge.scope,
        limit=charge.limit,
        used=used,
        reset_at=charge.reset_at,
    )


class TurnMeter:
    """The :class:`~shelfhand.core.metering.Meter` of one turn of ``user``.

    ``on_refused`` hears of each model call beside the run's loop that its budget refused
    (the rerank of a search, a follow-up's rewrite: the turn goes on without it), with what
    the call was for: the service audits it.
    """

    def __init__(
        self,
        book: BudgetBook,
        policy: BudgetPolicy,
        user: UserContext,
        *,
        on_refused: Callable[[BudgetExceededError, str], None] | None = None,
        lease: float = LEASE_S,
    ) -> None:
        self.book = book
        self.policy = policy
        self.user = user
        self.on_refused = on_refused
        self.lease = lease
        """Seconds a call's reservation is held for it (:class:`Lease`)."""
        self._reserved: dict[int, Lease | None] = {}
        self._ids = itertools.count(1)  # (next() is atomic: a reranker reserves from its thread)
        self._closed = False
        self.blocking = book.blocking and any(limits.items() for _, limits in policy.scopes(user))
        """Whether the book waits on a file or a server (see :mod:`shelfhand.core.metering`)
        and this caller has budgets in it: a caller without budgets never waits on them."""

    def start_turn(self, now: float | None = None) -> None:
        """Count the turn against ``turns_per_minute``.

        Raises:
            BudgetExceededError: The caller has used their turns of this minute.
        """
        at = time.time() if now is None else now
        turn = charges(self.policy, self.user, {"turns": 1}, at)
        if turn and (over := self.book.take(turn, at)) is not None:
            raise refusal(self.book, over, at)

    def reserve(self, tokens: int) -> int:
        now = time.time()
        taken = charges(self.policy, self.user, {"tokens": tokens, "model_calls": 1}, now)
        held = tuple(c for c in taken if c.budget.startswith("tokens"))
        lease = Lease(id=new_id(), until=now + self.lease, charges=held) if held else None
        over = self.book.take(taken, now, lease) if taken else None
        if over is not None:
            raise refusal(self.book, over, now)
        reservation = next(self._ids)
        self._reserved[reservation] = lease
        if self._closed:
            # the turn ended while this was written from a worker thread (its caller left as
            # the call was reserved): nobody will settle it, so it is given back now rather
            # than when its lease ends. (close() sets _closed before it pops what is reserved,
            # and this checks it after adding: one of the two sees the other's write)
            given = self._reserved.pop(reservation, None)
            if given is not None:
                self.book.settle(given, 0)
        return reservation

    def settle(self, reserved: int, usage: Usage | None) -> None:
        lease = self._reserved.pop(reserved, None)
        if lease is None:
            return
        spent = None if usage is None else usage.input_tokens + usage.output_tokens
        self.book.settle(lease, spent)

    def settle_soon(self, reserved: int, usage: Usage | None) -> asyncio.Future[None] | None:
        """:meth:`settle` that does not wait on the book: the reservation ends now, and a
        blocking book is written from a worker thread (its future returned; ``None``:
        written already)."""
        lease = self._reserved.pop(reserved, None)
        if lease is None:
            return None
        spent = None if usage is None else usage.input_tokens + usage.output_tokens
        return soon_if(self.blocking, self.book.settle, lease, spent)

    def refused(self, error: BudgetExceededError, purpose: str) -> None:
        if self.on_refused is not None:
            self.on_refused(error, purpose)

    def close(self) -> None:
        """The turn ended: a reservation never settled (a call that failed) is released
        (written from a worker thread for a blocking book: a turn may be closing because it
        was cancelled, and must not wait). A reservation still being written then (from a
        worker thread) is given back as soon as it is (:meth:`reserve`)."""
        self._closed = True
        while self._reserved:  # (popitem is atomic: a reranker's thread may settle meanwhile)
            _, lease = self._reserved.popitem()
            if lease is not None:
                soon_if(self.blocking, self.book.settle, lease, 0)
