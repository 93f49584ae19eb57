"""The audit log: one record per tool call, in SQLite, secrets redacted (docs/design.md T5).

Where: ``<workspace>/audit.db`` (:meth:`AuditLog.for_workspace`), table ``audit_log``, created by
the named migration ``audit_001_initial`` (see :mod:`shelfhand.core.db`). It is a file of its
own, not ``knowledge.db``, so that long ingest transactions never hold up audit writes.

Writes are batched: :meth:`AuditLog.record` only appends to an in-memory buffer (no SQLite on
the calling path); a background thread writes the buffer in one transaction every
``batch_size`` records or every ``flush_interval`` seconds, and :meth:`AuditLog.close` (also run
at interpreter exit) writes the rest. :meth:`AuditLog.query` flushes first, so a query always
sees every call recorded before it.

Secrets never reach the file: values of arguments whose names look like
password/passwd/secret/token/api_key/apikey/authorization/credential (any case, nested objects
and lists too) are replaced by ``"[REDACTED]"`` before writing; the argument hash is a SHA-256
of the canonical (unredacted) JSON, so identical calls can be grouped without storing them.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from hashlib import sha256
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from pathlib import Path
from typing import IO, Any

from shelfhand.core.db import Migration, SqliteDatabase
from shelfhand.core.errors import InvalidArgumentError
from shelfhand.core.names import valid_text
from shelfhand.core.secrets import REDACTED, secret_name
from shelfhand.core.sql import SQLITE, Database, Dialect, Statements

__all__ = [
    "AUDIT_MIGRATIONS",
    "REDACTED",
    "AuditLog",
    "AuditRecord",
    "audit_schema",
    "masked_arguments",
    "parse_since",
    "redact",
]

logger = logging.getLogger(__name__)

# The columns after ``id``: name, definition, and the migration that added it (SQLite's
# audit_log grew in three steps; a new table, PostgreSQL's included, has them all at once).
_AUDIT_COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("ts", "{real} NOT NULL", 1),
    ("tool", "TEXT NOT NULL", 1),
    ("tenant", "TEXT NOT NULL", 1),
    ("user_id", "TEXT NOT NULL", 1),
    ("trace_id", "TEXT NOT NULL", 1),
    ("request_id", "TEXT NOT NULL", 1),
    ("call_id", "TEXT NOT NULL", 1),
    ("args_hash", "TEXT NOT NULL", 1),
    ("arguments", "TEXT NOT NULL", 1),
    ("decision", "TEXT NOT NULL", 1),
    ("outcome", "TEXT NOT NULL", 1),
    ("error_class", "TEXT NOT NULL", 1),
    ("duration_ms", "{real} NOT NULL", 1),
    ("cache_hit", "INTEGER NOT NULL", 1),
    ("dedup_hit", "INTEGER NOT NULL", 1),
    ("attempts", "INTEGER NOT NULL", 1),
    ("repairs", "TEXT NOT NULL DEFAULT ''", 2),
    ("parent_trace_id", "TEXT NOT NULL DEFAULT ''", 3),
    ("depth", "INTEGER NOT NULL DEFAULT 0", 3),
    ("agent", "TEXT NOT NULL DEFAULT ''", 3),
)
_AUDIT_INDEXES = (("ts", "ts", 1), ("parent", "parent_trace_id", 3))  # {table}_<name>


def audit_schema(dialect: Dialect, table: str, step: int | None = None) -> str:
    """The script that creates the audit table ``table`` with every column (``step`` None),
    or that takes it to migration ``step`` from the one before (step 1 creates it)."""
    columns = [(name, spec) for name, spec, added in _AUDIT_COLUMNS if step in (None, added)]
    indexes = [(name, column) for name, column, added in _AUDIT_INDEXES if step in (None, added)]
    if step in (None, 1):
        body = ",\n    ".join(["id {id_key}", *(f"{name} {spec}" for name, spec in columns)])
        lines = [f"CREATE TABLE {{table}} (\n    {body}\n);"]
    else:
        lines = [f"ALTER TABLE {{table}} ADD COLUMN {name} {spec};" for name, spec in columns]
    lines += [f"CREATE INDEX {{table}}_{name} ON {{table}} ({column});" for name, column in indexes]
    return dialect.ddl("\n".join(lines), table=table)


AUDIT_MIGRATIONS = [
    Migration(name="audit_001_initial", sql=audit_schema(SQLITE, "audit_log", 1)),
    Migration(name="audit_002_argument_repairs", sql=audit_schema(SQLITE, "audit_log", 2)),
    Migration(name="audit_003_delegation", sql=audit_schema(SQLITE, "audit_log", 3)),
]

_COLUMNS = ", ".join(name for name, _spec, _added in _AUDIT_COLUMNS)
_INSERT = f"INSERT INTO {{table}} ({_COLUMNS}) VALUES ({', '.join('?' * len(_AUDIT_COLUMNS))})"
_ROW_DEFAULTS: tuple[Any, ...] = ((), "", 0, "")
"""Values of the optional trailing fields of a buffered row (repairs, parent trace, depth,
agent), for rows appended without them."""
# How query() filters map to columns (an equality each).
_FILTERS = {
    "tool": "tool",
    "user": "user_id",
    "tenant": "tenant",
    "outcome": "outcome",
    "trace_id": "trace_id",
    "parent_trace_id": "parent_trace_id",
}
# The record's field for each column, in the order of _COLUMNS.
_FIELDS = tuple("user" if name == "user_id" else name for name, _s, _a in _AUDIT_COLUMNS)


def redact(value: Any) -> Any:
    """``value`` with the values of secret-looking keys replaced, at any depth (a copy)."""
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and secret_name(k) else redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    return value


# One encoder, built once: json.dumps with options builds a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# The same encoder's C core, made once: ``JSONEncoder.encode`` makes one per call (with a dict
# to detect cycles, which values decoded from JSON cannot have), about half of a small call's
# cost. A cyclic value fails with RecursionError instead of ValueError.
_ENCODE: Callable[[Any, int], list[str]] | None = (
    None
    if c_make_encoder is None
    else c_make_encoder(
        None, _CANONICAL.default, encode_basestring, None, ":", ",", True, False, True
    )
)


def canonical_json(value: Any) -> str:
    """The canonical JSON used for argument hashes and cache/dedup keys.

    Same as ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``
    (for values without cycles, as every value decoded from JSON is).
    """
    if _ENCODE is None or isinstance(value, str):
        return _CANONICAL.encode(value)
    return "".join(_ENCODE(value, 0))


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One tool call as stored (arguments already redacted)."""

    ts: float
    """Wall-clock start of the call (seconds since the epoch)."""
    tool: str
    tenant: str
    user: str
    trace_id: str
    request_id: str
    call_id: str
    args_hash: str
    arguments: str
    """Redacted canonical JSON of the arguments."""
    decision: str
    """Permission decision: ``allow``, ``deny`` or ``ask``."""
    outcome: str
    """``ok``, ``error``, ``timeout``, ``denied``, ``unknown_tool``, ``invalid_arguments``,
    ``rate_limited``, ``circuit_open``, ``needs_approval``, ``rejected`` or ``external``; for a
    model call a budget refused (tool ``(model)``), ``budget_exceeded``."""
    error_class: str
    duration_ms: float
    cache_hit: bool
    dedup_hit: bool
    attempts: int
    repairs: tuple[str, ...] = ()
    """What was repaired in the model's arguments before the call (see ``tools.repair``)."""
    parent_trace_id: str = ""
    """The trace of the run that delegated this call's run (a subagent's call); else empty."""
    depth: int = 0
    """Delegation depth of the calling run: 0 for the main agent, 1 for its subagents..."""
    agent: str = ""
    """The agent (or subagent id) whose run made the call."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (the ``time`` field is ISO 8601, UTC)."""
        data = asdict(self)
        data["time"] = datetime.fromtimestamp(self.ts, tz=UTC).isoformat()
        data["repairs"] = list(self.repairs)
        # unparsable arguments are stored as a placeholder string, kept as is
        with contextlib.suppress(ValueError):
            data["arguments"] = json.loads(self.arguments)
        return data


