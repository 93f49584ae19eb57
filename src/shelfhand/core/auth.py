"""API keys → caller identity (tenant, user, roles).

Keys come from ``SHELFHAND_API_KEYS`` (JSON ``{"KEY": {"tenant": "t1", "user": "u1",
"roles": ["user"]}}``) or from ``[[api_keys]]`` tables in ``<workspace>/shelfhand.toml``
(``key``, ``tenant``, ``user``, ``roles``, and optionally ``budgets``: that caller's own
budgets, see :mod:`shelfhand.usage.budgets`). The environment wins when both are set.
Keys are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import read_toml


def _entry(key: str, data: Any, where: str) -> tuple[str, UserContext]:
    if not isinstance(data, Mapping):
        raise ConfigurationError(f"{where}: each API key needs a table with tenant and user")
    tenant, user = data.get("tenant"), data.get("user")
    roles = data.get("roles", [])
    if (
        not key
        or not isinstance(tenant, str)
        or not isinstance(user, str)
        or not tenant
        or not user
    ):
        raise ConfigurationError(f"{where}: an API key entry needs non-empty key, tenant and user")
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise ConfigurationError(f"{where}: roles must be a list of strings")
    return key, UserContext(tenant_id=tenant, user_id=user, roles=roles)


def load_api_keys(
    workspace: Path | None = None, *, env: Mapping[str, str] | None = None
) -> dict[str, UserContext]:
    """Read the configured API keys; raises :class:`ConfigurationError` on a malformed entry."""
    env = os.environ if env is None else env
    raw = env.get("SHELFHAND_API_KEYS")
    keys: dict[str, UserContext] = {}
    if raw:
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"SHELFHAND_API_KEYS is not valid JSON: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ConfigurationError("SHELFHAND_API_KEYS must be a JSON object of key → identity")
        for key, value in data.items():
            k, ctx = _entry(str(key), value, "SHELFHAND_API_KEYS")
            keys[k] = ctx
        return keys
    if workspace is not None and (workspace / "shelfhand.toml").is_file():
        path = workspace / "shelfhand.toml"
        data = read_toml(path)
        entries = data.get("api_keys", [])
        if not isinstance(entries, list):
            raise ConfigurationError(f"{path}: api_keys must be an array of tables ([[api_keys]])")
        for item in entries:
            key = item.get("key") if isinstance(item, Mapping) else None
            k, ctx = _entry(str(key or ""), item, str(path))
            keys[k] = ctx
    return keys


def load_key_budgets(
    workspace: Path | None = None, *, env: Mapping[str, str] | None = None
) -> dict[str, Mapping[str, Any]]:
    """The ``budgets`` table of each API key that has one, by its caller's scope
    (``tenant/user``), read from the same source as :func:`load_api_keys`; checked by
    :class:`~shelfhand.usage.budgets.BudgetPolicy`."""
    env = os.environ if env is None else env
    raw = env.get("SHELFHAND_API_KEYS")
    entries: list[Any] = []
    if raw:
        data = json.loads(raw)  # load_api_keys has checked it
        entries = list(data.values()) if isinstance(data, dict) else []
    elif workspace is not None and (workspace / "shelfhand.toml").is_file():
        found = read_toml(workspace / "shelfhand.toml").get("api_keys", [])
        entries = found if isinstance(found, list) else []
    budgets: dict[str, Mapping[str, Any]] = {}
    for item in entries:
        if isinstance(item, Mapping) and isinstance(item.get("budgets"), Mapping):
            budgets[f"{item.get('tenant')}/{item.get('user')}"] = item["budgets"]
    return budgets


def identify(keys: Mapping[str, UserContext], presented: str | None) -> UserContext | None:
    """The identity for a presented key, compared in constant time; ``None`` if unknown."""
    if not presented:
        return None
    found: UserContext | None = None
    for key, ctx in keys.items():
        if hmac.compare_digest(key.encode(), presented.encode()):
            found = ctx
    return found
