"""A query embedding past ``embed_timeout`` does not outlive its process's exit: ``mcp serve``
whose client leaves right after a timed-out ``retrieve`` exits 0, promptly.

Before, the abandoned thread was still inside onnxruntime when the interpreter exited and
the C++ runtime aborted the process ("terminate called without an active exception", exit
134): 10 runs of 10 on the development machine. The real packaged embedders run here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from support.cli import cli_env, run_cli
from support.mcp_wire import INITIALIZE, INITIALIZED

QUERY = ("保修政策和加热器故障的处理方法是什么" * 120)[:2000]
"""As long as a query is embedded (2,000 characters): MiniLM needs its 8 windows for it."""


def test_mcp_serve_exits_0_at_once_after_a_timed_out_query_embedding(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "warranty.md").write_text(
        "# 保修政策\n\n产品自购买之日起保修一年。E-203 是加热器故障。\n", encoding="utf-8"
    )
    (docs / "leave.md").write_text(
        "# Leave policy\n\nEmployees get ten days of annual leave each year.\n", encoding="utf-8"
    )
    ingested = run_cli(["ingest", str(docs)], tmp_path / "ws", SHELFHAND_EMBEDDER="default")
    assert ingested.returncode == 0, ingested.stderr
    env = cli_env(tmp_path / "ws", SHELFHAND_EMBEDDER="default", SHELFHAND_EMBED_TIMEOUT="0.001")
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "retrieve", "arguments": {"query": QUERY}},
    }
    process = subprocess.Popen(
        [sys.executable, "-P", "-m", "shelfhand.cli", "mcp", "serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    killer = threading.Timer(90, process.kill)  # a server that never ends ends the test
    killer.start()
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write("".join(json.dumps(r) + "\n" for r in (INITIALIZE, INITIALIZED, call)))
        process.stdin.flush()
        replies = []
        while not replies or replies[-1].get("id") != 2:
            line = process.stdout.readline()
            assert line, "the server ended without answering the retrieve call"
            replies.append(json.loads(line))
        process.stdin.close()  # the client leaves while the abandoned embedding runs
        left = time.monotonic()
        code = process.wait()
        took = time.monotonic() - left
        err = process.stderr.read() if process.stderr is not None else ""
    finally:
        killer.cancel()
        process.kill()
    result = replies[-1]["result"]
    assert not result.get("isError"), result
    assert "did not finish within" in err  # the embedding was abandoned: keyword search
    assert "terminate called" not in err, err[-2000:]
    assert code == 0, err[-2000:]
    assert took < 30, took
