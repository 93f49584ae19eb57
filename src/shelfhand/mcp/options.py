"""What an MCP server's tools look like in a toolkit: prefix, filter, per-tool policy (docs/design.md M1).

The same options are accepted by every server class (``StdioServer(..., prefix="fs_")``) and by
``mcp.json`` / ``[mcp]`` entries (see :mod:`shelfhand.mcp.config`)::

    StdioServer(
        "npx", ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
        name="fs",
        prefix="fs_",                                   # fs_read_file, fs_write_file, ...
        tools={"deny": ["move_file"]},                  # or a list: only these
        confirm=False, cache_ttl=None,                  # server-wide defaults
        tool_settings={"write_file": ToolSettings(confirm=True, permission="admin")},
    )

Filters and ``tool_settings`` use the server's own tool names (before the prefix); filter
entries may be shell-style patterns (``read_*``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, get_args

from shelfhand.core.context import PermissionLevel, permission_rank
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.events import ToolProgress

__all__ = [
    "DEFAULT_OUTPUT_LIMIT",
    "ServerOptions",
    "ToolFilter",
    "ToolSettings",
    "check_prefix",
    "tool_filter",
    "tool_settings",
]

DEFAULT_OUTPUT_LIMIT = 64 * 1024
"""Bytes (UTF-8) of one MCP result the model sees; the rest is cut with a marker."""

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_-]{0,32}$")


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSettings:
    """Governance settings for MCP tools; ``None`` means "not set here".

    Attributes:
        confirm: A human must approve each call (see ``Approvals``).
        permission: Level a caller needs: ``user``, ``admin`` or ``system``.
        cache_ttl: Seconds a read-only result is reused (``None`` or ``0``: never cached).
        timeout: Seconds without an answer or a progress notification before the call fails.
    """

    confirm: bool | None = None
    permission: PermissionLevel | None = None
    cache_ttl: float | None = None
    timeout: float | None = None

    def __post_init__(self) -> None:
        if self.permission is not None:
            permission_rank(self.permission)  # ValueError naming the levels
        if self.cache_ttl is not None and self.cache_ttl < 0:
            raise InvalidArgumentError(f"cache_ttl must be 0 or more, got {self.cache_ttl}")
        if self.timeout is not None and self.timeout <= 0:
            raise InvalidArgumentError(f"timeout must be positive, got {self.timeout}")

    def over(self, base: ToolSettings) -> ToolSettings:
        """These settings, with ``base`` filling what is not set here."""
        return ToolSettings(
            confirm=base.confirm if self.confirm is None else self.confirm,
            permission=base.permission if self.permission is None else self.permission,
            cache_ttl=base.cache_ttl if self.cache_ttl is None else self.cache_ttl,
            timeout=base.timeout if self.timeout is None else self.timeout,
        )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "tool settings") -> ToolSettings:
        """Settings from a config mapping (keys ``confirm``, ``permission``, ``cache_ttl``,
        ``timeout``); a wrong key or type is an
        :class:`~shelfhand.core.errors.InvalidArgumentError` (a ValueError) naming ``where``."""
        unknown = sorted(set(data) - {"confirm", "permission", "cache_ttl", "timeout"})
        if unknown:
            raise InvalidArgumentError(
                f"{where}: unknown keys {', '.join(unknown)} "
                "(known: cache_ttl, confirm, permission, timeout)"
            )
        confirm = data.get("confirm")
        if confirm is not None and not isinstance(confirm, bool):
            raise InvalidArgumentError(f"{where}: confirm must be true or false")
        permission = data.get("permission")
        if permission is not None and permission not in get_args(PermissionLevel):
            raise InvalidArgumentError(f"{where}: permission must be user, admin or system")
        numbers: dict[str, float | None] = {}
        for key in ("cache_ttl", "timeout"):
            value = data.get(key)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int | float)
            ):
                raise InvalidArgumentError(f"{where}: {key} must be a number of seconds")
            numbers[key] = None if value is None else float(value)
        try:
            return cls(
                confirm=confirm,
                permission=permission,
                cache_ttl=numbers["cache_ttl"],
                timeout=numbers["timeout"],
            )
        except ValueError as exc:
            raise InvalidArgumentError(f"{where}: {exc}") from None


@dataclass(frozen=True, slots=True)
class ToolFilter:
    """Which of a server's tools are mounted: ``allow`` (``None``: all) minus ``deny``."""

    allow: tuple[str, ...] | None = None
    deny: tuple[str, ...] = ()

    def __call__(self, name: str) -> bool:
        if self.allow is not None and not any(fnmatch.fnmatchcase(name, p) for p in self.allow):
            return False
        return not any(fnmatch.fnmatchcase(name, p) for p in self.deny)


