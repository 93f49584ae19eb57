"""Deprecated import path: ``shelfhand.knowledge.embedders`` moved to :mod:`shelfhand.knowledge.embeddings.local`; import from
:mod:`shelfhand.knowledge`. Names still resolve here, with a :class:`DeprecationWarning`."""

from shelfhand.core.lazy import moved

__getattr__ = moved(
    "shelfhand.knowledge.embedders",
    "shelfhand.knowledge.embeddings.local",
    use="shelfhand.knowledge",
)
