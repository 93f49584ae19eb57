"""Traces of turns: the store (SQLite in the workspace, or PostgreSQL) and the recorder
that writes finished spans to it in batches (see :mod:`shelfhand.core.tracing`)."""

from shelfhand.traces.recorder import StoreRecorder
from shelfhand.traces.store import SpanRecord, SqliteTraceStore, SqlTraceStore, TraceSummary

__all__ = ["SpanRecord", "SqlTraceStore", "SqliteTraceStore", "StoreRecorder", "TraceSummary"]
