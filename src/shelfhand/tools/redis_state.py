"""Governance state shared by several replicas, in Redis (``redis_url``).

:class:`RedisGovernanceState` gives :class:`~shelfhand.tools.governance.Governance` what it
otherwise keeps in the process:

- rate-limit buckets (:class:`RedisRateLimiter`): the same token bucket as
  :class:`~shelfhand.tools.limits.RateLimiter`, updated atomically by one Lua script on the
  Redis clock, keyed by tool, limit and caller scope (tenant and user) as today;
- circuit-breaker state per tool and target (:class:`RedisCircuitBreaker`): the same
  closed / open / half-open machine, each transition one Lua script;
- the opt-in result cache (``cache_ttl``) and its single-flight: one replica computes
  (``SET NX`` on a flight key), the others poll for the cached result for at most the
  tool's timeout, then compute themselves.

Failure behaviour: what guards calls (rate limits, breakers) raises
:class:`~shelfhand.core.errors.DependencyUnavailableError` when Redis cannot be reached (the
turn fails with 503; calls never run unlimited); the cache degrades to "no cache" with a
warning, logged at most once a minute.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from shelfhand.backends.redis import KEY_PREFIX, redis_errors
from shelfhand.core.messages import Citation
from shelfhand.tools.limits import Rate

if TYPE_CHECKING:
    from shelfhand.tools.tool import ToolOutput

__all__ = ["RedisCircuitBreaker", "RedisGovernanceState", "RedisRateLimiter"]

logger = logging.getLogger(__name__)

# KEYS[1] bucket; ARGV: capacity, tokens per second, expiry ms. Returns the wait as a string.
_BUCKET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local cap = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local tokens = tonumber(b[1])
local ts = tonumber(b[2])
if tokens == nil then tokens = cap; ts = now end
tokens = math.min(cap, tokens + math.max(0, now - ts) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return tostring(wait)
"""


class RedisRateLimiter:
    """Token buckets in Redis, one per key: ``calls`` tokens refilled over ``period``
    (the interface of :class:`~shelfhand.tools.limits.RateLimiter`; ``now`` is ignored:
    replicas share the Redis clock)."""

    __slots__ = ("_client", "_prefix", "_script", "rate")

    def __init__(self, client: Any, rate: Rate, *, name: str) -> None:
        self.rate = rate
        self._client = client
        self._prefix = f"{KEY_PREFIX}rate:{name}:"
        self._script = client.register_script(_BUCKET)

    def acquire(self, key: str, now: float) -> float:
        expiry_ms = int(self.rate.period * 1000) + 1000  # a full bucket carries no information
        with redis_errors("rate limits"):
            wait = self._script(
                keys=[self._prefix + key],
                args=[self.rate.calls, self.rate.calls / self.rate.period, expiry_ms],
            )
        return float(wait)


# --- circuit breakers --------------------------------------------------------------------
# A hash per breaker: state, opened_at, trial, window_start, calls, failures. Times on the
# Redis clock. ARGV[1] min_calls, ARGV[2] failure_rate, ARGV[3] window, ARGV[4] reset_after.
_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) + tonumber(t[2]) / 1000000\n"
_LOAD = (
    "local h = redis.call('HMGET', KEYS[1], 'state', 'opened_at', 'trial', 'window_start',"
    " 'calls', 'failures')\n"
    "local state = h[1] or 'closed' local opened_at = tonumber(h[2] or '0')"
    " local trial = h[3] == '1' local ws = tonumber(h[4] or '-1e18')"
    " local calls = tonumber(h[5] or '0') local failures = tonumber(h[6] or '0')\n"
)
_SAVE = (
    "redis.call('HSET', KEYS[1], 'state', state, 'opened_at', tostring(opened_at),"
    " 'trial', trial and '1' or '0', 'window_start', tostring(ws), 'calls', calls,"
    " 'failures', failures)\n"
    "redis.call('PEXPIRE', KEYS[1], 86400000)\n"
)
_BEFORE = (
    _NOW
    + _LOAD
    + """
if state == 'closed' then return false end
if state == 'open' then
  local waited = now - opened_at
  if waited < tonumber(ARGV[4]) then return tostring(tonumber(ARGV[4]) - waited) end
  state = 'half_open' trial = false
end
if trial then
"""
    + _SAVE
    + """  return '0'
end
trial = true
"""
    + _SAVE
    + "return false\n"
)
_SUCCESS = (
    _NOW
    + _LOAD
    + """
if state ~= 'closed' then
  state = 'closed' trial = false calls = 0 failures = 0 ws = now
else
  if now - ws >= tonumber(ARGV[3]) then ws = now calls = 0 failures = 0 end
  calls = calls + 1
end
"""
    + _SAVE
    + "return state\n"
)
_FAILURE = (
    _NOW
    + _LOAD
    + """
if state ~= 'closed' then
  state = 'open' opened_at = now trial = false
else
  if now - ws >= tonumber(ARGV[3]) then ws = now calls = 0 failures = 0 end
  calls = calls + 1 failures = failures + 1
  if calls >= tonumber(ARGV[1]) and failures >= tonumber(ARGV[2]) * calls then
    state = 'open' opened_at = now trial = false
  end
end
"""
    + _SAVE
    + "return state\n"
)
_NEUTRAL = (
    _NOW + _LOAD + "if state == 'half_open' then trial = false\n" + _SAVE + "end return state\n"
)


