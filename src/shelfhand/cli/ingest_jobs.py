"""``shelfhand ingest`` with ``database_url`` set: the files go on the queue as one job.

The files are read here and stored with the job in PostgreSQL (each within the ``[limits]``
file size, all of them within :data:`MAX_JOB_BYTES`); a ``shelfhand worker`` ingests them with
the same source names an in-process ingest gives (``<folder name>/<path>``), and a folder
still prunes the sources of files that vanished from it. The command follows the job until it
is done (Ctrl-C stops following, not the job) unless ``--detach``; it says so when no worker
is running (``--no-queue`` ingests in the command's own process instead).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.markup import escape

from shelfhand.cli.common import fail

if TYPE_CHECKING:
    from shelfhand.app import App
    from shelfhand.jobs.queue import IngestQueue, JobFile, JobRecord

MAX_JOB_BYTES = 1024**3
"""The most bytes one ``shelfhand ingest`` puts on the queue (ingest bigger trees in parts)."""

EXIT_SKIPPED = 3
EXIT_FAILED = 1


def collect_files(
    targets: list[Path], max_file_bytes: int, workspace: Path | None = None
) -> tuple[list[JobFile], list[tuple[str, str]]]:
    """The files under ``targets`` as the worker is to name their sources (each with its
    folder, resolved here: the worker names it as an in-process ingest would, by the roots
    the store holds), and those skipped as an ingest skips them (a name that is not UTF-8, a
    pipe or a device), each with the reason; nothing under ``workspace``."""
    from shelfhand.core.errors import UnreadableDocumentError
    from shelfhand.core.names import is_text, shown_bytes
    from shelfhand.jobs.queue import JobFile
    from shelfhand.knowledge.ingest.ingestor import NOT_TEXT_NAME
    from shelfhand.knowledge.reading.limits import ReadLimits
    from shelfhand.knowledge.reading.readers import iter_files, read_bounded

    limits = ReadLimits(max_file_mb=max_file_bytes / 1024**2)
    skip = None if workspace is None else workspace.resolve()
    folders: dict[str, Path] = {}
    files: list[JobFile] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    for given in targets:
        folder = given.is_dir()
        root = given if folder else given.parent
        root_name = root.resolve().name or "root"
        other = folders.setdefault(root_name, root.resolve())
        if other != root.resolve():  # (one job names a root by one folder)
            raise fail(
                f"two different folders named {root_name!r} ({other} and {root.resolve()}): "
                "sources are named after their folder; ingest them in separate runs",
                2,
            )
        for path in iter_files([given]):
            if skip is not None and skip in path.resolve().parents:
                continue  # (the workspace's own files: an ingest never reads them)
            name = f"{root_name}/{path.relative_to(root).as_posix()}"
            if not is_text(name):
                skipped.append((shown_bytes(name), NOT_TEXT_NAME))
                continue
            try:
                size = path.stat().st_size
            except OSError as exc:  # (a link to nothing)
                skipped.append((name, exc.strerror or str(exc)))
                continue
            if size > max_file_bytes:
                raise fail(
                    f"{path} is larger than the file limit ({max_file_bytes} bytes, "
                    "[limits] max_file_mb)",
                    2,
                )
            total += size
            if total > MAX_JOB_BYTES:
                raise fail(
                    f"more than {MAX_JOB_BYTES // 1024**2} MiB to queue in one ingest: "
                    "ingest the folders in several runs",
                    2,
                )
            try:
                data = read_bounded(path, limits)  # (a pipe is not waited on)
            except UnreadableDocumentError as exc:
                skipped.append((name, str(exc).removeprefix(f"cannot read {path}: ")))
                continue
            origin = str(root.resolve())
            files.append(JobFile(name=name, data=data, folder=folder, origin=origin))
    return files, skipped


def queued_ingest(
    a: App,
    queue: IngestQueue,
    targets: list[Path],
    *,
    tenant: str,
    tags: list[str],
    detach: bool,
    console: Any,
) -> None:
    """Enqueue the files and (unless ``detach``) follow the job; exits like ``ingest``."""
    from shelfhand.core.context import UserContext

    files, skipped = collect_files(
        targets, int(a.read_limits().max_file_mb * 1024 * 1024), a.settings.workspace
    )
    for name, reason in skipped:
        console.print(f"[yellow]skipped[/] {escape(name)}: {escape(reason)}", highlight=False)
    if not files:
        raise fail("no readable files to ingest in " + ", ".join(map(str, targets)), 2)
    job = queue.enqueue(
        kind="ingest",
        user=UserContext(tenant_id=tenant, user_id="cli", roles=()),
        files=files,
        sources=[f.name for f in files],
        permission_tags=tags,
    )
    console.print(
        f"queued job {job.id}: {job.files} files, {job.bytes} bytes "
        "(a `shelfhand worker` ingests them)",
        highlight=False,
    )
    if not queue.live_workers():
        console.print(
            "[yellow]no worker is running:[/] start `shelfhand worker` with the same settings "
            "(the job waits in the queue), or ingest here with --no-queue",
            highlight=False,
        )
    if detach:
        if skipped:
            raise typer.Exit(EXIT_SKIPPED)
        return
    try:
        job = _follow(queue, job, console)
    except KeyboardInterrupt:
        console.print(
            f"[yellow]stopped following:[/] job {job.id} goes on in the workers", highlight=False
        )
        raise typer.Exit(130) from None
    _summary(job, console)
    if skipped:
        raise typer.Exit(EXIT_SKIPPED)


def _follow(queue: IngestQueue, job: JobRecord, console: Any) -> JobRecord:
    pause = threading.Event()
    started = time.monotonic()
    with console.status("queued: waiting for a worker") as status:
        while not job.final:
            pause.wait(0.5)
            job = queue.get(job.id) or job
            p = job.progress
            if job.status == "queued":
                text = "queued: waiting for a worker"
                if job.error:
                    text = f"retrying after: {job.error}"
            elif p.phase == "embed":
                text = f"embedding: {p.chunks_embedded}/{p.chunks_to_embed} chunks"
            else:
                text = f"indexing: {p.files_done}/{p.files_total} files"
            status.update(f"{text} ({time.monotonic() - started:.0f} s)")
    return job


def _summary(job: JobRecord, console: Any) -> None:
    if job.status == "failed":
        raise fail(f"job {job.id} failed: {job.error}", EXIT_FAILED)
    r = job.report or {}
    console.print(
        f"{len(r.get('added', []))} added, {len(r.get('updated', []))} updated, "
        f"{len(r.get('unchanged', []))} unchanged, {len(r.get('removed', []))} removed, "
        f"{len(r.get('failed', []))} skipped; {r.get('chunks', 0)} chunks "
        f"({r.get('embedded_chunks', 0)} embedded), job {job.id} done",
        highlight=False,
    )
    for failure in r.get("failed", []):
        console.print(
            f"[yellow]skipped[/] {escape(failure['source'])}: {escape(failure['reason'])}",
            highlight=False,
        )
    if r.get("failed"):
        raise typer.Exit(EXIT_SKIPPED)
