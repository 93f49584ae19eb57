"""Budget counters in Redis, shared by every replica (``redis_url``).

A reservation is one Lua script: it reads every counter the call charges, and only when all
of them stay within their limits adds to each (and sets the key to expire a minute after its
period ends), so two replicas can never both take the last of a budget. Settling adds the
difference (may be negative). A lost connection is
:class:`~shelfhand.core.errors.DependencyUnavailableError` (503), never an unmetered call.

**A Redis that stops answering.** A write that got no answer may still be applied when Redis
answers again (it was sent). So each write is marked (a key of its own, kept
:data:`MARK_TTL` seconds) and the replica that sent it finishes it once Redis answers (a
thread, :class:`~shelfhand.backends.redis.Redo`):

- a reservation that got no answer (its call refused with 503) is undone if it was applied,
  and marked undone if not, so that it does nothing should it arrive later;
- a settlement (or the release of a reservation a failed call never used) is sent again,
  and applied once: it does not fail the turn whose model call has already answered.

**A call whose process stops.** Each counter's leases (:class:`~shelfhand.usage.budgets.Lease`)
are a sorted set beside it, scored by when each ends; a reservation (and a read) gives back
those past their time before it reads the counter, in the same script.

Before, a reservation sent into a stopped Redis stayed charged until its period ended (a
month, for ``tokens_per_month``).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Sequence
from typing import Any

from shelfhand.backends.redis import KEY_PREFIX, Redo, redis_errors
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.usage.budgets import Charge, Lease

__all__ = ["MARK_TTL", "RedisBudgetBook"]

logger = logging.getLogger(__name__)

MARK_TTL = 600
"""Seconds a write's mark is kept (a write is tried again for half of this)."""

# Each counter K has a sorted set of the leases held on it (K's key with ``leases:``), each
# member ``<lease id>:<amount>`` scored by when the lease ends.

# what one counter holds once its leases past their time are given back (K, its leases, the
# time now); the counter is written back only when one was
_GIVE_BACK = """
local function given_back(counter, leases, now)
  local used = tonumber(redis.call('GET', counter) or '0')
  local late = redis.call('ZRANGEBYSCORE', leases, '-inf', '(' .. now)
  if #late > 0 then
    for _, member in ipairs(late) do
      used = used - tonumber(string.match(member, ':(%d+)$'))
    end
    redis.call('ZREMRANGEBYSCORE', leases, '-inf', '(' .. now)
    if used < 0 then used = 0 end
    if redis.call('EXISTS', counter) == 1 then
      redis.call('SET', counter, used, 'KEEPTTL')
    end
  end
  return used
end
"""

# KEYS: the counters, their leases, then the reservation's mark; ARGV: the amounts, the
# limits, when each counter expires, each counter's lease member ('' for none), when the
# lease ends, the time now, the mark's ttl
_TAKE = (
    _GIVE_BACK
    + """
local n = (#KEYS - 1) / 2
if redis.call('EXISTS', KEYS[2 * n + 1]) == 1 then
  return -1
end
local used = {}
for i = 1, n do
  used[i] = given_back(KEYS[i], KEYS[n + i], ARGV[4 * n + 2])
end
for i = 1, n do
  if used[i] + tonumber(ARGV[i]) > tonumber(ARGV[n + i]) then
    return i
  end
end
for i = 1, n do
  redis.call('INCRBY', KEYS[i], ARGV[i])
  redis.call('EXPIREAT', KEYS[i], ARGV[2 * n + i])
  if ARGV[3 * n + i] ~= '' then
    redis.call('ZADD', KEYS[n + i], ARGV[4 * n + 1], ARGV[3 * n + i])
    redis.call('EXPIREAT', KEYS[n + i], ARGV[2 * n + i])
  end
end
redis.call('SET', KEYS[2 * n + 1], 'taken', 'EX', ARGV[4 * n + 3])
return 0
"""
)

# a reservation that got no answer: given back if it was taken (its leases ended); marked so
# that it does nothing if it arrives later. KEYS as _TAKE; ARGV: the amounts, the lease
# members ('' for none), the mark's ttl
_UNDO = """
local n = (#KEYS - 1) / 2
if redis.call('GET', KEYS[2 * n + 1]) == 'taken' then
  for i = 1, n do
    local held = ARGV[n + i] == '' or redis.call('ZREM', KEYS[n + i], ARGV[n + i]) == 1
    if held and redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('DECRBY', KEYS[i], ARGV[i])
    end
  end
end
redis.call('SET', KEYS[2 * n + 1], 'undone', 'EX', ARGV[2 * n + 1])
return 0
"""

