"""shelfhand with stored tracing on: every run is a trace (``invoke_agent``, ``chat`` and
``execute_tool`` spans) written to a SQLite trace store by the recorder thread, as in the
service with ``tracing = stored``."""

from __future__ import annotations

import atexit
import tempfile
from pathlib import Path

from fw_shelfhand import IS_ASYNC, VERSION, make_runner, schema  # type: ignore[import-not-found]

from shelfhand.core.tracing import Tracer, set_default_tracer
from shelfhand.traces import SqliteTraceStore, StoreRecorder

_folder = tempfile.TemporaryDirectory()
_recorder = StoreRecorder(SqliteTraceStore(Path(_folder.name) / "traces.db"))
set_default_tracer(Tracer([_recorder]))
atexit.register(_recorder.close)

NAME = "shelfhand (stored tracing)"
NOTES = "as fw_shelfhand, every run traced into a SQLite trace store"
__all__ = ["IS_ASYNC", "NAME", "NOTES", "VERSION", "make_runner", "schema"]
