"""Your own tools, named in the ``tools`` setting and imported (docs/tools.md, "Your tools in
the command line and the service").

A name is ``module`` (every :class:`~shelfhand.tools.tool.Tool` the module defines, in the
order it defines them) or ``module:name`` (one tool, a plain function, which becomes a tool
with the defaults of :func:`~shelfhand.tools.tool.tool`, or a list of them). What cannot be
imported or is not a tool is a :class:`~shelfhand.core.errors.ConfigurationError` naming the
setting, the name and what is wrong, so a command or the service stops before it starts.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from shelfhand.core.errors import ConfigurationError
from shelfhand.tools.tool import Tool, tool

__all__ = ["load_tools"]


def load_tools(
    specs: Sequence[str], *, folder: Path | None = None
) -> list[tuple[str, Tool[..., Any]]]:
    """The tools ``specs`` name, each with the name that brought it, in order.

    Args:
        specs: ``module`` or ``module:name`` each (the ``tools`` setting).
        folder: A folder modules are also imported from (the one shelfhand runs in): added to
            the end of ``sys.path`` when it is not there, so an installed package of the same
            name comes first.

    Raises:
        ConfigurationError: A module that is not found or fails to import (the exception and
            where it was raised), a name the module does not have, an object that is not a
            tool, a function or a list of them, a module that defines no tools, an
            ``external`` tool, or two different tools of one name.
    """
    if folder is not None:
        _importable(folder)
    importlib.invalidate_caches()  # a module written since the folder was last listed
    by_name: dict[str, tuple[str, Tool[..., Any]]] = {}  # in the order they come
    for spec in specs:
        module_name, _, attribute = spec.partition(":")
        module = _import(module_name, folder)
        tools = _named(module, spec, attribute) if attribute else _defined(module, spec)
        for item in tools:
            if item.external:
                raise ConfigurationError(
                    f"tools: {spec!r} gives {item.name!r}, an external tool (its calls are "
                    "executed by the application that runs the agent): the command line "
                    "and the service run the tools they offer, so leave external=True out"
                )
            earlier = by_name.get(item.name)
            if earlier is not None:
                if earlier[1] is not item:
                    raise ConfigurationError(
                        f"tools: two different tools are named {item.name!r} ({earlier[0]!r} "
                        f"and {spec!r}); pass name=... to @tool to tell them apart"
                    )
                continue  # the same tool named twice (a module and one of its tools)
            by_name[item.name] = (spec, item)
    return list(by_name.values())


def _importable(folder: Path) -> None:
    here = folder.resolve()
    for entry in sys.path:
        try:
            if Path(entry or ".").resolve() == here:
                return
        except OSError:  # an entry that cannot be resolved is not this folder
            continue
    sys.path.append(str(here))


def _import(name: str, folder: Path | None) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (name == missing or name.startswith(missing + ".")):
            where = f"{folder} and the installed packages" if folder else "the installed packages"
            raise ConfigurationError(
                f"tools: no module named {name!r} (looked in {where})"
            ) from None
        raise _failed(name, exc) from exc
    except Exception as exc:  # the module's own code raised: say what and where
        raise _failed(name, exc) from exc


def _failed(name: str, exc: Exception) -> ConfigurationError:
    what, where = str(exc), ""
    if isinstance(exc, SyntaxError) and exc.filename:
        what, where = str(exc.msg), f" ({exc.filename}, line {exc.lineno})"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        if frames:
            where = f" ({frames[-1].filename}, line {frames[-1].lineno})"
    return ConfigurationError(
        f"tools: importing {name!r} failed: {type(exc).__name__}: {what}{where}"
    )


def _named(module: ModuleType, spec: str, attribute: str) -> list[Tool[..., Any]]:
    if not hasattr(module, attribute):
        public = [n for n in vars(module) if not n.startswith("_")]
        close = difflib.get_close_matches(attribute, public, n=1)
        hint = f" (did you mean {module.__name__}:{close[0]}?)" if close else ""
        raise ConfigurationError(f"tools: {module.__name__!r} has no {attribute!r}{hint}")
    value = getattr(module, attribute)
    items = list(value) if isinstance(value, list | tuple) else [value]
    tools: list[Tool[..., Any]] = []
    for item in items:
        if isinstance(item, Tool):
            tools.append(item)
        elif inspect.isfunction(item):
            try:
                tools.append(tool(item))
            except Exception as exc:  # e.g. a parameter type no JSON schema describes
                raise ConfigurationError(f"tools: {spec!r}: {exc}") from exc
        else:
            raise ConfigurationError(
                f"tools: {spec!r} is a {type(item).__name__}, not a tool, a function or a "
                "list of them"
            )
    if not tools:
        raise ConfigurationError(f"tools: {spec!r} is an empty list")
    return tools


def _defined(module: ModuleType, spec: str) -> list[Tool[..., Any]]:
    """The tools ``module`` defines itself (not those it imports), in their order."""
    tools = [
        value
        for value in vars(module).values()
        if isinstance(value, Tool) and getattr(value.func, "__module__", None) == module.__name__
    ]
    if not tools:
        raise ConfigurationError(
            f"tools: {spec!r} defines no tools: decorate its functions with @tool "
            f"(from shelfhand import tool), or name one ({spec}:function)"
        )
    return tools
