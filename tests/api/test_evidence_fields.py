"""The service's search and chat carry the conflict flags and offsets of the citations.

The real app, served by uvicorn on 127.0.0.1 (a thread of the test process), real SQLite files.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from service_helpers import ALICE, ThreadServer, start_thread_server, user_contexts

from shelfhand.api import ServiceConfig, create_app
from shelfhand.app import App
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import sample_corpus


def test_search_results_flag_the_two_warranty_versions(
    tmp_path: Path, thread_servers: list[ThreadServer]
) -> None:
    settings = Settings.load(tmp_path, env={"SHELFHAND_RETRIEVAL_MODE": "keyword"})
    app = App(settings=settings, model=None)
    server = start_thread_server(create_app(app, config=ServiceConfig(), api_keys=user_contexts()))
    thread_servers.append(server)
    samples = sample_corpus()
    with httpx.Client(base_url=server.url, headers=ALICE, timeout=30) as c:
        files = [
            ("files", (name, (samples / name).read_bytes()))
            for name in ("warranty-policy-v1.md", "warranty-policy-v2.md")
        ]
        assert c.post("/v1/knowledge/files", files=files).status_code == 200
        r = c.get("/v1/knowledge/search", params={"q": "整机保修期", "top_k": 5, "mode": "keyword"})
        assert r.status_code == 200, r.text
        results = r.json()["results"]
        nothing = c.get("/v1/knowledge/search", params={"q": "zebra", "mode": "keyword"}).json()
    flagged = [x for x in results if x["conflicts_with"]]
    assert len(flagged) == 2
    a, b = flagged
    assert a["conflicts_with"] == [b["index"]] and b["conflicts_with"] == [a["index"]]
    assert "不一致：12 个月 vs 24 个月" in a["conflict_note"]  # asked in Chinese
    assert a["conflict_note"] == b["conflict_note"]
    assert all(x["start"] is not None and x["end"] > x["start"] for x in results)
    assert all(x["spans"] == [] for x in results)  # search shows whole passages
    # the search's evidence strength of each passage, 0..1
    assert all(0 < x["relevance"] <= 1 for x in results)
    assert all(x["cosine"] is None for x in results)  # a keyword search: no cosine
    assert nothing["results"] == []
