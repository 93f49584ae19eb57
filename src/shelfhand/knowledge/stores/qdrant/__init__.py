"""Search on Qdrant: a derived index of the store's chunks (``shelfhand[qdrant]``).

The system of record (SQLite, or PostgreSQL) keeps documents, chunks and vectors; its outbox
feeds this index, which serves keyword, dense and exact-identifier search with the caller's
scope inside every query, and can always be rebuilt from the store. One query model
(:mod:`.model`), two thin backends:

* :class:`~.edge.EdgeBackend`: Qdrant Edge (``qdrant-edge-py``), the engine in process, for a
  path;
* :class:`~.server.ServerBackend`: ``qdrant-client`` for an ``http(s)://`` server or cluster.

:func:`open_backend` chooses by the ``qdrant_url`` setting.
"""

from __future__ import annotations

from pathlib import Path

from shelfhand.core.errors import ConfigurationError
from shelfhand.knowledge.stores.qdrant.index import QdrantIndex
from shelfhand.knowledge.stores.qdrant.model import QdrantBackend
from shelfhand.knowledge.stores.qdrant.search import QdrantKeywordSearch, QdrantVectorSearch

__all__ = [
    "QdrantBackend",
    "QdrantIndex",
    "QdrantKeywordSearch",
    "QdrantVectorSearch",
    "open_backend",
]


def open_backend(url: str, *, api_key: str | None = None, timeout: float = 5.0) -> QdrantBackend:
    """The backend for ``url``: ``http(s)://...`` a Qdrant server (``qdrant-client``),
    ``:memory:`` ``qdrant-client``'s local mode (small data, tests), anything else a folder
    for Qdrant Edge in process.

    Raises:
        ConfigurationError: The extra is not installed, or the server cannot be reached (an
            explicit Qdrant must work at start-up).
    """
    if url.startswith(("http://", "https://")) or url == ":memory:":
        from shelfhand.core.errors import DependencyUnavailableError
        from shelfhand.knowledge.stores.qdrant.server import ServerBackend

        try:
            return ServerBackend(url, api_key=api_key, timeout=timeout)
        except DependencyUnavailableError as exc:
            raise ConfigurationError(
                f"{exc}. Start Qdrant, or unset SHELFHAND_QDRANT_URL to search without it."
            ) from exc
    if "://" in url:
        raise ConfigurationError(
            f"qdrant_url must be http(s)://host:port or a folder, not {url.split('://')[0]}://"
        )
    from shelfhand.knowledge.stores.qdrant.edge import EdgeBackend

    return EdgeBackend(Path(url).expanduser())
