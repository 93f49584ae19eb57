"""``shelfhand mcp list`` and ``shelfhand mcp serve`` argument handling, run as a user would."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from mcp_helpers import ECHO_SERVER


def shelfhand(*args: str, workspace: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(SHELFHAND_WORKSPACE=str(workspace), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_mcp_list_shows_each_server_its_status_and_tools(tmp_path: Path) -> None:
    config = {
        "mcpServers": {
            "echo": {"command": sys.executable, "args": [ECHO_SERVER, "echo"]},
            "offline": {"url": f"http://127.0.0.1:{closed_port()}/mcp", "timeout": 5},
        }
    }
    (tmp_path / "mcp.json").write_text(json.dumps(config), encoding="utf-8")
    out = shelfhand("mcp", "list", "--json", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = {row["name"]: row for row in json.loads(out.stdout)}
    assert rows["echo"]["status"] == "ok" and rows["echo"]["transport"] == "stdio"
    assert {"echo", "shout", "grow"} <= set(rows["echo"]["tools"])
    assert "background_job" not in rows["echo"]["tools"]  # listed as mounted: no task-only
    assert rows["offline"]["status"].startswith("error:") and rows["offline"]["tools"] == []
    table = shelfhand("mcp", "list", workspace=tmp_path)
    assert "echo" in table.stdout and "offline" in table.stdout and "shout" in table.stdout


def test_mcp_list_reports_a_malformed_configuration(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"x": {}}}', encoding="utf-8")
    out = shelfhand("mcp", "list", workspace=tmp_path)
    assert out.returncode == 2 and "'x'" in out.stderr


def test_mcp_serve_refuses_an_unknown_transport(tmp_path: Path) -> None:
    out = shelfhand("mcp", "serve", "--transport", "carrier-pigeon", workspace=tmp_path)
    assert out.returncode == 2 and "stdio, http or sse" in out.stderr


def test_mcp_serve_refuses_a_non_loopback_address_without_keys(tmp_path: Path) -> None:
    for transport in ("http", "sse"):
        out = shelfhand(
            "mcp", "serve", "--transport", transport, "--host", "0.0.0.0", workspace=tmp_path
        )
        assert out.returncode == 2, out.stderr
        assert "refusing to serve MCP on 0.0.0.0 without API keys" in out.stderr
        assert "--allow-anonymous" in out.stderr
