"""The embedding contract (docs/design.md R4) and routing of texts to vector spaces.

One embedding model is rarely good at everything: on this project's measurements the packaged
MiniLM is good for English and useless for Chinese, USE-multilingual the reverse. So chunks are
routed by language to *vector spaces*, each with its own embedder, and a query is searched in
every space that holds vectors (each with that space's embedder); the lists are fused.

A monolingual space can be *bridged* to a multilingual one: its chunks are embedded by the
multilingual embedder too, into a space of their own (:func:`bridge_space`, ``en_via_zh``),
searched only by queries of another language. MiniLM cannot match a Chinese question to an
English passage; USE can, and the English chunks' USE vectors, kept apart from the Chinese
ones, leave English questions to MiniLM (USE is weak on English text: SciFact 0.388).
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


def bridge_space(source: str, via: str) -> str:
    """The space holding ``source``'s chunks embedded by ``via``'s embedder."""
    return f"{source}{_VIA}{via}"


def is_bridge_space(space: str) -> bool:
    """Whether ``space`` is named as a bridge space (:func:`bridge_space`)."""
    return _VIA in space


_VIA = "_via_"


class EmbeddingRouter:
    """Maps each text to a vector space and each space to its embedder.

    With one space, every text goes there. With several, ``route(text)`` names the space
    (default: :func:`detect_language`); a text whose space is missing goes to the first space.

    ``bridges`` maps a space to a multilingual one (``{"en": "zh"}``): a text of the first is
    embedded in it and, by the second's embedder, in the bridge space
    (:func:`bridge_space`), which queries routed to the first space do not search.
    """

    def __init__(
        self,
        spaces: Mapping[str, Embedder],
        route: Callable[[str], str] = detect_language,
        *,
        bridges: Mapping[str, str] | None = None,
    ) -> None:
        if not spaces:
            raise InvalidArgumentError("EmbeddingRouter needs at least one embedder")
        self._spaces = dict(spaces)
        self._route = route
        self._default = next(iter(self._spaces))
        self._bridges: dict[str, str] = {}
        """source space → its bridge space."""
        self._sources: dict[str, str] = {}
        """bridge space → the source space whose chunks it holds."""
        self._all: dict[str, Embedder] = dict(self._spaces)
        for source, via in (bridges or {}).items():
            if source not in self._spaces or via not in self._spaces or source == via:
                raise InvalidArgumentError(
                    f"bridge {source!r} → {via!r} needs two different spaces of {self.spaces}"
                )
            name = bridge_space(source, via)
            self._bridges[source] = name
            self._sources[name] = source
            self._all[name] = self._spaces[via]

    @property
    def spaces(self) -> tuple[str, ...]:
        """Every space, the bridge spaces last."""
        return tuple(self._all)

    @property
    def routed_spaces(self) -> tuple[str, ...]:
        """The spaces texts are routed to (no bridge spaces)."""
        return tuple(self._spaces)

    def space_for(self, text: str) -> str:
        if len(self._spaces) == 1:
            return self._default
        space = self._route(text)
        return space if space in self._spaces else self._default

    def bridge_for(self, space: str) -> str | None:
        """The bridge space that also holds ``space``'s texts, if any."""
        return self._bridges.get(space)

    def bridged_from(self, space: str) -> str | None:
        """The space whose texts the bridge space ``space`` holds; ``None`` for any other."""
        return self._sources.get(space)

    def embedder(self, space: str) -> Embedder:
        return self._all[space]
