"""Uploads survive crashes and bad files: kill -9 mid-upload, one writer, 422 not 500, quotas."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import ALICE, BOB, ServeProcess, ThreadServer, start_serve, start_thread_server
from service_helpers import user_contexts as contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter
from shelfhand.service.uploads import UploadRecord, UploadRegistry, Uploads

BUSY = 75


def registry_sources(workspace: Path) -> set[str]:
    with sqlite3.connect(workspace / "sessions.db") as db:
        return {r[0] for r in db.execute("SELECT source FROM knowledge_uploads")}


def knowledge_sources(workspace: Path, prefix: str) -> set[str]:
    with sqlite3.connect(workspace / "knowledge.db") as db:
        rows = db.execute("SELECT DISTINCT source FROM documents").fetchall()
    return {r[0] for r in rows if r[0].startswith(prefix)}


def staging_entries(workspace: Path) -> list[Path]:
    staging = workspace / "uploads" / ".staging"
    return list(staging.iterdir()) if staging.exists() else []


def found(c: httpx.Client, term: str) -> list[str]:
    r = c.get("/v1/knowledge/search", params={"q": term, "top_k": 20, "mode": "keyword"})
    assert r.status_code == 200, r.text
    return [hit["source"] for hit in r.json()["results"] if term in hit["text"]]


def cli_ingest(workspace: Path, path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env["SHELFHAND_EMBEDDER"] = "hashing"
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "ingest", str(path), "-w", str(workspace)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        timeout=120,
    )


@pytest.mark.slow
def test_kill_9_mid_upload_then_restart_leaves_registry_and_knowledge_in_agreement(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    server = start_serve(ws)
    files = [
        (
            "files",
            (
                f"manual-{n:02d}.md",
                (
                    f"# 手册 {n}\n\n" + f"第 {n} 章 chapter {n} ZEBRA-{n:02d} 内容 words. " * 1000
                ).encode(),
                "text/markdown",
            ),
        )
        for n in range(12)
    ]
    try:
        with (
            httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c,
            c.stream("POST", "/v1/knowledge/files", files=files, params={"stream": True}) as r,
        ):
            assert r.status_code == 200
            for line in r.iter_lines():
                if '"kind": "stored"' in line or '"kind":"stored"' in line:
                    server.process.kill()  # SIGKILL after the first file is committed
                    break
    finally:
        server.process.kill()
        server.process.wait(timeout=15)

    # Typically one or two files are committed to the knowledge base at this point and the
    # staging folder is still there; the checks below hold wherever the kill landed.
    restarted = start_serve(ws)
    try:
        registry, knowledge = registry_sources(ws), knowledge_sources(ws, "t1/")
        assert registry == knowledge  # every searchable upload is listed, and only those
        assert staging_entries(ws) == []
        with httpx.Client(base_url=restarted.url, headers=ALICE, timeout=60) as c:
            listed = {s["source"] for s in c.get("/v1/knowledge/sources").json()["sources"]}
            assert listed == registry
            # whatever the crash left, the tenant can upload the files again: nothing is
            # "not yours", and afterwards all of them are listed and searchable
            r = c.post("/v1/knowledge/files", files=files[:3])
            assert r.status_code == 200, r.text
            assert set(found(c, "ZEBRA-01")) == {"t1/manual-01.md"}
            assert c.delete("/v1/knowledge/sources/t1/manual-01.md").status_code == 204
        assert registry_sources(ws) == knowledge_sources(ws, "t1/")
    finally:
        restarted.stop()


def test_recovery_rolls_back_an_unfinished_upload_and_empties_the_staging(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    app = App(settings=Settings.load(ws, env={"SHELFHAND_RETRIEVAL_MODE": "keyword"}))
    kb = app.open_knowledge(writer="serve")
    registry = UploadRegistry(ws / "sessions.db")
    uploads = Uploads(ws / "uploads", registry, max_file_bytes=1 << 20, max_files=20)
    kept = ws / "uploads" / "t1"
    kept.mkdir(parents=True)
    for name, text in [("old.md", "# 旧\n\nOLD-1 保修两年。"), ("new.md", "# 新\n\nNEW-2 退货。")]:
        (kept / name).write_text(text, encoding="utf-8")
    record = {"tenant_id": "t1", "bytes": 10, "uploaded_by": "alice", "uploaded_at": 1.0}
    try:
        kb.ingest([kept / "old.md"], tenant_id="t1")
        registry.record([UploadRecord(source="t1/old.md", filename="old.md", **record)])
        # a crash after the knowledge commit of a re-upload of old.md and a new new.md, before
        # the registry commit; plus a staging folder that no one will finish
        registry.begin(
            [
                UploadRecord(source="t1/old.md", filename="old.md", **record),
                UploadRecord(source="t1/new.md", filename="new.md", **record),
            ]
        )
        kb.ingest([kept / "old.md", kept / "new.md"], tenant_id="t1")
        (ws / "uploads" / ".staging" / "abc" / "t1").mkdir(parents=True)
        assert {s.source for s in kb.sources()} == {"t1/old.md", "t1/new.md"}

        uploads.recover(kb)

        assert {s.source for s in kb.sources()} == {"t1/old.md"}  # still the tenant's
        assert [r.source for r in registry.for_tenant("t1")] == ["t1/old.md"]
        assert registry.pending() == []
        assert not (kept / "new.md").exists() and (kept / "old.md").exists()
        assert staging_entries(ws) == []
    finally:
        registry.close()
        kb.close()


@pytest.fixture
def thread_app(tmp_path: Path) -> Iterator[tuple[ThreadServer, Path]]:
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = Settings.load(ws, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"any": HashingEmbedder()}))
    api = create_app(
        app,
        config=ServiceConfig(max_tenant_bytes=2000, max_tenant_files=3),
        api_keys=contexts(),
    )
    server = start_thread_server(api)
    yield server, ws
    server.stop()


def test_a_bad_file_is_a_422_naming_it_and_leaves_no_staging(
    thread_app: tuple[ThreadServer, Path],
) -> None:
    server, ws = thread_app
    deep = ("deep.json", b"[" * 100_000 + b"]" * 100_000, "application/json")
    good = ("good.md", "# 好\n\nGOOD-9 保修。".encode(), "text/markdown")
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
        for stream in (False, True):
            r = c.post(
                "/v1/knowledge/files",
                files=[("files", good), ("files", deep)],
                params={"stream": stream},
            )
            assert r.status_code == 422, r.text
            body = r.json()
            assert body["code"] == "unreadable_document"
            assert "deep.json" in body["detail"] and "max_depth" in body["detail"]
            assert str(ws) not in body["detail"]  # the server's paths are not shown
            assert staging_entries(ws) == []
            assert not found(c, "GOOD-9")
        r = c.post("/v1/knowledge/files", files=[("files", good)])
        assert r.status_code == 200 and found(c, "GOOD-9") == ["t1/good.md"]


def test_a_tenant_over_its_quota_gets_413_and_others_are_not_affected(
    thread_app: tuple[ThreadServer, Path],
) -> None:
    server, ws = thread_app

    def part(name: str, size: int) -> tuple[str, tuple[str, bytes, str]]:
        return ("files", (name, (f"# {name}\n\n" + "词" * size).encode(), "text/markdown"))

    with (
        httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as alice,
        httpx.Client(base_url=server.url, headers=BOB, timeout=60) as bob,
    ):
        assert alice.post("/v1/knowledge/files", files=[part("a.md", 300)]).status_code == 200
        r = alice.post("/v1/knowledge/files", files=[part("b.md", 400)])
        assert r.status_code == 413 and r.json()["code"] == "tenant_quota"
        assert "2000" in r.json()["detail"]
        # replacing a file counts it once; a small one still fits
        assert alice.post("/v1/knowledge/files", files=[part("a.md", 310)]).status_code == 200
        assert alice.post("/v1/knowledge/files", files=[part("c.md", 10)]).status_code == 200
        assert alice.post("/v1/knowledge/files", files=[part("d.md", 10)]).status_code == 200
        r = alice.post("/v1/knowledge/files", files=[part("e.md", 10)])
        assert r.status_code == 413 and "files" in r.json()["detail"]
        assert bob.post("/v1/knowledge/files", files=[part("b.md", 400)]).status_code == 200
    assert staging_entries(ws) == []


@pytest.mark.slow
def test_a_cli_ingest_while_serving_is_told_to_use_the_api_and_the_server_finds_everything(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "returns.md").write_text("# 退货\n\nRET-55 拆封后 7 天内可退。", encoding="utf-8")
    server: ServeProcess = start_serve(ws)
    try:
        with httpx.Client(base_url=server.url, headers=ALICE, timeout=60) as c:
            r = c.post("/v1/knowledge/files", files=[("files", ("w.md", "# 保修\n\nWAR-1 两年。"))])
            assert r.status_code == 200, r.text
            result = cli_ingest(ws, docs)
            assert result.returncode == BUSY, result.stderr
            said = " ".join(result.stderr.split())  # rich wraps long lines
            assert f"served by PID {server.process.pid}" in said
            assert "upload through the API" in said
            assert "Traceback" not in result.stderr + result.stdout
            assert found(c, "WAR-1") == ["t1/w.md"]
            # reading the served workspace from the command line works meanwhile
            env = {k: v for k, v in os.environ.items() if not k.startswith("SHELFHAND_")}
            search = subprocess.run(
                [
                    *(sys.executable, "-m", "shelfhand.cli", "search", "WAR-1", "-w", str(ws)),
                    *("--tenant", "t1", "--mode", "keyword", "--json"),
                ],
                capture_output=True,
                text=True,
                encoding="utf-8",
                env={**env, "SHELFHAND_EMBEDDER": "hashing"},
                timeout=120,
            )
            assert search.returncode == 0, search.stderr
            assert [h["source"] for h in json.loads(search.stdout)] == ["t1/w.md"]
            r = c.post("/v1/knowledge/files", files=[("files", ("returns.md", b"# x\n\nRET-55"))])
            assert r.status_code == 200 and found(c, "RET-55") == ["t1/returns.md"]
    finally:
        server.stop()
    after = cli_ingest(ws, docs)  # the server is gone: the lock went with it
    assert after.returncode == 0, after.stderr
    assert json.dumps("1 added")[1:-1] in after.stdout
