"""Approvals shared by several replicas, in Redis (``redis_url``).

A call paused on replica A can be approved or rejected through replica B:

- :meth:`RedisApprovals.open` keeps the request (redacted arguments, its caller, the session
  it belongs to once bound) in Redis as well as in the process, and indexes it under its
  owner, so :meth:`~RedisApprovals.get` and :meth:`~RedisApprovals.pending` answer from any
  replica;
- :meth:`~RedisApprovals.decide` claims the decision atomically (one Lua script: the request
  must exist and be undecided; a second decision from any replica is refused);
- the waiting run on A resumes at once for a decision made on A, and within
  ``poll_interval`` seconds for one made elsewhere (A polls the decision key while it waits,
  bounded by the approval ``timeout`` as in one process).

The owner checks stay where they are (:meth:`shelfhand.service.chat.ChatService.decide`): the
request carries its caller, and the caller deciding must be the same tenant and user.

Without Redis an approval cannot be opened or decided
(:class:`~shelfhand.core.errors.DependencyUnavailableError`, HTTP 503); a run already waiting
keeps waiting for a local decision or its timeout.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from typing import Any

from shelfhand.backends.redis import KEY_PREFIX, redis_errors
from shelfhand.core.context import UserContext
from shelfhand.core.offload import on_state_thread
from shelfhand.tools.approvals import ApprovalDecision, ApprovalHandler, ApprovalRequest, Approvals

__all__ = ["RedisApprovals"]

logger = logging.getLogger(__name__)

# KEYS[1] request, KEYS[2] decision; ARGV[1] decision JSON, ARGV[2] its expiry in ms.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('GET', KEYS[1])
end
return false
"""
# KEYS[1] request; ARGV[1] session id: set it on the stored request, keeping its expiry.
_BIND = """
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local data = cjson.decode(raw)
data['session'] = ARGV[1]
redis.call('SET', KEYS[1], cjson.encode(data), 'KEEPTTL')
return 1
"""


def _owner_key(user: UserContext) -> str:
    digest = hashlib.sha256(user.scope.encode("utf-8")).hexdigest()[:32]
    return f"{KEY_PREFIX}approvals:{digest}"


def _request_of(raw: str) -> tuple[ApprovalRequest, str]:
    data = json.loads(raw)
    user = UserContext(tenant_id=data["tenant"], user_id=data["user"], roles=data["roles"])
    request = ApprovalRequest(
        id=data["id"],
        call_id=data["call_id"],
        tool=data["tool"],
        arguments=data["arguments"],
        user=user,
        trace_id=data["trace_id"],
        created_at=data["created_at"],
    )
    return request, str(data.get("session", ""))


