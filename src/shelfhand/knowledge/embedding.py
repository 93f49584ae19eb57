"""Deprecated import path: ``shelfhand.knowledge.embedding`` moved to :mod:`shelfhand.knowledge.embeddings.router`; import from
:mod:`shelfhand.knowledge`. Names still resolve here, with a :class:`DeprecationWarning`."""

from shelfhand.core.lazy import moved

__getattr__ = moved(
    "shelfhand.knowledge.embedding",
    "shelfhand.knowledge.embeddings.router",
    use="shelfhand.knowledge",
)
