"""The toolkit's registry: tools, tool groups, and what each caller may see (docs/design.md T4).

Ungrouped tools are always active; groups are inactive until switched on, by code
(:meth:`ToolRegistry.activate`) or by the model through the meta tool ``use_tool_group``, so a
large catalogue does not fill the context. Before the model sees anything, tools are filtered
by the caller's permission level; the visible tools and their schemas are cached per
permission level until a tool or group changes.

:class:`~shelfhand.tools.toolkit.Toolkit` extends the registry with running the model's
calls; each registered tool gets its governance plan here, once.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from shelfhand.core.context import RunContext, UserContext
from shelfhand.core.errors import InvalidArgumentError, ToolArgumentError
from shelfhand.tools.governance import Governance, GovernancePolicy, ToolPlan
from shelfhand.tools.tool import Tool, tool

if TYPE_CHECKING:
    from shelfhand.tools.audit import AuditLog

__all__ = ["META_TOOL_NAME", "AnyTool", "ToolRegistry"]

META_TOOL_NAME = "use_tool_group"

AnyTool = Tool[..., Any]


@dataclass(slots=True, kw_only=True)
class _Group:
    description: str
    active: bool


class ToolRegistry:
    """Tools and tool groups, filtered per caller; the base of
    :class:`~shelfhand.tools.toolkit.Toolkit` (see its arguments)."""

    def __init__(
        self,
        tools: Iterable[AnyTool | Callable[..., Any]] = (),
        *,
        policy: GovernancePolicy | None = None,
        audit: AuditLog | None = None,
        governance: Governance | None = None,
    ) -> None:
        if governance is not None and (policy is not None or audit is not None):
            raise InvalidArgumentError("pass either governance= or policy=/audit=, not both")
        self._gov = governance if governance is not None else Governance(policy, audit=audit)
        self._plans: dict[str, ToolPlan] = {}
        self._tools: dict[str, AnyTool] = {}
        self._membership: dict[str, str | None] = {}
        self._groups: dict[str, _Group] = {}
        self._version = 0
        self._schema_cache: dict[tuple[int, str], list[dict[str, Any]]] = {}
        self._visible_cache: dict[tuple[int, str], tuple[list[AnyTool], dict[str, AnyTool]]] = {}
        self._meta: tuple[int, AnyTool] | None = None
        self._meta_base: AnyTool | None = None
        for item in tools:
            self.add(item)

    # --- registry ----------------------------------------------------------------------------
    def add(
        self, tool_or_func: AnyTool | Callable[..., Any], *, group: str | None = None
    ) -> AnyTool:
        """Register a tool (or a function, wrapped with ``tool()``) and return it.

        Args:
            tool_or_func: The tool or function.
            group: Group to put it in; defaults to the tool's own ``group``. A group not yet
                declared with :meth:`add_group` is created, inactive, without a description.

        Raises:
            ValueError: a tool with this name is already registered, or the name is reserved.
        """
        item = tool_or_func if isinstance(tool_or_func, Tool) else tool(tool_or_func)
        if item.name == META_TOOL_NAME:
            raise InvalidArgumentError(
                f"tool name {META_TOOL_NAME!r} is reserved for the group switch"
            )
        if item.name in self._tools:
            raise InvalidArgumentError(f"a tool named {item.name!r} is already in this toolkit")
        group_name = group or item.group
        if group_name is not None and group_name not in self._groups:
            self._groups[group_name] = _Group(description="", active=False)
        self._tools[item.name] = item
        self._membership[item.name] = group_name
        self._plans[item.name] = self._gov.plan(item)
        self._changed()
        return item

    async def add_mcp(self, server: Any) -> list[AnyTool]:
        """Mount every tool of an MCP server (see :mod:`shelfhand.mcp`) under its own names.

        The server object does the work (``await server.mount(self)``), so this capability
        layer does not import the MCP client.
        """
        mounted: list[AnyTool] = await server.mount(self)
        return mounted

    def remove(self, name: str) -> AnyTool:
        """Unregister the tool called ``name`` and return it.

        Raises:
            KeyError: no such tool.
        """
        try:
            item = self._tools.pop(name)
        except KeyError:
            raise KeyError(f"no tool named {name!r} in this toolkit") from None
        del self._membership[name]
        self._plans.pop(name, None)
        self._changed()
        return item

    def add_group(
        self,
        name: str,
        description: str,
        tools: Iterable[AnyTool | Callable[..., Any]] = (),
        *,
        active: bool = False,
    ) -> None:
        """Declare a tool group (inactive by default) and add ``tools`` to it.

        Raises:
            ValueError: the group is already declared with a description, or a tool name clashes.
        """
        existing = self._groups.get(name)
        if existing is not None and existing.description:
            raise InvalidArgumentError(f"tool group {name!r} already exists")
        self._groups[name] = _Group(description=description, active=active)
        self._changed()
        for item in tools:
            self.add(item, group=name)

    def activate(self, group: str) -> None:
        """Make the tools of ``group`` visible (raises ``ValueError`` for an unknown group)."""
        self._group(group).active = True
        self._changed()

    def deactivate(self, group: str) -> None:
        """Hide the tools of ``group`` (raises ``ValueError`` for an unknown group)."""
        self._group(group).active = False
        self._changed()

    def _copy_registry(self, other: ToolRegistry) -> None:
        """Give ``other`` (on the same governance) these tools and plans, and its own copy of
        the group state."""
        other._plans = dict(self._plans)
        other._tools = dict(self._tools)
        other._membership = dict(self._membership)
        other._groups = {
            k: _Group(description=g.description, active=g.active) for k, g in self._groups.items()
        }

    @property
    def governance(self) -> Governance:
        """The governance pipeline (policy, breakers, cache, audit) of this toolkit."""
        return self._gov

    @property
    def tools(self) -> list[AnyTool]:
        """Every registered tool, in the order added (groups and permissions ignored)."""
        return list(self._tools.values())

    @property
    def groups(self) -> dict[str, bool]:
        """Group name → whether it is active."""
        return {name: g.active for name, g in self._groups.items()}

    def get(self, name: str) -> AnyTool | None:
        """The tool called ``name`` (including ``use_tool_group`` when groups exist), or None."""
        found = self._tools.get(name)
        if found is None and name == META_TOOL_NAME and self._groups:
            return self._meta_tool()
        return found

    # --- what the model sees ----------------------------------------------------------------
    def visible_tools(self, user: UserContext | None = None) -> list[AnyTool]:
        """Tools of active groups (ungrouped ones always) that ``user`` may use.

        ``None`` means a plain user. When any group exists, the meta tool ``use_tool_group``
        comes last. The list is cached like :meth:`schemas`; do not mutate it.
        """
        return self._view(user)[0]

    def _view(self, user: UserContext | None) -> tuple[list[AnyTool], dict[str, AnyTool]]:
        level = "user" if user is None else user.permission_level
        key = (self._version, level)
        cached = self._visible_cache.get(key)
        if cached is None:
            visible = self._build_visible(level)
            cached = (visible, {t.name: t for t in visible})
            self._visible_cache = {key: cached} | {
                k: v for k, v in self._visible_cache.items() if k[0] == self._version
            }
        return cached

    def schemas(self, user: UserContext | None = None) -> list[dict[str, Any]]:
        """The visible tools' schemas in OpenAI format, cached until the toolkit changes.

        The same list object is returned until a tool or group changes (or for another
        permission level); do not mutate it.
        """
        level = "user" if user is None else user.permission_level
        key = (self._version, level)
        cached = self._schema_cache.get(key)
        if cached is None:
            cached = self._build_schemas(user)
            # Keep only the current version: older lists can never be asked for again.
            self._schema_cache = {key: cached} | {
                k: v for k, v in self._schema_cache.items() if k[0] == self._version
            }
        return cached

    def _build_schemas(self, user: UserContext | None) -> list[dict[str, Any]]:
        return [t.schema() for t in self.visible_tools(user)]

    def _build_visible(self, level: str) -> list[AnyTool]:
        caller = UserContext(tenant_id="-", user_id="-", roles=(level,))
        out = [
            t
            for name, t in self._tools.items()
            if self._is_active(name) and caller.may_use(t.permission)
        ]
        if self._groups:
            out.append(self._meta_tool())
        return out

    def is_concurrency_safe(self, names: Iterable[str]) -> bool:
        """Whether calls to all of ``names`` may run in parallel (unknown names are harmless:
        they fail at once without side effects)."""
        for name in names:
            found = self.get(name)
            if found is not None and not found.concurrency_safe:
                return False
        return True

    def is_read_only(self, name: str) -> bool:
        """Whether ``name`` is a registered tool that changes nothing (False when unknown)."""
        found = self.get(name)
        return found is not None and found.read_only

    # --- groups -------------------------------------------------------------------------------
    def _group(self, name: str) -> _Group:
        try:
            return self._groups[name]
        except KeyError:
            known = ", ".join(self._groups) or "none"
            raise InvalidArgumentError(f"unknown tool group {name!r}; groups: {known}") from None

    def _is_active(self, name: str) -> bool:
        group = self._membership[name]
        return group is None or self._groups[group].active

    def _changed(self) -> None:
        self._version += 1

    def _meta_tool(self) -> AnyTool:
        if self._meta is not None and self._meta[0] == self._version:
            return self._meta[1]
        if self._meta_base is None:
            self._meta_base = self._make_meta_tool()
        lines = []
        for name, g in self._groups.items():
            state = "active" if g.active else "inactive"
            about = f": {g.description}" if g.description else ""
            lines.append(f"- {name} ({state}){about}")
        # A shallow copy with a new description: the schema changes, the function does not.
        meta = copy.copy(self._meta_base)
        meta.description = (
            "Switch a group of tools on or off. Tools of inactive groups are hidden; switch a "
            "group on when the task needs its tools. Groups:\n" + "\n".join(lines)
        )
        meta._schema = None
        self._meta = (self._version, meta)
        return meta

    def _make_meta_tool(self) -> AnyTool:
        # Async so that it runs on the event loop: toolkit state is not shared with threads.
        async def use_tool_group(run: RunContext, group: str, active: bool = True) -> str:
            """Switch a tool group on or off.

            Args:
                group: Name of the tool group.
                active: true to switch the group on, false to switch it off.
            """
            if group not in self._groups:
                known = ", ".join(self._groups)
                raise ToolArgumentError(f"unknown tool group {group!r}; groups: {known}")
            if active:
                self.activate(group)
            else:
                self.deactivate(group)
            names = [t.name for t in self.visible_tools(run.user) if t.name != META_TOOL_NAME]
            state = "on" if active else "off"
            listed = ", ".join(names) or "none"
            return f"Tool group {group!r} is now {state}. Tools now available: {listed}."

        return Tool(use_tool_group, name=META_TOOL_NAME)
