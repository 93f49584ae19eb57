"""``shelfhand ingest``, ``embed`` and ``status`` run as a user would: exit codes, an embedder
outage, Ctrl-C. Embeddings come from a real HTTP server on 127.0.0.1 speaking the OpenAI
``/v1/embeddings`` wire format."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

DIM = 8


@dataclass
class Embeddings:
    """``/v1/embeddings``; ``rejecting`` answers 400, ``gate`` holds replies until set."""

    url: str = ""
    rejecting: bool = False
    requests: int = 0
    first_request: threading.Event = field(default_factory=threading.Event)
    gate: threading.Event = field(default_factory=threading.Event)

    def reply(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.requests += 1
        self.first_request.set()
        if not self.gate.wait(timeout=30):
            return 503, {"error": {"message": "gate never opened", "type": "x"}}
        if self.rejecting:
            return 400, {"error": {"message": "model is down", "type": "invalid_request_error"}}
        data = []
        for i, text in enumerate(body["input"]):
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            data.append({"object": "embedding", "index": i, "embedding": list(digest[:DIM])})
        return 200, {"object": "list", "data": data, "model": body["model"], "usage": {}}


@pytest.fixture
def embeddings() -> Iterator[Embeddings]:
    state = Embeddings()
    state.gate.set()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            status, payload = state.reply(json.loads(self.rfile.read(length)))
            raw = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.gate.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _env(workspace: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(extra)
    env["SHELFHAND_WORKSPACE"] = str(workspace)
    env["COLUMNS"] = "200"
    return env


def shelfhand(*args: str, workspace: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=_env(workspace, env),
        timeout=120,
        check=False,
    )


def _openai(server: Embeddings) -> dict[str, str]:
    return {"SHELFHAND_EMBEDDER": "openai:fake-embed", "OPENAI_BASE_URL": server.url}


def _status(workspace: Path, env: dict[str, str]) -> dict[str, Any]:
    out = shelfhand("status", "--json", workspace=workspace, env=env)
    assert out.returncode == 0, out.stderr
    result: dict[str, Any] = json.loads(out.stdout)
    return result


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "warranty.md").write_text("# Warranty\n\nTwelve months.\n", encoding="utf-8")
    (root / "保修.md").write_text("# 保修\n\n投影仪保修期为12个月。\n", encoding="utf-8")
    return root


def test_a_file_that_breaks_its_reader_is_skipped_with_exit_code_3(
    tmp_path: Path, docs: Path
) -> None:
    (docs / "deep.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    out = shelfhand("ingest", str(docs), workspace=tmp_path / "ws", env=env)
    assert out.returncode == 3, out.stderr
    assert "2 added" in out.stdout and "1 skipped" in out.stdout
    assert out.stdout.count("docs/deep.json") == 1  # reported once
    assert "Traceback" not in out.stderr
    status = _status(tmp_path / "ws", env)
    assert status["sources"] == 2 and status["pending_embeddings"] == 0


def test_an_embedder_outage_keeps_text_searchable_and_embed_finishes_the_job(
    tmp_path: Path, docs: Path, embeddings: Embeddings
) -> None:
    ws, env = tmp_path / "ws", _openai(embeddings)
    embeddings.rejecting = True
    out = shelfhand("ingest", str(docs), workspace=ws, env=env)
    assert out.returncode == 4, out.stderr
    assert "2 added" in out.stdout and embeddings.url in out.stdout
    assert "api.openai.com" not in out.stdout + out.stderr
    status = _status(ws, env)
    assert status["chunks"] == status["pending_embeddings"] == 2 and status["vectors"] == 0
    hybrid = shelfhand("search", "保修期", workspace=ws, env=env)
    assert "docs/保修.md" in hybrid.stdout  # found by keywords
    # a Chinese query is told in Chinese, an English one in English
    assert "2 个段落尚未嵌入（只能按关键词找到）" in hybrid.stdout
    english = shelfhand("search", "How long is the warranty?", workspace=ws, env=env)
    assert "2 chunks are not embedded yet" in english.stdout

    embeddings.rejecting = False  # the embedder is back
    done = shelfhand("embed", workspace=ws, env=env)
    assert done.returncode == 0, done.stderr
    assert "2 chunks embedded" in done.stdout
    status = _status(ws, env)
    assert status["vectors"] == 2 and status["pending_embeddings"] == 0


def test_one_pending_chunk_is_told_in_the_singular(tmp_path: Path, embeddings: Embeddings) -> None:
    note = tmp_path / "note.md"
    note.write_text("# 退货\n退货期 7 天。Returns within 7 days.", encoding="utf-8")
    ws, env = tmp_path / "ws", _openai(embeddings)
    embeddings.rejecting = True

    out = shelfhand("ingest", str(note), workspace=ws, env=env)
    found = shelfhand("search", "How many days for returns?", workspace=ws, env=env)
    zh = shelfhand("search", "退货期", workspace=ws, env=env)

    assert out.returncode == 4, out.stderr
    assert "1 chunk is stored and keyword-searchable" in " ".join(out.stdout.split())
    assert "1 chunk is not embedded yet" in found.stdout and "embeds it" in found.stdout
    assert "1 个段落尚未嵌入（只能按关键词找到）；`shelfhand embed` 会嵌入它\n" in zh.stdout


def test_no_wait_leaves_embedding_to_embed(tmp_path: Path, docs: Path) -> None:
    ws, env = tmp_path / "ws", {"SHELFHAND_EMBEDDER": "hashing"}
    out = shelfhand("ingest", str(docs), "--no-wait", workspace=ws, env=env)
    assert out.returncode == 0, out.stderr
    assert "2 chunks wait for embedding" in out.stdout
    assert _status(ws, env)["pending_embeddings"] == 2
    done = shelfhand("embed", workspace=ws, env=env)
    assert (
        done.returncode == 0 and "2 chunks embedded" in done.stdout and "0 pending" in done.stdout
    )


def test_ctrl_c_finishes_the_batch_keeps_the_work_and_says_how_to_resume(
    tmp_path: Path, embeddings: Embeddings
) -> None:
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(40):  # 40 chunks: phase 2 embeds them 32 per request
        (root / f"note{i:02d}.md").write_text(f"# Note {i}\n\nLamp L{i}.\n", encoding="utf-8")
    ws = tmp_path / "ws"
    embeddings.gate.clear()  # hold the first embedding request
    child = subprocess.Popen(
        [sys.executable, "-m", "shelfhand.cli", "ingest", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(ws, _openai(embeddings)),
    )
    try:
        assert embeddings.first_request.wait(timeout=60), "phase 2 never started"
        child.send_signal(signal.SIGINT)  # while the first batch is being embedded
        # The handler has to have run before the reply arrives: wait for its message.
        assert child.stdout is not None
        seen = ""
        while "finishing the current batch" not in seen:
            line = child.stdout.readline()
            assert line, "the child ended without acknowledging Ctrl-C"
            seen += line
        embeddings.gate.set()
        rest, err = child.communicate(timeout=60)
    finally:
        embeddings.gate.set()
        if child.poll() is None:
            child.kill()
            child.wait()
    out = seen + rest
    assert child.returncode == 130, err
    assert "interrupted" in out and "shelfhand embed" in out and f"shelfhand ingest {root}" in out
    with sqlite3.connect(ws / "knowledge.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0] == 40
        assert conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0] == 32
    assert embeddings.requests == 1
    again = shelfhand("ingest", str(root), workspace=ws, env=_openai(embeddings))
    assert again.returncode == 0 and "40 unchanged" in again.stdout
    assert _status(ws, _openai(embeddings))["pending_embeddings"] == 0
