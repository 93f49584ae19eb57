"""A ``shelfhand worker`` process for the tests, with a hook that can hold a job mid-way.

Usage: ``python worker_process.py WORKSPACE [--hold-after-stored MARKER [RELEASE]]``
(``SHELFHAND_DATABASE_URL`` and the other settings come from the environment).

With ``--hold-after-stored``, the first file of a job that is stored makes the job write
``MARKER`` and wait: forever (the test kills the worker), or until ``RELEASE`` exists. The
wait is in this test script, never in shelfhand's code paths.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.jobs.queue import JobRecord
from shelfhand.jobs.worker import WorkerOptions, run_worker
from shelfhand.knowledge.ingest import IngestEvent


def main(argv: list[str]) -> None:
    workspace = Path(argv[0])
    marker = release = None
    if len(argv) > 2 and argv[1] == "--hold-after-stored":
        marker = Path(argv[2])
        release = Path(argv[3]) if len(argv) > 3 else None
    held = threading.Event()

    def hook(job: JobRecord, event: IngestEvent) -> None:
        if marker is None or event.kind != "stored" or held.is_set():
            return
        held.set()
        marker.write_text(job.id, encoding="utf-8")
        gate = threading.Event()
        while not (release is not None and release.exists()):
            gate.wait(0.1)

    options = WorkerOptions(heartbeat_s=0.5, stalled_after_s=4.0, stalled_check_s=0.5, poll_s=0.5)
    run_worker(App(settings=Settings.load(workspace)), options, on_event=hook)


if __name__ == "__main__":
    main(sys.argv[1:])