class RedisApprovals(Approvals):
    """An :class:`~shelfhand.tools.approvals.Approvals` registry whose pending requests and
    decisions live in Redis, shared by every replica (see the module docstring).

    Args:
        client: A ``redis.Redis`` client (strings decoded).
        handler: As in :class:`Approvals`.
        timeout: As in :class:`Approvals` (also bounds how long a request stays in Redis).
        poll_interval: Seconds between looks for a decision made on another replica.
    """

    blocking = True

    def __init__(
        self,
        client: Any,
        *,
        handler: ApprovalHandler | None = None,
        timeout: float | None = 600.0,
        poll_interval: float = 0.1,
    ) -> None:
        super().__init__(handler=handler, timeout=timeout)
        self.client = client
        self.poll_interval = poll_interval
        self._expiry_ms = int(((timeout or 86400.0) + 60.0) * 1000)
        self._claim = client.register_script(_CLAIM)
        self._bind = client.register_script(_BIND)

    @staticmethod
    def _key(approval_id: str) -> str:
        return f"{KEY_PREFIX}approval:{approval_id}"

    @classmethod
    def _decision_key(cls, approval_id: str) -> str:
        return cls._key(approval_id) + ":decision"

    def _opened(self, request: ApprovalRequest) -> None:
        record = {
            "id": request.id,
            "call_id": request.call_id,
            "tool": request.tool,
            "arguments": dict(request.arguments),
            "tenant": request.user.tenant_id,
            "user": request.user.user_id,
            "roles": list(request.user.roles),
            "trace_id": request.trace_id,
            "created_at": request.created_at,
            "session": "",
        }
        with redis_errors("approvals"):
            pipe = self.client.pipeline()
            pipe.set(self._key(request.id), json.dumps(record, ensure_ascii=False))
            pipe.pexpire(self._key(request.id), self._expiry_ms)
            pipe.zadd(_owner_key(request.user), {request.id: request.created_at})
            pipe.pexpire(_owner_key(request.user), self._expiry_ms)
            pipe.execute()

    def bind_session(self, approval_id: str, session_id: str) -> None:
        super().bind_session(approval_id, session_id)
        with redis_errors("approvals"):
            self._bind(keys=[self._key(approval_id)], args=[session_id])

    def session_of(self, approval_id: str) -> str | None:
        local = super().session_of(approval_id)
        if local is not None:
            return local
        with redis_errors("approvals"):
            raw = self.client.get(self._key(approval_id))
        if raw is None:
            return None
        return _request_of(raw)[1] or None

    async def _arrival(
        self,
        approval_id: str,
        decided_here: asyncio.Future[ApprovalDecision],
        timeout: float | None,
    ) -> ApprovalDecision | None:
        """A decision made here resolves ``decided_here`` at once; one made on another
        replica is found by looking at its Redis key every ``poll_interval`` seconds."""
        give_up = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = self.poll_interval
            if give_up is not None:
                wait = max(0.0, min(wait, give_up - time.monotonic()))
            await asyncio.wait([decided_here], timeout=wait)  # never cancels the future
            if decided_here.done():
                return decided_here.result()
            # (a Redis command: from a state thread, so that a Redis that stopped answering
            # holds up this run, not the event loop)
            remote = await on_state_thread(self._remote_decision, approval_id)
            if remote is not None:
                return remote
            if give_up is not None and time.monotonic() >= give_up:
                return None

    def _time_out(self, approval_id: str) -> ApprovalDecision:
        """The timeout's rejection, claimed like any decision: if a replica decided first
        (in the last instant), its decision stands, so what its caller was told holds."""
        timed_out = super()._time_out(approval_id)
        payload = json.dumps(
            {"approved": False, "reason": timed_out.reason, "by": ""}, ensure_ascii=False
        )
        try:
            won = self._claim(
                keys=[self._key(approval_id), self._decision_key(approval_id)],
                args=[payload, self._expiry_ms],
            )
        except Exception as exc:
            logger.warning("approval %s: cannot record its timeout (Redis: %s)", approval_id, exc)
            return timed_out
        if won is not None:
            return timed_out
        return self._remote_decision(approval_id) or timed_out

    def _remote_decision(self, approval_id: str) -> ApprovalDecision | None:
        try:
            raw = self.client.get(self._decision_key(approval_id))
        except Exception as exc:  # Redis away: a local decision or the timeout still ends it
            logger.warning("approval %s: cannot read decisions (Redis: %s)", approval_id, exc)
            return None
        if raw is None:
            return None
        data = json.loads(raw)
        return ApprovalDecision(
            approved=bool(data["approved"]), reason=data["reason"], by=data["by"]
        )

    def _forgotten(self, request: ApprovalRequest) -> None:
        try:
            pipe = self.client.pipeline()
            pipe.delete(self._key(request.id))
            pipe.zrem(_owner_key(request.user), request.id)
            pipe.execute()
        except Exception as exc:  # it expires by itself
            logger.warning("approval %s: cannot remove it from Redis: %s", request.id, exc)

    def decide(self, approval_id: str, decision: ApprovalDecision) -> ApprovalRequest:
        payload = json.dumps(
            {"approved": decision.approved, "reason": decision.reason, "by": decision.by},
            ensure_ascii=False,
        )
        with redis_errors("approvals"):
            raw = self._claim(
                keys=[self._key(approval_id), self._decision_key(approval_id)],
                args=[payload, self._expiry_ms],
            )
        if raw is None:
            raise KeyError(f"no pending approval {approval_id!r} (unknown or already decided)")
        try:  # paused here: resume at once (elsewhere, its replica reads the decision)
            return super().decide(approval_id, decision)
        except KeyError:
            logger.info(
                "approval %s: %s, for the replica that waits for it",
                approval_id,
                "approved" if decision.approved else "rejected",
            )
            return _request_of(raw)[0]

    def get(self, approval_id: str) -> ApprovalRequest | None:
        local = super().get(approval_id)
        if local is not None:
            return local
        with redis_errors("approvals"):
            raw, decided = self.client.mget(
                [self._key(approval_id), self._decision_key(approval_id)]
            )
        if raw is None or decided is not None:
            return None
        return _request_of(raw)[0]

    def pending(self, user: UserContext | None = None) -> list[ApprovalRequest]:
        """Pending requests, oldest first: with ``user``, theirs on every replica; without,
        those waiting in this process."""
        if user is None:
            return super().pending()
        with redis_errors("approvals"):
            ids = self.client.zrange(_owner_key(user), 0, -1)
            if not ids:
                return []
            keys = [self._key(i) for i in ids]
            values = self.client.mget([*keys, *(self._decision_key(i) for i in ids)])
        raws, decisions = values[: len(ids)], values[len(ids) :]
        found = [
            _request_of(raw)[0]
            for raw, decided in zip(raws, decisions, strict=True)
            if raw is not None and decided is None
        ]
        return [r for r in found if r.user.scope == user.scope]