# a call's settlement, applied once however often sent: each counter gets what was spent in
# place of what its lease held, or what was spent when the lease was given back. KEYS: the
# counters, their leases, then the mark; ARGV: what was spent ('' for what was reserved), the
# amounts reserved, the lease members, when each counter expires, the mark's ttl
_SETTLE = """
local n = (#KEYS - 1) / 2
if redis.call('SET', KEYS[2 * n + 1], '1', 'NX', 'EX', ARGV[4 * n + 1]) then
  for i = 1, n do
    local amount = tonumber(ARGV[n + i])
    local spent = amount
    if ARGV[i] ~= '' then spent = tonumber(ARGV[i]) end
    if redis.call('ZREM', KEYS[n + i], ARGV[2 * n + i]) == 1 then
      spent = spent - amount
    end
    if spent ~= 0 then
      if redis.call('INCRBY', KEYS[i], spent) < 0 then
        redis.call('SET', KEYS[i], 0)
      end
      redis.call('EXPIREAT', KEYS[i], ARGV[3 * n + i])
    end
  end
end
return 0
"""

# KEYS: a counter, its leases; ARGV: the time now
_USED = (
    _GIVE_BACK
    + """
return given_back(KEYS[1], KEYS[2], ARGV[1])
"""
)

_PREFIX = KEY_PREFIX + "budget:"
_WHAT = "the budgets"


class RedisBudgetBook:
    """A :class:`~shelfhand.usage.budgets.BudgetBook` in Redis.

    Args:
        client: A ``redis.Redis`` client (:func:`shelfhand.backends.redis.open_redis`).
    """

    blocking = True

    def __init__(self, client: Any) -> None:
        self.client = client
        self._take = client.register_script(_TAKE)
        self._undo = client.register_script(_UNDO)
        self._settle = client.register_script(_SETTLE)
        self._used = client.register_script(_USED)
        self._redo = Redo(_WHAT, expire_after=MARK_TTL / 2)
        """Writes that got no answer, finished once Redis answers (see the module)."""

    def take(
        self, charges: Sequence[Charge], now: float, lease: Lease | None = None
    ) -> Charge | None:
        if not charges:
            return None
        mark = f"{_PREFIX}take:{uuid.uuid4().hex}"
        held = {c.key: c.amount for c in lease.charges} if lease is not None else {}
        members = [
            f"{lease.id}:{held[c.key]}" if lease is not None and c.key in held else ""
            for c in charges
        ]
        keys = [*(_PREFIX + c.key for c in charges), *(_leases(c.key) for c in charges), mark]
        amounts = [c.amount for c in charges]
        args = [
            *amounts,
            *(c.limit for c in charges),
            *(int(c.reset_at) + 60 for c in charges),
            *members,
            repr(lease.until) if lease is not None else 0,
            repr(now),
            MARK_TTL,
        ]
        # (Redis still away: 503 without asking it; else what waits is done first.) With no
        # answer, it may be applied once Redis answers, for a call that was refused: undone
        undo = functools.partial(self._undo, keys=keys, args=[*amounts, *members, MARK_TTL])
        over = int(
            self._redo.send(
                functools.partial(self._take, keys=keys, args=args), key=mark, if_unanswered=undo
            )
        )
        if over < 0:  # pragma: no cover - a new mark cannot exist
            raise RuntimeError("a budget reservation's new mark already existed")
        return None if over == 0 else charges[over - 1]

    def close(self) -> None:
        """Nothing to close: the client belongs to the app's shared state."""

    def used(self, key: str) -> int:
        with redis_errors(_WHAT):
            value = self._used(keys=[_PREFIX + key, _leases(key)], args=[repr(time.time())])
        return int(value or 0)

    def reserved(self, key: str) -> tuple[int, float | None]:
        with redis_errors(_WHAT):
            live = self.client.zrangebyscore(_leases(key), time.time(), "+inf", withscores=True)
        amount = sum(_amount(member) for member, _ in live)
        return amount, max((float(until) for _, until in live), default=None)

    def settle(self, lease: Lease, spent: int | None) -> None:
        """End the lease (see :meth:`~shelfhand.usage.budgets.BudgetBook.settle`); with no
        answer from Redis, sent again once it answers (applied once), and this returns."""
        if not lease.charges:
            return
        mark = f"{_PREFIX}settle:{uuid.uuid4().hex}"
        charges = lease.charges
        keys = [*(_PREFIX + c.key for c in charges), *(_leases(c.key) for c in charges), mark]
        args = [
            *("" if spent is None else spent for _ in charges),
            *(c.amount for c in charges),
            *(f"{lease.id}:{c.amount}" for c in charges),
            *(int(max(c.reset_at, time.time())) + 60 for c in charges),
            MARK_TTL,
        ]
        write = functools.partial(self._settle, keys=keys, args=args)
        try:
            with redis_errors(_WHAT):
                write()
        except DependencyUnavailableError as exc:
            logger.warning("settling budgets in Redis: %s; sent again once it answers", exc)
            self._redo.add(mark, write)


def _leases(key: str) -> str:
    """The sorted set of the leases held on counter ``key``."""
    return f"{_PREFIX}leases:{key}"


def _amount(member: bytes | str) -> int:
    """The amount of a lease member, ``<lease id>:<amount>`` (bytes or str, as the client
    decodes)."""
    text = member.decode() if isinstance(member, bytes) else member
    return int(text.rsplit(":", 1)[1])