class AuditLog:
    """Batched, append-only audit log in one SQLite file.

    Args:
        path: The database file (created with its folder when missing).
        batch_size: Buffered records that trigger a write.
        flush_interval: Seconds after which buffered records are written anyway.
    """

    FILENAME = "audit.db"

    def __init__(
        self, path: str | Path, *, batch_size: int = 512, flush_interval: float = 0.5
    ) -> None:
        self.path = Path(path)
        database = SqliteDatabase(self.path, AUDIT_MIGRATIONS)
        self._start(database, "audit_log", batch_size=batch_size, flush_interval=flush_interval)

    def _start(
        self,
        database: Database,
        table: str,
        *,
        batch_size: int,
        flush_interval: float,
        writes: Database | None = None,
    ) -> None:
        """Keep the records in ``table`` of ``database`` (whose migrations created it);
        ``writes``: the same database for the writes, if they differ (a deadline)."""
        self._database = database
        self._writes = database if writes is None else writes
        self._sql = Statements(database.dialect, table=table)
        self._batch_size = batch_size
        self._interval = flush_interval
        self._buffer: deque[tuple[Any, ...]] = deque()
        self._wake = threading.Event()
        self._writer: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self._closed = False

    @classmethod
    def for_workspace(cls, workspace: str | Path, **kwargs: Any) -> AuditLog:
        """The workspace's audit log, ``<workspace>/audit.db``."""
        return cls(Path(workspace) / cls.FILENAME, **kwargs)

    # --- writing -------------------------------------------------------------------------
    def record(
        self,
        *,
        tool: str,
        tenant: str,
        user: str,
        trace_id: str,
        request_id: str,
        call_id: str,
        arguments: Any,
        canonical: str | None,
        decision: str,
        outcome: str,
        error_class: str = "",
        duration_ms: float,
        cache_hit: bool = False,
        dedup_hit: bool = False,
        attempts: int = 1,
        ts: float | None = None,
        repairs: Sequence[str] = (),
        parent_trace_id: str = "",
        depth: int = 0,
        agent: str = "",
    ) -> None:
        """Buffer one record; hashing, redaction and the write happen off the calling path.

        ``arguments`` is the parsed argument object (or the raw text when it was not valid
        JSON); ``canonical`` its canonical JSON when already computed.
        """
        self.append(
            (
                time.time() if ts is None else ts,
                tool,
                tenant,
                user,
                trace_id,
                request_id,
                call_id,
                arguments,
                canonical,
                decision,
                outcome,
                error_class,
                duration_ms,
                cache_hit,
                dedup_hit,
                attempts,
                tuple(repairs),
                parent_trace_id,
                depth,
                agent,
            )
        )

    def append(self, row: tuple[Any, ...]) -> None:
        """:meth:`record` without keywords, for the toolkit's hot path: ``row`` holds the same
        values in the order of :meth:`record`'s parameters (``ts`` first, required; ``repairs``,
        ``parent_trace_id``, ``depth`` and ``agent`` last, optional)."""
        if self._closed:
            logger.warning("audit log %s is closed; dropping a record for %s", self.path, row[1])
            return
        buffer = self._buffer
        buffer.append(row)
        if self._writer is None:
            self._start_writer()
        elif len(buffer) >= self._batch_size:
            self._wake.set()

    def flush(self) -> int:
        """Write every buffered record now; returns how many were written."""
        rows: list[tuple[Any, ...]] = []
        buffer = self._buffer
        while buffer:
            try:
                rows.append(_row(buffer.popleft()))
            except IndexError:  # pragma: no cover - drained by the writer thread meanwhile
                break
        if rows:
            self._write(rows)
        return len(rows)

    # --- storage ---------------------------------------------------------------------------
    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        # a failure propagates: the writer thread logs it (the batch is lost, loudly) and a
        # query answers it (503 for a PostgreSQL out of reach)
        try:
            with self._writes.transaction() as conn:
                conn.executemany(self._sql(_INSERT), rows)
        except UnicodeEncodeError:
            # half of a surrogate pair in a record's text (a custom model's tool name, an
            # error read with surrogateescape): that one record would lose the whole batch
            storable = [tuple(valid_text(v) if isinstance(v, str) else v for v in r) for r in rows]
            with self._writes.transaction() as conn:
                conn.executemany(self._sql(_INSERT), storable)

    def _fetch(self, sql: str, params: list[Any]) -> Sequence[Any]:
        with self._database.connection() as conn:
            return conn.execute(self._sql(sql), params).fetchall()

    def close(self) -> None:
        """Write what is buffered and close the file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        if self._writer is not None:
            self._writer.join(timeout=10)
        try:
            self.flush()
        finally:
            self._database.close()
            atexit.unregister(self.close)

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_writer(self) -> None:
        with self._start_lock:
            if self._writer is not None:
                return
            self._writer = threading.Thread(
                target=self._run_writer, name=f"audit-writer:{self.path.name}", daemon=True
            )
            self._writer.start()
            atexit.register(self.close)

    def _run_writer(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()
            try:
                self.flush()
            except Exception:  # keep the writer alive; the records stay lost, loudly
                logger.exception("audit log %s: writing a batch failed", self.path)

    # --- reading -------------------------------------------------------------------------
    def query(
        self,
        *,
        tool: str | None = None,
        user: str | None = None,
        tenant: str | None = None,
        since: float | datetime | None = None,
        outcome: str | None = None,
        trace_id: str | None = None,
        limit: int | None = 1000,
        parent_trace_id: str | None = None,
    ) -> list[AuditRecord]:
        """Records matching every given filter, oldest first (the newest ``limit`` of them).

        Args:
            tool: Tool name.
            user: User id.
            tenant: Tenant id.
            since: Only calls at or after this time (epoch seconds or a datetime).
            outcome: ``ok``, ``error``, ``denied``, ... (see :class:`AuditRecord`).
            trace_id: One run's calls.
            limit: Most records returned (``None``: all).
            parent_trace_id: The calls of the runs a run delegated to (its subagents').
        """
        return list(
            self._select(
                since=since,
                limit=limit,
                tool=tool,
                user=user,
                tenant=tenant,
                outcome=outcome,
                trace_id=trace_id,
                parent_trace_id=parent_trace_id,
            )
        )

    def export_jsonl(self, target: str | Path | IO[str], **filters: Any) -> int:
        """Write matching records (all by default) as JSON Lines; returns how many.

        ``filters`` are those of :meth:`query` (``limit`` defaults to no limit here).
        """
        filters.setdefault("limit", None)
        if isinstance(target, str | Path):
            with open(target, "w", encoding="utf-8") as fh:
                return self.export_jsonl(fh, **filters)
        count = 0
        for record in self._select(**filters):
            target.write(json.dumps(record.to_dict(), ensure_ascii=False) + "\n")
            count += 1
        return count

    def _select(
        self,
        *,
        since: float | datetime | None = None,
        limit: int | None = 1000,
        **equal: str | None,
    ) -> Iterator[AuditRecord]:
        """The records of :meth:`query` (``equal``: its equality filters, by its names)."""
        unknown = sorted(set(equal) - set(_FILTERS))
        if unknown:
            raise TypeError(f"unknown audit filters: {', '.join(unknown)}")
        if not self._closed:
            self.flush()
        where = [f"{_FILTERS[name]} = ?" for name, value in equal.items() if value is not None]
        params: list[Any] = [value for value in equal.values() if value is not None]
        if since is not None:
            where.append("ts >= ?")
            params.append(since.timestamp() if isinstance(since, datetime) else float(since))
        clause = (" WHERE " + " AND ".join(where)) if where else ""
        if limit is None:
            sql = f"SELECT {_COLUMNS} FROM {{table}}{clause} ORDER BY ts, id"
        else:  # the newest `limit` records, returned oldest first
            sql = (
                f"SELECT {_COLUMNS} FROM (SELECT id, {_COLUMNS} FROM {{table}}{clause} "
                "ORDER BY ts DESC, id DESC LIMIT ?) AS newest ORDER BY ts, id"
            )
            params.append(int(limit))
        for row in self._fetch(sql, params):
            record = dict(zip(_FIELDS, row, strict=True))
            record["cache_hit"] = bool(record["cache_hit"])
            record["dedup_hit"] = bool(record["dedup_hit"])
            record["repairs"] = tuple(json.loads(record["repairs"])) if record["repairs"] else ()
            yield AuditRecord(**record)


def _row(raw: tuple[Any, ...]) -> tuple[Any, ...]:
    """A buffered record → the stored row: hash and redact the arguments."""
    if len(raw) < 20:  # a row appended without the optional trailing fields
        raw = (*raw, *_ROW_DEFAULTS[len(raw) - 16 :])
    digest, arguments = _stored_arguments(raw[7], raw[8])
    repairs = json.dumps(list(raw[16]), ensure_ascii=False) if raw[16] else ""
    # cache_hit and dedup_hit as integers, the same in SQLite and PostgreSQL
    hits = (int(raw[13]), int(raw[14]))
    return (*raw[:7], digest, arguments, *raw[9:13], *hits, raw[15], repairs, *raw[17:])


def masked_arguments(arguments: str) -> str:
    """A model's raw argument text as it may be shown: as sent when no secret-looking key
    can be in it, else canonical JSON with the values of secret-looking keys masked (then
    text that is not JSON is described, never shown)."""
    if arguments.lstrip()[:1] == "{" and not secret_name(arguments):
        # no secret-looking key can be in it: the model's own text, as sent (if it is not
        # valid JSON, the span says so in the tool's outcome)
        return arguments
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
        return _stored_arguments(parsed, None)[1]
    except (json.JSONDecodeError, RecursionError):  # (nested deeper than Python follows)
        return f"<unparsed arguments, {len(arguments)} chars>"


def _stored_arguments(arguments: Any, canonical: str | None) -> tuple[str, str]:
    """The arguments' hash and what is stored of them (redacted canonical JSON); arguments
    nested deeper than the encoder or the redaction can follow are stored as a note, never
    fail the batch they are written with."""
    try:
        return _hashed_and_redacted(arguments, canonical)
    except RecursionError:
        digest = sha256((canonical or "").encode("utf-8", "surrogatepass")).hexdigest()
        return digest, '"<arguments nested too deeply>"'


def _hashed_and_redacted(arguments: Any, canonical: str | None) -> tuple[str, str]:
    if canonical is None:
        if isinstance(arguments, str):  # not valid JSON: hash it, never store it
            digest = sha256(arguments.encode("utf-8", "surrogatepass")).hexdigest()
            return digest, f'"<unparsed arguments, {len(arguments)} chars>"'
        canonical = canonical_json(arguments)
    # (surrogatepass: arguments holding half of a surrogate pair hash as they came and are
    # stored with U+FFFD in its place)
    digest = sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()
    # A secret key's name appears in the JSON text; without one there is nothing to redact.
    if secret_name(canonical):
        canonical = canonical_json(redact(arguments))
    return digest, valid_text(canonical)


_SINCE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$", re.IGNORECASE)
_SINCE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, *, now: float | None = None) -> float:
    """``"90s"``, ``"15m"``, ``"1h"``, ``"2d"``, ``"1w"`` ago, or an ISO 8601 time → epoch seconds.

    An ISO time without a zone is read as local time.

    Raises:
        InvalidArgumentError: neither form (a ValueError).
    """
    match = _SINCE_RE.match(text)
    if match:
        seconds = float(match.group(1)) * _SINCE_UNITS[match.group(2).lower()]
        return (time.time() if now is None else now) - seconds
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise InvalidArgumentError(
            f"cannot read the time {text!r}: use a duration like 30m, 1h, 2d or an ISO time "
            "like 2025-01-31T09:00"
        ) from None
