"""Cheap construction of the frozen value types built on every agent step.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__(self,
name, value)``, which looks the field up by name on the class for every value. The hot types
(:class:`~shelfhand.core.messages.Message`, :class:`~shelfhand.core.results.RunResult`...)
write their own ``__init__`` that calls the slots' setters directly, taken once per class
here: the same objects (equality, hash, pickling, ``dataclasses.replace``), built in about
two thirds of the time.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any

__all__ = ["slot_setters"]

Setter = Callable[[Any, Any], None]


def slot_setters(cls: type, *names: str) -> tuple[Setter, ...]:
    """The setters of ``cls``'s slots ``names``, in that order.

    They write the slot whatever the class's ``__setattr__`` says (a frozen dataclass's
    refuses), so only a constructor may use them.

    Raises:
        TypeError: a name is not a slot of ``cls`` (e.g. the class has no ``slots=True``).
    """
    setters: list[Setter] = []
    for name in names:
        slot = cls.__dict__.get(name)
        if not isinstance(slot, MemberDescriptorType):
            raise TypeError(f"{cls.__name__}.{name} is not a slot")
        setters.append(slot.__set__)
    return tuple(setters)
