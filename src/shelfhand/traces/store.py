"""Where traces are kept: the workspace's ``traces.db`` (SQLite), or PostgreSQL.

Every statement is written once (:mod:`shelfhand.core.sql`). One row per trace (its root
span: who ran it, when, how it ended), which lists and scopes traces without reading their
spans; and the spans, one row per trace and write (the trace's spans that ended since the
last write, as one JSON array): a turn's eight spans cost one insert and one JSON encoding,
not eight of each. Spans stored one per row (before that layout) are still read. Every read names the tenant, and a user who is not an
admin sees only their own traces: a trace of someone else looks missing (404), as a session
does. Trace ids are chosen by clients (``X-Trace-Id``), so two tenants may use the same one:
a trace is keyed by tenant and id.

Retention: :meth:`SqlTraceStore.prune` keeps the newest ``max_traces`` traces and none older
than ``max_age_days``; the recorder calls it now and then.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shelfhand.core.context import UserContext
from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements
from shelfhand.core.tracing import Span

__all__ = [
    "ANY_OUTCOME",
    "OUTCOME",
    "SCHEMA",
    "SPAN_BATCHES",
    "EncodedTrace",
    "SpanRecord",
    "SqlTraceStore",
    "SqliteTraceStore",
    "TraceRow",
    "TraceSummary",
    "encode_trace",
    "encode_traces",
    "outcome",
    "trace_names",
]

SCHEMA = """
CREATE TABLE {traces} (
    tenant TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    status TEXT NOT NULL,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, trace_id)
);
CREATE INDEX {traces}_recent ON {traces} (tenant, start_ns);
CREATE INDEX {traces}_age ON {traces} (start_ns);
CREATE TABLE {spans} (
    tenant TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    span_id TEXT NOT NULL,
    parent_id TEXT NOT NULL,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    status TEXT NOT NULL,
    attributes TEXT NOT NULL,
    events TEXT NOT NULL
);
CREATE INDEX {spans}_trace ON {spans} (tenant, trace_id);
"""
"""The trace tables, for either database (see :func:`trace_names`)."""

SPAN_BATCHES = """
CREATE TABLE {span_batches} (
    tenant TEXT NOT NULL,
    trace_id TEXT NOT NULL,
    start_ns BIGINT NOT NULL,
    spans TEXT NOT NULL
);
CREATE INDEX {span_batches}_trace ON {span_batches} (tenant, trace_id);
CREATE INDEX {span_batches}_age ON {span_batches} (start_ns);
"""
"""The spans of a trace, one row per write: ``spans`` is a JSON array of ``[span_id,
parent_id, name, kind, start_ns, end_ns, status, attributes, events]``; ``start_ns`` the
earliest start among them (for the retention)."""


OUTCOME = """
ALTER TABLE {traces} ADD COLUMN outcome TEXT NOT NULL DEFAULT '';
"""
"""How a trace's turn (or run) ended when not plainly (:func:`outcome`); empty for traces
stored before it was kept."""


ANY_OUTCOME = "any"
"""``outcome`` for :meth:`SqlTraceStore.recent`: every turn that ended other than plainly."""


def outcome(attributes: Mapping[str, Any]) -> str:
    """How a root span's turn or run ended, when not with the model's answer as it was: why
    that answer was replaced, or why no model answered (``shelfhand.answer.fallback_reason``:
    ``ungrounded``, ``model_timeout``, ``budget_exceeded``...), else a stop reason other than
    ``final`` (``max_iterations``); empty otherwise."""
    reason = (
        attributes.get("shelfhand.answer.fallback_reason")
        or attributes.get("shelfhand.turn.stop_reason")
        or attributes.get("shelfhand.run.stop_reason")
    )
    return "" if not isinstance(reason, str) or reason == "final" else reason


def trace_names(dialect: Dialect, *, prefix: str = "") -> dict[str, str]:
    """The table names the statements use (``prefix`` before each)."""
    del dialect  # the same for both databases
    return {
        "traces": f"{prefix}traces",
        "spans": f"{prefix}trace_spans",
        "span_batches": f"{prefix}trace_span_batches",
    }


MIGRATIONS = [
    Migration(name="traces_001_initial", sql=SQLITE.ddl(SCHEMA, **trace_names(SQLITE))),
    Migration(name="traces_002_span_batches", sql=SQLITE.ddl(SPAN_BATCHES, **trace_names(SQLITE))),
    Migration(name="traces_003_outcome", sql=SQLITE.ddl(OUTCOME, **trace_names(SQLITE))),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class TraceSummary:
    """One stored trace, as listed."""

    trace_id: str
    tenant_id: str
    user_id: str
    name: str
    start_ns: int
    end_ns: int
    status: str
    input_tokens: int = 0
    output_tokens: int = 0
    outcome: str = ""
    """How the turn ended when not plainly (:func:`outcome`): ``ungrounded``,
    ``model_timeout``..."""

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def to_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "user_id": self.user_id,
            "name": self.name,
            "started_at": self.start_ns / 1e9,
            "duration_ms": round(self.duration_ms, 3),
            "status": self.status,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "outcome": self.outcome,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class SpanRecord:
    """One stored span."""

    span_id: str
    parent_id: str
    name: str
    kind: str
    start_ns: int
    end_ns: int
    status: str
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[dict[str, Any], ...] = ()

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def to_dict(self) -> dict[str, Any]:
        return {
            "span_id": self.span_id,
            "parent_id": self.parent_id,
            "name": self.name,
            "kind": self.kind,
            "start_ns": self.start_ns,
            "duration_ms": round(self.duration_ms, 3),
            "status": self.status,
            "attributes": self.attributes,
            "events": list(self.events),
        }


def _json_encoder() -> Callable[[Any], bytes]:
    """Span data as UTF-8 JSON bytes, which the store binds as they are (see
    :class:`SqlTraceStore`): orjson when installed (the ``server`` extra has it: six times
    faster on span attributes, and the JSON is most of what storing a span costs), else the
    standard library's encoder, built once. A string that is not valid Unicode (a lone
    surrogate in a model-written argument) is written escaped, never fails the batch."""
    readable = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
    escaped = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), default=str).encode

    def fallback(value: Any) -> bytes:
        try:
            return readable(value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: \ud800 in the JSON instead
            return escaped(value).encode("ascii")

    try:
        import orjson
    except ImportError:
        return fallback
    dumps, non_str_keys = orjson.dumps, orjson.OPT_NON_STR_KEYS

    def encode(value: Any) -> bytes:
        try:
            # without OPT_NON_STR_KEYS: that option takes a slower path for every dict,
            # and attribute keys are strings but for a rare tool's result
            return dumps(value, default=str)
        except TypeError:  # a key that is not a string, an integer beyond 64 bits, a surrogate
            pass
        try:
            return dumps(value, default=str, option=non_str_keys)
        except TypeError:
            return fallback(value)

    return encode


_JSON = _json_encoder()


TraceRow = tuple[str, str, str, str, int, int, str, int, int, str]
"""A trace's row: ``(tenant, trace_id, user_id, name, start_ns, end_ns, status,
input_tokens, output_tokens, outcome)``, from its root span."""

EncodedTrace = tuple[str, str, int, bytes, int, TraceRow | None]
"""Finished spans of one trace as the recorder keeps them until they are written:
``(tenant, trace_id, start_ns, spans, count, trace_row)``, with ``spans`` the row's JSON
array in UTF-8 (see :data:`SPAN_BATCHES`), ``start_ns`` the earliest start among them, ``count`` how
many and ``trace_row`` the trace's row when its root is among them. Only strings, numbers
and a tuple of them: the garbage collector stops tracking it at its first pass, where the
spans themselves (their attribute dicts, hit lists and events) would be traversed by every
collection until the write."""


def encode_trace(spans: Sequence[Span]) -> EncodedTrace:
    """Finished spans of one trace as the store writes them (see :data:`EncodedTrace`):
    one JSON encoding for all of them, however many."""
    items = []
    root: Span | None = None
    start_ns = spans[0].start_ns
    for span in spans:
        events = span.events
        items.append(
            [
                span.span_id,
                span.parent_id,
                span.name,
                span.kind,
                span.start_ns,
                span.end_ns,
                span.status,
                span.attributes,
                [{"name": e.name, "time_ns": e.time_ns, "attributes": e.attributes} for e in events]
                if events
                else events,
            ]
        )
        if span.start_ns < start_ns:
            start_ns = span.start_ns
        if span.root:
            root = span
    last = spans[-1]
    row: TraceRow | None = None
    if root is not None:
        attributes = root.attributes
        row = (
            root.tenant_id,
            root.trace_id,
            root.user_id,
            root.name,
            root.start_ns,
            root.end_ns,
            root.status,
            int(attributes.get("gen_ai.usage.input_tokens", 0) or 0),
            int(attributes.get("gen_ai.usage.output_tokens", 0) or 0),
            outcome(attributes),
        )
    return (last.tenant_id, last.trace_id, start_ns, _JSON(items), len(spans), row)


def encode_traces(spans: Sequence[Span]) -> list[EncodedTrace]:
    """Finished spans of any traces, encoded one trace at a time (:func:`encode_trace`)."""
    by_trace: dict[tuple[str, str], list[Span]] = {}
    for span in spans:
        by_trace.setdefault((span.tenant_id, span.trace_id), []).append(span)
    return [encode_trace(group) for group in by_trace.values()]


class SqlTraceStore:
    """Traces in a SQL :class:`~shelfhand.core.sql.Database` (see the module docstring).

    Args:
        database: Where the tables are (created by the caller's migrations).
        prefix: Before each table's name (``pg_`` in PostgreSQL).
    """

    def __init__(self, database: Database, *, prefix: str = "") -> None:
        self.database = database
        self._sql = Statements(database.dialect, **trace_names(database.dialect, prefix=prefix))
        # the spans' JSON is bound as the encoder's UTF-8 bytes and made text by the
        # database: a str would be encoded to UTF-8 again by the driver, which cost more than
        # the JSON encoding itself (span text holding any Chinese is a UCS-2 str, encoded
        # character by character)
        sqlite = database.dialect.name == SQLITE.name
        text = "CAST(? AS TEXT)" if sqlite else "convert_from(?, 'UTF8')"
        self._insert_spans = self._sql(
            "INSERT INTO {span_batches} (tenant, trace_id, start_ns, spans) "
            f"VALUES (?, ?, ?, {text})"
        )
        self._insert_trace = self._sql(
            "INSERT INTO {traces} (tenant, trace_id, user_id, name, start_ns, end_ns, status, "
            "input_tokens, output_tokens, outcome) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING"
        )

    def close(self) -> None:
        self.database.close()

    def write(self, spans: Sequence[Span]) -> None:
        """Store finished spans in one transaction (each is written once, by the recorder
        that saw it end), one row per trace; a root span (``root``) also lists its
        trace."""
        self.write_encoded(encode_traces(spans))

    def write_encoded(self, traces: Sequence[EncodedTrace]) -> None:
        """:meth:`write` for spans encoded a trace at a time (:func:`encode_trace`)."""
        if not traces:
            return
        roots = [t[5] for t in traces if t[5] is not None]
        with self.database.transaction() as conn:
            conn.executemany(self._insert_spans, [t[:4] for t in traces])
            if roots:
                conn.executemany(self._insert_trace, roots)

    def recent(
        self,
        owner: UserContext,
        *,
        limit: int = 20,
        all_users: bool = False,
        outcome: str | None = None,
    ) -> list[TraceSummary]:
        """The newest traces of ``owner``'s tenant: all of its users' with ``all_users``
        (admins), else ``owner``'s own; with ``outcome``, only the turns that ended so
        (:func:`outcome`: ``off_topic``, ``model_timeout``...), or with :data:`ANY_OUTCOME`
        every turn not answered with the model's answer as written."""
        where = "tenant=?"
        params: list[Any] = [owner.tenant_id]
        if not all_users:
            where += " AND user_id=?"
            params.append(owner.user_id)
        if outcome == ANY_OUTCOME:
            where += " AND outcome<>''"
        elif outcome is not None:
            where += " AND outcome=?"
            params.append(outcome)
        statement = self._sql(
            f"SELECT {_SUMMARY_COLUMNS} FROM {{traces}} WHERE {where} "
            "ORDER BY start_ns DESC LIMIT ?"
        )
        with self.database.connection() as conn:
            rows = conn.execute(statement, (*params, limit)).fetchall()
        return [_summary(r) for r in rows]

    def summary(
        self, trace_id: str, owner: UserContext, *, all_users: bool = False
    ) -> TraceSummary | None:
        """The trace ``trace_id`` of ``owner``'s tenant (of ``owner`` unless ``all_users``);
        ``None`` when there is none the caller may read."""
        with self.database.connection() as conn:
            row = conn.execute(
                self._sql(
                    f"SELECT {_SUMMARY_COLUMNS} FROM {{traces}} WHERE tenant=? AND trace_id=?"
                ),
                (owner.tenant_id, trace_id),
            ).fetchone()
        if row is None:
            return None
        found = _summary(row)
        if not all_users and found.user_id != owner.user_id:
            return None
        return found

    def spans(
        self, trace_id: str, owner: UserContext, *, all_users: bool = False
    ) -> list[SpanRecord] | None:
        """The spans of a trace the caller may read, in start order; ``None`` when there is
        no such trace (or it is someone else's)."""
        if self.summary(trace_id, owner, all_users=all_users) is None:
            return None
        key = (owner.tenant_id, trace_id)
        with self.database.connection() as conn:
            batches = conn.execute(
                self._sql("SELECT spans FROM {span_batches} WHERE tenant=? AND trace_id=?"), key
            ).fetchall()
            rows: list[Sequence[Any]] = [
                (*item[:7], item[7], item[8]) for (text,) in batches for item in json.loads(text)
            ]
            rows += [
                (*r[:7], json.loads(r[7]), json.loads(r[8]))
                for r in conn.execute(  # spans stored one per row, before the batches
                    self._sql(
                        "SELECT span_id, parent_id, name, kind, start_ns, end_ns, status, "
                        "attributes, events FROM {spans} WHERE tenant=? AND trace_id=?"
                    ),
                    key,
                ).fetchall()
            ]
        rows.sort(key=lambda r: (int(r[4]), r[0]))
        return [
            SpanRecord(
                span_id=r[0],
                parent_id=r[1],
                name=r[2],
                kind=r[3],
                start_ns=int(r[4]),
                end_ns=int(r[5]),
                status=r[6],
                attributes=r[7],
                events=tuple(r[8]),
            )
            for r in rows
        ]

    def prune(self, *, max_traces: int | None = None, max_age_days: float | None = None) -> int:
        """Delete traces beyond the newest ``max_traces`` and older than ``max_age_days``,
        with their spans; how many traces went."""
        return self._prune(self.database, max_traces=max_traces, max_age_days=max_age_days)

    def _prune(
        self, database: Database, *, max_traces: int | None, max_age_days: float | None
    ) -> int:
        deleted = 0
        with database.transaction() as conn:
            cutoffs: list[int] = []
            if max_age_days is not None:
                cutoffs.append(int((time.time() - max_age_days * 86400) * 1e9))
            if max_traces is not None:
                row = conn.execute(
                    self._sql(
                        "SELECT start_ns FROM {traces} ORDER BY start_ns DESC LIMIT 1 OFFSET ?"
                    ),
                    (max_traces,),
                ).fetchone()
                if row is not None:
                    cutoffs.append(int(row[0]) + 1)
            if not cutoffs:
                return 0
            cutoff = max(cutoffs)
            # a trace's spans go with it, and so do spans whose trace never ended
            for table in ("spans", "span_batches"):
                conn.execute(
                    self._sql(
                        f"DELETE FROM {{{table}}} WHERE start_ns < ? OR (tenant, trace_id) IN "
                        "(SELECT tenant, trace_id FROM {traces} WHERE start_ns < ?)"
                    ),
                    (cutoff, cutoff),
                )
            deleted = conn.execute(
                self._sql("DELETE FROM {traces} WHERE start_ns < ?"), (cutoff,)
            ).rowcount
        return int(deleted or 0)


_SUMMARY_COLUMNS = (
    "trace_id, tenant, user_id, name, start_ns, end_ns, status, input_tokens, output_tokens, "
    "outcome"
)


def _summary(row: Sequence[Any]) -> TraceSummary:
    return TraceSummary(
        trace_id=row[0], tenant_id=row[1], user_id=row[2], name=row[3], start_ns=int(row[4]),
        end_ns=int(row[5]), status=row[6], input_tokens=int(row[7]), output_tokens=int(row[8]),
        outcome=row[9],
    )  # fmt: skip


class SqliteTraceStore(SqlTraceStore):
    """Traces in a SQLite file (the workspace's ``traces.db``)."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(SqliteDatabase(path, MIGRATIONS))