class ServerOptions(TypedDict, total=False):
    """Keyword options every MCP server class takes (see the module docstring).

    Keys:
        prefix: Put before every tool name the model sees (``fs_`` → ``fs_read_file``).
        tools: A list of tool names to mount (allow list), or ``{"allow": [...],
            "deny": [...]}``; patterns like ``read_*`` work.
        confirm: Every tool of the server needs a human's approval.
        permission: Level a caller needs for the server's tools.
        cache_ttl: Seconds read-only results are reused (default: never cached).
        tool_settings: Per-tool :class:`ToolSettings` (or mappings), by the server's names.
        output_limit: Bytes of one result the model sees (default 64 KiB).
        max_duration: Seconds a call may take in all, progress or not (default 10 × timeout).
        reconnect: Reconnect (respawn) after the connection is lost (default ``True``).
        on_progress: Called with a :class:`ToolProgress` for each progress notification.
    """

    prefix: str
    tools: Sequence[str] | Mapping[str, Sequence[str]] | ToolFilter | None
    confirm: bool
    permission: PermissionLevel
    cache_ttl: float | None
    tool_settings: Mapping[str, ToolSettings | Mapping[str, Any]] | None
    output_limit: int
    max_duration: float | None
    reconnect: bool
    on_progress: Callable[[ToolProgress], None] | None


def check_prefix(prefix: str, server: str) -> str:
    if not _PREFIX_RE.match(prefix):
        raise InvalidArgumentError(
            f"MCP server {server}: prefix {prefix!r} must be up to 32 ASCII letters, digits, "
            "'_' or '-'"
        )
    return prefix


def tool_filter(value: Any, server: str) -> ToolFilter:
    """A :class:`ToolFilter` from ``tools=`` (list, ``{"allow", "deny"}`` mapping or filter)."""
    if value is None:
        return ToolFilter()
    if isinstance(value, ToolFilter):
        return value
    here = f"MCP server {server}: tools"
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - {"allow", "deny"})
        if unknown:
            raise InvalidArgumentError(
                f"{here}: unknown keys {', '.join(unknown)} (known: allow, deny)"
            )
        allow = value.get("allow")
        return ToolFilter(
            None if allow is None else _names(allow, f"{here}.allow"),
            _names(value.get("deny", ()), f"{here}.deny"),
        )
    return ToolFilter(_names(value, here))


def tool_settings(value: Any, server: str) -> dict[str, ToolSettings]:
    """Per-tool settings from ``tool_settings=`` (values: :class:`ToolSettings` or mappings)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgumentError(
            f"MCP server {server}: tool_settings must map tool names to settings"
        )
    out: dict[str, ToolSettings] = {}
    for name, item in value.items():
        if isinstance(item, ToolSettings):
            out[str(name)] = item
        elif isinstance(item, Mapping):
            where = f"MCP server {server}: tool_settings.{name}"
            out[str(name)] = ToolSettings.from_mapping(item, where)
        else:
            raise InvalidArgumentError(
                f"MCP server {server}: tool_settings.{name} must be an object"
            )
    return out


def _names(value: Any, here: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise InvalidArgumentError(f"{here} must be a list of tool names")
    if not all(isinstance(v, str) and v for v in value):
        raise InvalidArgumentError(f"{here} must be a list of non-empty tool names")
    return tuple(value)
