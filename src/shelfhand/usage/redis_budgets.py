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

Before, a reservation sent into a stopped Redis stayed charged until its period ended (a
month, for ``tokens_per_month``).
"""

from __future__ import annotations

import functools
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from shelfhand.backends.redis import KEY_PREFIX, Redo, redis_errors
from shelfhand.core.errors import DependencyUnavailableError
from shelfhand.usage.budgets import Charge

__all__ = ["MARK_TTL", "RedisBudgetBook"]

logger = logging.getLogger(__name__)

MARK_TTL = 600
"""Seconds a write's mark is kept (a write is tried again for half of this)."""

# KEYS: the counters, then the reservation's mark; ARGV: the amounts, the limits, when each
# counter expires, the mark's ttl
_TAKE = """
local n = #KEYS - 1
if redis.call('EXISTS', KEYS[n + 1]) == 1 then
  return -1
end
for i = 1, n do
  local used = tonumber(redis.call('GET', KEYS[i]) or '0')
  if used + tonumber(ARGV[i]) > tonumber(ARGV[n + i]) then
    return i
  end
end
for i = 1, n do
  redis.call('INCRBY', KEYS[i], ARGV[i])
  redis.call('EXPIREAT', KEYS[i], ARGV[2 * n + i])
end
redis.call('SET', KEYS[n + 1], 'taken', 'EX', ARGV[3 * n + 1])
return 0
"""

# a reservation that got no answer: given back if it was taken; marked so that it does
# nothing if it arrives later. KEYS as _TAKE; ARGV: the amounts, the mark's ttl
_UNDO = """
local n = #KEYS - 1
if redis.call('GET', KEYS[n + 1]) == 'taken' then
  for i = 1, n do
    if redis.call('EXISTS', KEYS[i]) == 1 then
      redis.call('DECRBY', KEYS[i], ARGV[i])
    end
  end
end
redis.call('SET', KEYS[n + 1], 'undone', 'EX', ARGV[n + 1])
return 0
"""

# applied once, however often sent. KEYS: the counters, then the mark; ARGV: the changes,
# when each counter expires, the mark's ttl
_ADJUST = """
local n = #KEYS - 1
if redis.call('SET', KEYS[n + 1], '1', 'NX', 'EX', ARGV[2 * n + 1]) then
  for i = 1, n do
    redis.call('INCRBY', KEYS[i], ARGV[i])
    redis.call('EXPIREAT', KEYS[i], ARGV[n + i])
  end
end
return 0
"""

_PREFIX = KEY_PREFIX + "budget:"
_WHAT = "the budgets"


class RedisBudgetBook:
    """A :class:`~shelfhand.usage.budgets.BudgetBook` in Redis.

    Args:
        client: A ``redis.Redis`` client (:func:`shelfhand.backends.redis.open_redis`).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self._take = client.register_script(_TAKE)
        self._undo = client.register_script(_UNDO)
        self._adjust = client.register_script(_ADJUST)
        self._redo = Redo(_WHAT, expire_after=MARK_TTL / 2)
        """Writes that got no answer, finished once Redis answers (see the module)."""

    def take(self, charges: Sequence[Charge], now: float) -> Charge | None:
        del now  # Redis expires ended periods itself
        if not charges:
            return None
        mark = f"{_PREFIX}take:{uuid.uuid4().hex}"
        keys = [*(_PREFIX + c.key for c in charges), mark]
        amounts = [c.amount for c in charges]
        args = [
            *amounts,
            *(c.limit for c in charges),
            *(int(c.reset_at) + 60 for c in charges),
            MARK_TTL,
        ]
        # (Redis still away: 503 without asking it; else what waits is done first.) With no
        # answer, it may be applied once Redis answers, for a call that was refused: undone
        over = int(
            self._redo.send(
                functools.partial(self._take, keys=keys, args=args),
                key=mark,
                if_unanswered=functools.partial(self._undo, keys=keys, args=[*amounts, MARK_TTL]),
            )
        )
        if over < 0:  # pragma: no cover - a new mark cannot exist
            raise RuntimeError("a budget reservation's new mark already existed")
        return None if over == 0 else charges[over - 1]

    def close(self) -> None:
        """Nothing to close: the client belongs to the app's shared state."""

    def used(self, key: str) -> int:
        with redis_errors(_WHAT):
            value = self.client.get(_PREFIX + key)
        return int(value or 0)

    def adjust(self, changes: Mapping[str, tuple[int, float]]) -> None:
        """Add each change (settling, or releasing a reservation); with no answer from Redis,
        sent again once it answers (applied once), and this returns."""
        if not changes:
            return
        mark = f"{_PREFIX}adjust:{uuid.uuid4().hex}"
        keys = [*(_PREFIX + key for key in changes), mark]
        args = [
            *(delta for delta, _ in changes.values()),
            *(int(max(reset_at, time.time())) + 60 for _, reset_at in changes.values()),
            MARK_TTL,
        ]
        write = functools.partial(self._adjust, keys=keys, args=args)
        try:
            with redis_errors(_WHAT):
                write()
        except DependencyUnavailableError as exc:
            logger.warning("settling budgets in Redis: %s; sent again once it answers", exc)
            self._redo.add(mark, write)
