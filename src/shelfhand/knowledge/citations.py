"""Deprecated import path: ``shelfhand.knowledge.citations`` moved to :mod:`shelfhand.knowledge.evidence.citations`; import from
:mod:`shelfhand.knowledge`. Names still resolve here, with a :class:`DeprecationWarning`."""

from shelfhand.core.lazy import moved

__getattr__ = moved(
    "shelfhand.knowledge.citations",
    "shelfhand.knowledge.evidence.citations",
    use="shelfhand.knowledge",
)