class RedisCircuitBreaker:
    """A :class:`~shelfhand.core.breaker.CircuitBreaker` whose state lives in Redis, so every
    replica sees one breaker per tool (and target): failures on replica A open it for B.

    It implements the same :class:`~shelfhand.core.breaker.Breaker` protocol and the same
    window/threshold decisions, but each transition is decided inside Redis by one Lua script,
    atomically on the Redis clock: deciding in Python would need a read, a decision and a
    conditional write per call (WATCH/MULTI, retried under contention) for the replicas not to
    overwrite each other. So the decisions are written twice, once per language (change
    both together); ``trip_after`` exists only in the in-process breaker (the pipeline does
    not use it)."""

    __slots__ = ("_args", "_client", "_key", "_scripts", "name")

    def __init__(
        self,
        client: Any,
        name: str,
        *,
        min_calls: int = 5,
        failure_rate: float = 0.5,
        window: float = 60.0,
        reset_after: float = 30.0,
    ) -> None:
        self.name = name
        self._client = client
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
        self._key = f"{KEY_PREFIX}breaker:{digest}"
        self._args = [min_calls, failure_rate, window, reset_after]
        self._scripts = {
            "before": client.register_script(_BEFORE),
            "success": client.register_script(_SUCCESS),
            "failure": client.register_script(_FAILURE),
            "neutral": client.register_script(_NEUTRAL),
        }

    def _run(self, script: str) -> Any:
        with redis_errors("circuit breakers"):
            return self._scripts[script](keys=[self._key], args=self._args)

    @property
    def state(self) -> str:
        with redis_errors("circuit breakers"):
            value = self._client.hget(self._key, "state")
        return str(value or "closed")

    def before(self, now: float) -> float | None:
        wait = self._run("before")
        return None if wait is None else float(wait)

    def success(self, now: float) -> None:
        self._run("success")

    def failure(self, now: float) -> None:
        if self._run("failure") == "open":
            logger.warning("circuit %s is open (shared by every replica)", self.name)

    def neutral(self) -> None:
        self._run("neutral")


# --- result cache and single-flight --------------------------------------------------------
def _encode(output: ToolOutput) -> str:
    return json.dumps(
        {
            "content": output.content,
            "is_error": output.is_error,
            "citations": [c.to_dict() for c in output.citations],
        },
        ensure_ascii=False,
    )


def _decode(text: str) -> ToolOutput:
    from shelfhand.tools.tool import ToolOutput

    data = json.loads(text)
    return ToolOutput(
        content=data["content"],
        is_error=bool(data["is_error"]),
        citations=tuple(Citation.from_dict(c) for c in data["citations"]),
    )


class RedisGovernanceState:
    """Shared governance state in Redis for :class:`~shelfhand.tools.governance.Governance`.

    Args:
        client: A ``redis.Redis`` client (strings decoded).
        poll_interval: Seconds between looks at the cache while another replica computes.
    """

    def __init__(self, client: Any, *, poll_interval: float = 0.05) -> None:
        self.client = client
        self.poll_interval = poll_interval
        self._warned_at = float("-inf")

    def rate_limiter(self, name: str, rate: Rate) -> RedisRateLimiter:
        return RedisRateLimiter(self.client, rate, name=name)

    def breaker(self, name: str, **options: Any) -> RedisCircuitBreaker:
        return RedisCircuitBreaker(self.client, name, **options)

    @staticmethod
    def _key(kind: str, key: tuple[str, str, str]) -> str:
        digest = hashlib.sha256("\x00".join(key).encode("utf-8")).digest()
        return f"{KEY_PREFIX}{kind}:{base64.urlsafe_b64encode(digest).decode().rstrip('=')}"

    def _degraded(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= 60:
            self._warned_at = now
            logger.warning("result cache unavailable (Redis: %s); calls run uncached", exc)

    def cache_get(self, key: tuple[str, str, str]) -> ToolOutput | None:
        """The cached output of this call (tool, caller scope, arguments), if any."""
        try:
            text = self.client.get(self._key("cache", key))
        except Exception as exc:
            self._degraded(exc)
            return None
        return None if text is None else _decode(text)

    def cache_put(self, key: tuple[str, str, str], output: ToolOutput, ttl: float) -> None:
        try:
            self.client.set(self._key("cache", key), _encode(output), px=max(1, int(ttl * 1000)))
        except Exception as exc:
            self._degraded(exc)

    def lead(self, key: tuple[str, str, str], seconds: float) -> bool:
        """Claim the computation of this call for ``seconds``; ``False`` when another replica
        computes it (or Redis is away: then everyone computes, uncached)."""
        try:
            won = self.client.set(
                self._key("flight", key), "1", nx=True, px=max(1, int(seconds * 1000))
            )
        except Exception as exc:
            self._degraded(exc)
            return True
        return bool(won)

    def done(self, key: tuple[str, str, str]) -> None:
        try:
            self.client.delete(self._key("flight", key))
        except Exception as exc:
            self._degraded(exc)

    def computing(self, key: tuple[str, str, str]) -> bool:
        try:
            return bool(self.client.exists(self._key("flight", key)))
        except Exception as exc:
            self._degraded(exc)
            return False
