"""An upload is read within its workspace's ``[limits]``: the knowledge base's reading limits
reach the service's validation (nothing is set for the whole process)."""

from __future__ import annotations

from pathlib import Path

import httpx
from service_helpers import (
    ALICE,
    ThreadServer,
    send_until_answered,
    start_thread_server,
    user_contexts,
)

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.embeddings.local import HashingEmbedder
from shelfhand.knowledge.embeddings.router import EmbeddingRouter


def test_uploads_are_read_within_the_workspace_limits(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "shelfhand.toml").write_text("[limits]\nmax_chars = 1000\n", encoding="utf-8")
    settings = Settings.load(workspace, env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"default": HashingEmbedder()}))
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    long = ("# Warranty\n\n" + "The warranty is twelve months. " * 100).encode()
    short = b"# Warranty\n\nThe warranty is twelve months.\n"
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as client:
        refused = client.post("/v1/knowledge/files", files=[("files", ("long.md", long))])
        kept = client.post("/v1/knowledge/files", files=[("files", ("short.md", short))])
    assert refused.status_code == 422 and "max_chars" in refused.text
    assert kept.status_code == 200


def test_an_upload_is_counted_as_it_arrives_and_a_keyless_one_is_not_read(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    # a chunked upload declares no length: it was spooled to disk whole (1.5 GB without a
    # key, before its 401; 3 GB with one, before its 413)
    settings = Settings.load(tmp_path / "ws", env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"default": HashingEmbedder()}))
    config = ServiceConfig(max_files=2, max_file_bytes=1024**2)  # 3 MiB an upload at most
    server = start_thread_server(create_app(app, config=config, api_keys=user_contexts()))
    thread_servers.append(server)
    form = {"Content-Type": "multipart/form-data; boundary=b"}
    part = b'--b\r\nContent-Disposition: form-data; name="files"; filename="big.md"\r\n\r\n'

    keyless, sent_keyless = send_until_answered(server, "/v1/knowledge/files", form, 64, part)
    wrong, _ = send_until_answered(
        server, "/v1/knowledge/files", {**form, "Authorization": "Bearer nobody"}, 64, part
    )
    too_large, sent = send_until_answered(
        server, "/v1/knowledge/files", {**form, "Authorization": ALICE["Authorization"]}, 64, part
    )

    assert keyless.startswith(b"HTTP/1.1 401") and b"missing API key" in keyless
    assert wrong.startswith(b"HTTP/1.1 401") and b"unknown API key" in wrong
    assert sent_keyless < 8  # answered before the body was read
    assert too_large.startswith(b"HTTP/1.1 413"), too_large[:300]
    assert b'"upload_too_large"' in too_large and b"3 MiB" in too_large
    assert sent < 64
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as client:
        kept = client.post("/v1/knowledge/files", files=[("files", ("a.md", b"# A\n\nok\n"))])
        assert kept.status_code == 200, kept.text
    assert not any((tmp_path / "ws" / "uploads" / ".staging").iterdir())  # nothing left staged


def test_a_file_name_over_255_bytes_is_refused_422(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    # 86 Chinese characters and ".md" are 89 characters but 261 bytes: it answered 500
    settings = Settings.load(tmp_path / "ws", env={"SHELFHAND_EMBEDDER": "hashing"})
    app = App(settings=settings, router=EmbeddingRouter({"default": HashingEmbedder()}))
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    body = b"# A\n\nok\n"
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as client:
        long = client.post("/v1/knowledge/files", files=[("files", ("中" * 86 + ".md", body))])
        fits = client.post("/v1/knowledge/files", files=[("files", ("中" * 84 + ".md", body))])
    assert long.status_code == 422, long.text
    assert long.json()["code"] == "invalid_file_name" and "255 bytes" in long.json()["detail"]
    assert fits.status_code == 200, fits.text
