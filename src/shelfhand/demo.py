"""Deprecated import path: ``shelfhand.demo`` moved to :mod:`shelfhand.tools.demo`; import from
:mod:`shelfhand.tools.demo`. Names still resolve here, with a :class:`DeprecationWarning`."""

from shelfhand.core.lazy import moved

__getattr__ = moved("shelfhand.demo", "shelfhand.tools.demo", use="shelfhand.tools.demo")
