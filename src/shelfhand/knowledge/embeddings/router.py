"""The embedding contract (docs/design.md R4) and routing of texts to vector spaces.

One embedding model is rarely good at everything: on this project's measurements the packaged
MiniLM is good for English and useless for Chinese, USE-multilingual the reverse. So chunks are
routed by language to *vector spaces*, each with its own embedder, and a query is searched in
every space that holds vectors (each with that space's embedder); the lists are fused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from shelfhand.core.errors import InvalidArgumentError
from shelfhand.knowledge.analysis import chinese_share

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors of a fixed dimension."""

    @property
    def name(self) -> str:
        """Identifies the model; vectors of different names are never mixed."""
        ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed passages, batched; returns shape ``(len(texts), dim)``."""
        ...

    def embed_query(self, text: str) -> Vectors:
        """Embed one query; returns shape ``(dim,)``."""
        ...


def detect_language(text: str) -> str:
    """``"zh"`` when CJK ideographs make up at least 20% of the letters, else ``"en"``."""
    return "zh" if chinese_share(text) >= 0.2 else "en"


class EmbeddingRouter:
    """Maps each text to a vector space and each space to its embedder.

    With one space, every text goes there. With several, ``route(text)`` names the space
    (default: :func:`detect_language`); a text whose space is missing goes to the first space.
    """

    def __init__(
        self,
        spaces: Mapping[str, Embedder],
        route: Callable[[str], str] = detect_language,
    ) -> None:
        if not spaces:
            raise InvalidArgumentError("EmbeddingRouter needs at least one embedder")
        self._spaces = dict(spaces)
        self._route = route
        self._default = next(iter(self._spaces))

    @property
    def spaces(self) -> tuple[str, ...]:
        return tuple(self._spaces)

    def space_for(self, text: str) -> str:
        if len(self._spaces) == 1:
            return self._default
        space = self._route(text)
        return space if space in self._spaces else self._default

    def embedder(self, space: str) -> Embedder:
        return self._spaces[space]
