"""An upload is read within its workspace's ``[limits]``: the knowledge base's reading limits
reach the service's validation (nothing is set for the whole process)."""

from __future__ import annotations

from pathlib import Path

import httpx
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts

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
