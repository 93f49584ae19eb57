"""A full disk under the workspace: the service answers 507 ``storage_full`` with the reason
(a 500 "internal error" before), keeps what it had stored, and takes uploads again once there
is space; the command line says so in one line (exit 74), not with a traceback.

On a real small filesystem (a tmpfs of a few MiB): mounting one needs root, so elsewhere these
tests are skipped."""

from __future__ import annotations

import random
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from support.cli import run_cli

ENV = {"SHELFHAND_RETRIEVAL_MODE": "keyword"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB filesystem, unmounted afterwards."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4M", "tmpfs", str(where)],
        capture_output=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def words_file(size: int) -> bytes:
    """Markdown of ``size`` bytes of distinct words (they do not compress into the index)."""
    rng = random.Random(size)
    vocabulary = ["".join(rng.choices("abcdefghijklmnopqrstuvwxyz", k=8)) for _ in range(20_000)]
    lines, total = ["# filler"], 0
    while total < size:
        line = " ".join(rng.choices(vocabulary, k=60))
        lines.append(line)
        total += len(line) + 2
    return "\n\n".join(lines).encode()


def test_uploads_on_a_full_disk_are_507_and_what_was_stored_stays(
    small_disk: Path, thread_servers: list[ThreadServer]
) -> None:
    app = App(settings=Settings.load(small_disk / "ws", env=ENV))
    api = create_app(app, config=ServiceConfig(), api_keys=user_contexts())
    server = start_thread_server(api)
    thread_servers.append(server)
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=120) as c:
        first = c.post(
            "/v1/knowledge/files", files=[("files", ("policy.md", "# 保修\n整机保修 24 个月。"))]
        )
        assert first.status_code == 200, first.text

        full = c.post("/v1/knowledge/files", files=[("files", ("big.md", words_file(6 << 20)))])

        assert full.status_code == 507, full.text
        body = full.json()
        assert (
            body["code"] == "storage_full"
            and "disk holding the workspace is full" in body["detail"]
        )
        assert body["trace_id"] == full.headers["x-trace-id"]
        found = c.get("/v1/knowledge/search", params={"q": "保修"}).json()["results"]
        assert [r["source"] for r in found] == ["t1/policy.md"]
        assert [s["source"] for s in c.get("/v1/knowledge/sources").json()["sources"]] == [
            "t1/policy.md"
        ]

        # space again (the disk grown): uploads are taken
        subprocess.run(["mount", "-o", "remount,size=64M", str(small_disk)], check=True)
        again = c.post(
            "/v1/knowledge/files", files=[("files", ("returns.md", "# 退货\n7 天内可退货。"))]
        )
        assert again.status_code == 200, again.text
        assert c.get("/v1/knowledge/search", params={"q": "退货"}).json()["results"]


def test_the_command_line_on_a_full_disk_says_so_in_one_line(small_disk: Path) -> None:
    docs = small_disk.parent / "docs"
    docs.mkdir()
    (docs / "big.md").write_bytes(words_file(6 << 20))

    done = run_cli(["ingest", str(docs)], small_disk / "ws", **ENV)

    assert done.returncode == 74, done.stderr
    assert "Traceback" not in done.stderr
    assert "error: the disk holding the workspace is full" in done.stderr


def test_a_full_disk_is_found_in_an_error_s_causes_and_a_turn_answers_507(tmp_path: Path) -> None:
    import errno
    import sqlite3

    from shelfhand.core.errors import KnowledgeError, storage_full
    from shelfhand.service.chat import error_status, failure_message

    # SQLite's own "full": a database held to one page more than it has
    conn = sqlite3.connect(tmp_path / "small.db")
    conn.execute("CREATE TABLE t (x TEXT)")
    conn.execute("PRAGMA max_page_count = 3")
    with pytest.raises(sqlite3.OperationalError) as sqlite_full:
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 4000,)] * 10)
    conn.close()
    try:
        raise KnowledgeError("the ingest failed") from sqlite_full.value
    except KnowledgeError as wrapped:
        assert storage_full(wrapped) == "database or disk is full"
        assert error_status(wrapped) == (507, "storage_full")
        assert "disk holding the workspace is full" in failure_message(wrapped, answering=False)
    assert storage_full(OSError(errno.ENOSPC, "No space left on device")) == (
        "No space left on device"
    )
    index_library = ValueError("An IO error occurred: 'No space left on device (os error 28)'")
    assert storage_full(index_library)
    assert storage_full(OSError(errno.EACCES, "Permission denied")) == ""
    assert error_status(RuntimeError("a bug")) == (500, "internal_error")
