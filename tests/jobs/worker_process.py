"""A ``shelfhand worker`` process for the tests, with a hook that can hold a job mid-way.

Usage: ``python worker_process.py WORKSPACE [--concurrency N]
[--hold-after-stored | --hold-each MARKER [RELEASE]]`` (``SHELFHAND_DATABASE_URL`` and the other
settings come from the environment).

With ``--hold-after-stored``, the first file stored by this worker makes its job write
``MARKER`` and wait: forever (the test kills the worker), or until ``RELEASE`` exists. With
``--hold-each``, every job does so after its first stored file, writing ``MARKER-<job id>``.
The wait is in this test script, never in shelfhand's code paths.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.jobs.queue import JobRecord
from shelfhand.jobs.worker import WorkerOptions, run_worker
from shelfhand.knowledge.ingest.ingestor import IngestEvent


def main(argv: list[str]) -> None:
    workspace = Path(argv.pop(0))
    concurrency = 1
    if argv[:1] == ["--concurrency"]:
        concurrency = int(argv[1])
        argv = argv[2:]
    marker = release = None
    each = bool(argv) and argv[0] == "--hold-each"
    if argv and argv[0] in ("--hold-after-stored", "--hold-each"):
        marker = Path(argv[1])
        release = Path(argv[2]) if len(argv) > 2 else None
    held: set[str] = set()
    lock = threading.Lock()

    def hook(job: JobRecord, event: IngestEvent) -> None:
        if marker is None or event.kind != "stored":
            return
        with lock:
            if job.id in held or (held and not each):
                return
            held.add(job.id)
        path = marker.with_name(f"{marker.name}-{job.id}") if each else marker
        path.write_text(job.id, encoding="utf-8")
        gate = threading.Event()
        while not (release is not None and release.exists()):
            gate.wait(0.1)

    options = WorkerOptions(
        concurrency=concurrency,
        heartbeat_s=0.5,
        stalled_after_s=4.0,
        stalled_check_s=0.5,
        poll_s=0.5,
    )
    run_worker(App(settings=Settings.load(workspace)), options, on_event=hook)


if __name__ == "__main__":
    main(sys.argv[1:])
