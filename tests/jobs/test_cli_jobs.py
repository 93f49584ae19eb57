"""``shelfhand ingest`` with SHELFHAND_DATABASE_URL queues a job; ``shelfhand worker`` runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from job_helpers import ALICE, FAQ_EN, FAQ_ZH, SRC, job_env, make_app

from shelfhand.core.context import UserContext
from shelfhand.jobs.queue import IngestQueue


def _env(pg_url: str) -> dict[str, str]:
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("SHELFHAND_")},
        **job_env(pg_url),
        "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]),
    }


def _sources(ws: Path, pg_url: str) -> list[str]:
    """The sources the workspace's knowledge base holds, sorted."""
    kb = make_app(ws, pg_url).open_knowledge()
    try:
        return sorted(s.source for s in kb.sources())
    finally:
        kb.close()


def _cli(pg_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        env=_env(pg_url),
        capture_output=True,
        text=True,
        timeout=120,
    )


def queued_jobs(pg_url: str, tenant: str) -> list[Any]:
    """The jobs of ``tenant`` in the queue."""
    queue = IngestQueue.open(pg_url)
    try:
        return list(queue.for_tenant(tenant))
    finally:
        queue.close()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    (folder / "zh").mkdir(parents=True)
    (folder / "returns.md").write_text(FAQ_EN, encoding="utf-8")
    (folder / "zh" / "退货.md").write_text(FAQ_ZH, encoding="utf-8")
    return folder


