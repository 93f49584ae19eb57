"""Budget counters in Redis, shared by every replica (``redis_url``).

A reservation is one Lua script: it reads every counter the call charges, and only when all
of them stay within their limits adds to each (and sets the key to expire a minute after its
period ends), so two replicas can never both take the last of a budget. Settling adds the
difference (``INCRBY``, may be negative). A lost connection is
:class:`~shelfhand.core.errors.DependencyUnavailableError` (503), never an unmetered call.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from shelfhand.backends.redis import KEY_PREFIX, redis_errors
from shelfhand.usage.budgets import Charge

__all__ = ["RedisBudgetBook"]

_TAKE = """
local n = #KEYS
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
return 0
"""

_PREFIX = KEY_PREFIX + "budget:"


class RedisBudgetBook:
    """A :class:`~shelfhand.usage.budgets.BudgetBook` in Redis.

    Args:
        client: A ``redis.Redis`` client (:func:`shelfhand.backends.redis.open_redis`).
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self._take = client.register_script(_TAKE)

    def take(self, charges: Sequence[Charge], now: float) -> Charge | None:
        del now  # Redis expires ended periods itself
        if not charges:
            return None
        keys = [_PREFIX + c.key for c in charges]
        args = [
            *(c.amount for c in charges),
            *(c.limit for c in charges),
            *(int(c.reset_at) + 60 for c in charges),
        ]
        with redis_errors():
            over = int(self._take(keys=keys, args=args))
        return None if over == 0 else charges[over - 1]

    def used(self, key: str) -> int:
        with redis_errors():
            value = self.client.get(_PREFIX + key)
        return int(value or 0)

    def adjust(self, changes: Mapping[str, tuple[int, float]]) -> None:
        if not changes:
            return
        with redis_errors():
            pipe = self.client.pipeline(transaction=False)
            for key, (delta, reset_at) in changes.items():
                pipe.incrby(_PREFIX + key, delta)
                pipe.expireat(_PREFIX + key, int(max(reset_at, time.time())) + 60)
            pipe.execute()
