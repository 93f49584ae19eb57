"""Connections to external backends (PostgreSQL, Redis): opening, checking, migrating and
turning their outages into :class:`~shelfhand.core.errors.DependencyUnavailableError`; and
HTTP clients whose replies are bounded (:mod:`~shelfhand.backends.bounded_http`: the model,
embeddings, remote-agent and MCP endpoints).

Only the adapters that keep records in a backend import these modules (the PostgreSQL
knowledge store, session store and audit log, the Redis governance state, the job queue), and
only these modules import the drivers (``psycopg``, ``redis``).
"""