@pytest.fixture
def worker(tmp_path: Path, pg_url: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shelfhand.cli",
            "worker",
            "-w",
            str(tmp_path / "ws"),
            "--concurrency",
            "2",
            "--heartbeat",
            "1",
            "--stalled-after",
            "5",
        ],
        env=_env(pg_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def test_ingest_with_a_database_queues_a_job_and_detach_returns_at_once(
    tmp_path: Path, pg_url: str, docs: Path
) -> None:
    done = _cli(pg_url, "ingest", "-w", str(tmp_path / "ws"), str(docs), "--detach")
    assert done.returncode == 0, done.stderr
    assert "queued job" in done.stdout
    assert "no worker is running" in done.stdout
    (job,) = queued_jobs(pg_url, "default")
    assert job.kind == "ingest" and job.status == "queued"
    assert sorted(job.sources) == ["docs/returns.md", "docs/zh/退货.md"]
    # nothing was ingested in process
    kb = make_app(tmp_path / "ws", pg_url).open_knowledge()
    try:
        assert kb.sources() == []
    finally:
        kb.close()


def test_a_queued_ingest_skips_pipes_and_names_that_are_not_utf8_as_an_ingest_does(
    tmp_path: Path, pg_url: str, docs: Path
) -> None:
    # a pipe named like a document blocked the command forever; a GBK name, a link to
    # nothing: a traceback
    os.mkfifo(docs / "notes.md")
    (docs / os.fsdecode("保修.md".encode("gbk"))).write_text("# x\n\nE-203.\n")
    (docs / "gone.md").symlink_to(tmp_path / "nowhere.md")
    done = _cli(pg_url, "ingest", "-w", str(tmp_path / "ws"), str(docs), "--detach")
    assert done.returncode == 3, done.stdout + done.stderr
    said = " ".join(done.stdout.split())
    assert "skipped docs/notes.md: not a regular file (a pipe, a device or a socket)" in said
    assert "skipped docs/\\xb1\\xa3\\xd0\\xde.md: its name is not UTF-8 text" in said
    assert "skipped docs/gone.md: No such file or directory" in said
    (job,) = queued_jobs(pg_url, "default")
    assert sorted(job.sources) == ["docs/returns.md", "docs/zh/退货.md"]


def test_ingest_no_queue_ingests_in_its_own_process(
    tmp_path: Path, pg_url: str, docs: Path
) -> None:
    ws = tmp_path / "ws"
    done = _cli(pg_url, "ingest", "-w", str(ws), str(docs), "--no-queue", "--tenant", "acme")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 added" in done.stdout and "queued" not in done.stdout
    kb = make_app(ws, pg_url).open_knowledge()
    try:
        hits = kb.search("无理由退货", k=3, user=ALICE, mode="keyword")
        assert [h.chunk.source for h in hits] == ["docs/zh/退货.md"]
    finally:
        kb.close()
    assert queued_jobs(pg_url, "acme") == []


def test_ingest_follows_its_job_on_a_worker_and_reports_like_an_in_process_ingest(
    tmp_path: Path, pg_url: str, docs: Path, worker: subprocess.Popen[str]
) -> None:
    ws = tmp_path / "ws"
    done = _cli(pg_url, "ingest", "-w", str(ws), str(docs), "--tenant", "acme")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 added, 0 updated, 0 unchanged, 0 removed, 0 skipped" in done.stdout
    kb = make_app(ws, pg_url).open_knowledge()
    try:
        hits = kb.search("无理由退货", k=3, user=ALICE, mode="keyword")
        assert [h.chunk.source for h in hits] == ["docs/zh/退货.md"]
        other = UserContext(tenant_id="other", user_id="x")
        assert kb.search("无理由退货", k=3, user=other, mode="keyword") == []
    finally:
        kb.close()
    # the worker stops on SIGTERM, cleanly
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(60) == 0, worker.stderr.read() if worker.stderr else ""


def test_a_folder_ingested_in_process_can_be_ingested_again_through_the_queue(
    tmp_path: Path, pg_url: str, docs: Path, worker: subprocess.Popen[str]
) -> None:
    # the worker reads a staging copy of the folder: it must still count as the same folder
    ws = tmp_path / "ws"
    first = _cli(pg_url, "ingest", "-w", str(ws), str(docs), "--no-queue")
    assert first.returncode == 0, first.stdout + first.stderr
    (docs / "new.md").write_text("# 新文件\n\n错误代码 E-999：风扇故障。", encoding="utf-8")
    (docs / "returns.md").unlink()
    again = _cli(pg_url, "ingest", "-w", str(ws), str(docs))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 added, 0 updated, 1 unchanged, 1 removed" in again.stdout
    assert _sources(ws, pg_url) == ["docs/new.md", "docs/zh/退货.md"]


def test_worker_without_a_database_fails_with_a_clear_message(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHELFHAND_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "worker", "-w", str(tmp_path / "ws")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "SHELFHAND_DATABASE_URL" in done.stderr


def test_a_queued_subfolder_or_file_keeps_the_names_of_its_indexed_folder(
    tmp_path: Path, pg_url: str, docs: Path, worker: subprocess.Popen[str]
) -> None:
    # the worker named a staging copy by its own folder: zh/退货.md beside docs/zh/退货.md
    ws = tmp_path / "ws"
    first = _cli(pg_url, "ingest", "-w", str(ws), str(docs))
    assert first.returncode == 0, first.stdout + first.stderr
    (docs / "zh" / "退货.md").write_text(FAQ_ZH + "\n拆封后 15 天内可换货。\n", encoding="utf-8")
    sub = _cli(pg_url, "ingest", "-w", str(ws), str(docs / "zh"))
    assert sub.returncode == 0, sub.stdout + sub.stderr
    assert "0 added, 1 updated" in sub.stdout
    (docs / "zh" / "退货.md").write_text(FAQ_ZH + "\n换货免运费。\n", encoding="utf-8")
    one = _cli(pg_url, "ingest", "-w", str(ws), str(docs / "zh" / "退货.md"))  # a file alone
    assert one.returncode == 0, one.stdout + one.stderr
    assert "0 added, 1 updated" in one.stdout
    assert _sources(ws, pg_url) == ["docs/returns.md", "docs/zh/退货.md"]


def test_a_queued_ingest_leaves_out_the_workspace_inside_the_folder(
    tmp_path: Path, pg_url: str, docs: Path
) -> None:
    ws = docs / "kb"
    ws.mkdir()
    (ws / "state.json").write_text('{"generation": 12}', encoding="utf-8")
    done = _cli(pg_url, "ingest", "-w", str(ws), str(docs), "--detach")
    assert done.returncode == 0, done.stdout + done.stderr
    (job,) = queued_jobs(pg_url, "default")
    assert sorted(job.sources) == ["docs/returns.md", "docs/zh/退货.md"]
