"""Lazy public names for packages: ``import shelfhand.knowledge`` stays cheap, and a name is
imported from its module the first time it is used.

::

    _EXPORTS = {"KnowledgeBase": "shelfhand.knowledge.base"}
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports", "moved"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """A module ``__getattr__`` importing each name of ``exports`` (name → module) on first
    use, and a ``__dir__`` listing them (the public names)."""
    namespace = import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__


def moved(old: str, new: str, *, use: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` for an import path that moved: each name is taken from
    ``new`` with a :class:`DeprecationWarning` telling to import it from ``use`` instead."""
    import warnings

    def __getattr__(name: str) -> Any:
        value = getattr(import_module(new), name)  # AttributeError for unknown names
        warnings.warn(f"{old} moved: import {name} from {use}", DeprecationWarning, stacklevel=2)
        return value

    return __getattr__
