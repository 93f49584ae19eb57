"""Subagent declarations, in code and as Markdown files (docs/design.md S1).

In code::

    Subagent(
        "troubleshooter",
        "Explains error codes and fixes from the troubleshooting manual.",
        tools=["retrieve"],
        max_iters=4,
    )

As a file ``<workspace>/agents/troubleshooter.md`` (the file name is the id)::

    ---
    name: Troubleshooter
    description: Explains error codes and fixes from the troubleshooting manual.
    model: qwen-plus
    max_iters: 4
    tools: [retrieve]
    memory: isolated
    ---
    You are the troubleshooting specialist of a projector company. ...

The body is the system prompt. ``tools`` is a whitelist: missing or ``[]`` means *no tools*,
never "every tool of the main agent". ``memory`` is ``isolated`` (default: the subagent sees
only the task it is given) or ``shared`` (it also sees the main conversation).

Every declaration error is a :class:`DeclarationError` naming where it is: the file and line
of a bad front matter, both places of an id declared twice, the declaration of an unknown tool
(checked when a :class:`~shelfhand.agent.supervisor.Supervisor` is built, which knows the
tools).
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, Unpack

from shelfhand.core.errors import DeclarationError

if TYPE_CHECKING:
    from shelfhand.core.events import Event
    from shelfhand.core.messages import Message
    from shelfhand.core.results import RunResult
    from shelfhand.models.base import ChatModel

    from .runs import RunOptions

__all__ = [
    "AGENTS_FOLDER",
    "DeclarationError",
    "Delegable",
    "Subagent",
    "check_subagent_tools",
    "load_subagent_file",
    "load_subagent_files",
    "merge_declarations",
]

AGENTS_FOLDER = "agents"
"""Where a workspace keeps its subagent files: ``<workspace>/agents/*.md``."""

_ID_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_KEYS = (
    "name", "description", "model", "max_iters", "tools", "memory", "timeout", "a2a",
    "a2a_token_env", "forward_identity",
)  # fmt: skip
Memory = Literal["isolated", "shared"]


class Delegable(Protocol):
    """What can be delegated to: an :class:`~shelfhand.agent.agent.Agent`, a pipeline, a
    :class:`~shelfhand.agent.supervisor.Supervisor` (docs/design.md K2: a message in, a message out,
    or a stream of events ending with ``Final``)."""

    name: str

    def stream(
        self, prompt: str | Message, **options: Unpack[RunOptions]
    ) -> AsyncIterator[Event]: ...

    async def run(self, prompt: str | Message, **options: Unpack[RunOptions]) -> RunResult: ...


@dataclass(frozen=True, slots=True)
class Subagent:
    """A specialist the main agent can delegate a task to (it sees it as a tool named ``id``).

    Args:
        id: The tool name the main agent calls (``^[A-Za-z0-9_-]{1,64}$``).
        description: What it is good at: the main agent reads it to decide when to delegate.
        name: A display name (default: the id).
        model: The chat model, or the name of one (resolved by the supervisor); ``None``:
            the supervisor's model.
        tools: The names of the tools it may call (tools of the supervisor's toolkit or ids
            of other subagents). Empty: no tools, never "inherit".
        max_iters: The most model calls in one of its runs.
        memory: ``isolated`` (it sees only the task) or ``shared`` (also the conversation).
        system_prompt: Its instructions (a file's body).
        timeout: Seconds one delegation may take before it is abandoned.
        agent: A ready agent or pipeline to delegate to instead of building one from
            ``model``/``tools``/``max_iters``/``system_prompt`` (a remote A2A agent:
            :class:`~shelfhand.providers.a2a_client.RemoteA2AAgent`).
        a2a: The URL of a remote A2A agent to delegate to (an ``a2a:`` line in a file);
            :meth:`~shelfhand.app.App.subagents` turns it into ``agent``.
        a2a_token_env: The environment variable holding the bearer token for ``a2a``.
        forward_identity: Tell the remote agent who the caller is (tenant and user, in the
            message metadata); off by default.
        origin: Where it was declared (a file, or the code that built it), for error messages.
    """

    id: str
    description: str
    _: KW_ONLY
    name: str = ""
    model: ChatModel | str | None = None
    tools: tuple[str, ...] = ()
    max_iters: int = 6
    memory: Memory = "isolated"
    system_prompt: str = ""
    timeout: float = 120.0
    agent: Delegable | None = field(default=None, compare=False, repr=False)
    a2a: str = ""
    a2a_token_env: str = ""
    forward_identity: bool = False
    origin: str = ""

    def __post_init__(self) -> None:
        if not self.origin:  # the line of code that declared it
            frame = sys._getframe(2)
            object.__setattr__(self, "origin", f"{frame.f_code.co_filename}:{frame.f_lineno}")
        where = f"subagent {self.id!r} ({self.origin})"
        if not isinstance(self.id, str) or not _ID_RE.match(self.id):
            raise DeclarationError(
                f"{where}: the id must be 1-64 ASCII letters, digits, '_' or '-' "
                "(it becomes a tool name)"
            )
        if not isinstance(self.description, str) or not self.description.strip():
            raise DeclarationError(f"{where}: a description is required (the main agent reads it)")
        if isinstance(self.tools, str) or not isinstance(self.tools, Iterable):
            raise DeclarationError(f"{where}: tools must be a list of tool names")
        object.__setattr__(self, "tools", tuple(self.tools))
        if not all(isinstance(t, str) and t for t in self.tools):
            raise DeclarationError(f"{where}: tools must be a list of tool names")
        if isinstance(self.max_iters, bool) or not isinstance(self.max_iters, int):
            raise DeclarationError(f"{where}: max_iters must be a whole number")
        if self.max_iters < 1:
            raise DeclarationError(f"{where}: max_iters must be at least 1")
        if self.memory not in ("isolated", "shared"):
            raise DeclarationError(f"{where}: memory must be 'isolated' or 'shared'")
        if not self.timeout > 0:
            raise DeclarationError(f"{where}: timeout must be positive")
        if self.a2a and not self.a2a.startswith(("http://", "https://")):
            raise DeclarationError(f"{where}: a2a must be an http(s):// URL")
        if not self.name:
            object.__setattr__(self, "name", self.id)


def load_subagent_files(folder: str | Path) -> list[Subagent]:
    """The subagents declared in ``folder/*.md`` (sorted by id); none when it is missing.

    Raises:
        DeclarationError: a file is not a valid declaration (the message names file and line).
    """
    path = Path(folder)
    if not path.is_dir():
        return []
    return [load_subagent_file(f) for f in sorted(path.glob("*.md"))]


def load_subagent_file(path: str | Path) -> Subagent:
    """One subagent from a Markdown file with YAML front matter (the file name is the id).

    Raises:
        DeclarationError: no or unclosed front matter, bad YAML, an unknown key or a value of
            the wrong kind; the message names the file and the line.
    """
    import yaml

    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DeclarationError(f"{file}: cannot read the subagent file: {exc}") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise DeclarationError(
            f"{file}:1: a subagent file starts with YAML front matter between two '---' lines"
        )
    end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
    if end is None:
        raise DeclarationError(f"{file}:1: the front matter is not closed by a '---' line")
    front = "\n".join(lines[1:end])
    try:
        data = yaml.safe_load(front) if front.strip() else {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 2 if mark is not None else 2  # +1: 1-based, +1: the '---' line
        problem = getattr(exc, "problem", None) or str(exc)
        raise DeclarationError(f"{file}:{line}: bad YAML front matter: {problem}") from None
    if not isinstance(data, dict):
        raise DeclarationError(f"{file}:2: the front matter must be 'key: value' lines")

    def line_of(key: str) -> int:
        pattern = re.compile(rf"^\s*{re.escape(str(key))}\s*:")
        return next((i + 1 for i in range(1, end) if pattern.match(lines[i])), 2)

    for key in data:
        if key not in _KEYS:
            raise DeclarationError(
                f"{file}:{line_of(key)}: unknown key {key!r}; use {', '.join(_KEYS)}"
            )
    checks: dict[str, tuple[type | tuple[type, ...], str]] = {
        "name": (str, "a text"),
        "description": (str, "a text"),
        "model": (str, "a model name"),
        "max_iters": (int, "a whole number"),
        "memory": (str, "'isolated' or 'shared'"),
        "timeout": ((int, float), "a number of seconds"),
        "a2a": (str, "the URL of an A2A agent"),
        "a2a_token_env": (str, "the name of an environment variable"),
        "forward_identity": (bool, "true or false"),
    }
    for key, (kind, what) in checks.items():
        value = data.get(key)
        if value is not None and (
            not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool)
        ):
            raise DeclarationError(f"{file}:{line_of(key)}: {key} must be {what}")
    tools = data.get("tools")
    if tools is None:
        tools = []
    if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
        raise DeclarationError(f"{file}:{line_of('tools')}: tools must be a list of tool names")
    if not data.get("description"):
        raise DeclarationError(
            f"{file}:2: description is required (the main agent reads it to decide when to "
            "delegate)"
        )
    body = "\n".join(lines[end + 1 :]).strip()
    try:
        return Subagent(
            file.stem,
            str(data["description"]).strip(),
            name=str(data.get("name") or file.stem),
            model=data.get("model"),
            tools=tuple(tools),
            max_iters=int(data.get("max_iters", 6)),
            memory=data.get("memory") or "isolated",
            timeout=float(data.get("timeout", 120.0)),
            a2a=str(data.get("a2a") or ""),
            a2a_token_env=str(data.get("a2a_token_env") or ""),
            forward_identity=bool(data.get("forward_identity", False)),
            system_prompt=body,
            origin=str(file),
        )
    except DeclarationError as exc:
        raise DeclarationError(str(exc).replace(f"({file})", f"({file}:1)")) from None


def merge_declarations(*groups: Iterable[Subagent]) -> list[Subagent]:
    """All declarations, in order, each id once.

    Raises:
        DeclarationError: the same id is declared twice (the message names both places).
    """
    seen: dict[str, Subagent] = {}
    for group in groups:
        for sub in group:
            first = seen.get(sub.id)
            if first is not None:
                raise DeclarationError(
                    f"subagent {sub.id!r} is declared twice: at {first.origin} and at "
                    f"{sub.origin}; rename or remove one"
                )
            seen[sub.id] = sub
    return list(seen.values())


def check_subagent_tools(subagents: Sequence[Subagent], tool_names: Iterable[str]) -> None:
    """Check, without a model, that every tool a declaration names exists: a tool of
    ``tool_names`` or another subagent (never the subagent itself).

    Raises:
        DeclarationError: The first unknown name, with the declaration's file and the names
            it may use.
    """
    tools = list(dict.fromkeys(tool_names))
    for spec in subagents:
        if spec.agent is not None:  # built in code, with its own toolkit
            continue
        others = [s.id for s in subagents if s.id != spec.id]
        for name in spec.tools:
            if name in tools or name in others:
                continue
            itself = " (a subagent cannot delegate to itself)" if name == spec.id else ""
            raise DeclarationError(
                f"subagent {spec.id!r} ({spec.origin}): unknown tool {name!r}{itself}; "
                f"known: {', '.join(tools + others) or 'none'}"
            )
