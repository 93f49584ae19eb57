"""Cheap construction of the frozen value types built on every agent step.

A frozen dataclass's generated ``__init__`` sets each field with ``object.__setattr__(self,
name, value)``, which looks the field up by name on the class for every value: about 1,500
instructions a field, counted by callgrind, where a plain slot store costs a few dozen. Two
ways around it, for the hot types (:class:`~shelfhand.core.messages.Message`,
:class:`~shelfhand.core.results.RunResult`...):

- their own ``__init__`` calls the slots' setters directly (:func:`slot_setters`), taken once
  per class: about half the cost a field, for every construction (``Message(...)``,
  ``dataclasses.replace``);
- the internal hot paths (``Message.user``, ``RunContext.start``, a run's result...) fill in
  a *twin* (:func:`twin`): a plain class with the same slots, whose instance becomes the
  frozen type when its ``__class__`` is set. Ordinary attribute stores, a positional call:
  about a fifth of the dataclass's cost for six fields.

Either way the object is the frozen dataclass itself, every field set: equality, hash,
pickling, ``dataclasses.replace`` and ``repr`` are the dataclass's own.
"""

from __future__ import annotations

from collections.abc import Callable
from types import MemberDescriptorType
from typing import Any

__all__ = ["slot_setters", "twin"]

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


def twin(cls: type) -> type[Any]:
    """A mutable class with the slots of ``cls`` (a frozen ``slots=True`` dataclass).

    An instance of it, every slot stored, becomes a ``cls`` by ``obj.__class__ = cls``:
    Python allows the change because both lay their slots out the same way. A slot left
    unset would raise ``AttributeError`` when read, so the function that fills one in sets
    every field; only code next to ``cls``, which knows its fields, may use one.

    Raises:
        TypeError: ``cls`` has no slots of its own or another base than ``object`` (the
            layouts would differ; checked here, once, rather than at the first object).
    """
    slots = cls.__dict__.get("__slots__")
    if not isinstance(slots, tuple) or cls.__bases__ != (object,):
        raise TypeError(f"{cls.__name__} is not a slotted class of its own")
    mutable: type[Any] = type(f"_{cls.__name__}Fields", (), {"__slots__": slots})
    probe = mutable()
    probe.__class__ = cls  # raises TypeError now if the layouts differ
    return mutable
