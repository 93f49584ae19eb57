"""``shelfhand config`` shows every setting, where its value came from, and no secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from shelfhand.core.settings_table import SETTINGS


def run_config(*args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    env.update(COLUMNS="200", **env_extra)
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", "config", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def shown(out: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert out.returncode == 0, out.stderr
    return {row["name"]: row for row in json.loads(out.stdout)["settings"]}


def test_each_value_is_shown_with_the_source_it_came_from(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text(
        '[shelfhand]\nmodel = "qwen"\ntemperature = 0.3\ncompress = true\n', encoding="utf-8"
    )

    rows = shown(
        run_config("-w", str(tmp_path), "--json", "--max-tokens", "64", SHELFHAND_TEMPERATURE="0.7")
    )

    assert list(rows) == [s.name for s in SETTINGS]
    picked = {name: (rows[name]["value"], rows[name]["source"]) for name in rows}
    assert picked["workspace"] == (str(tmp_path), "flag")
    assert picked["max_tokens"] == (64, "flag")
    assert picked["temperature"] == (0.7, "env")
    assert picked["model"] == ("qwen", "toml")
    assert picked["compress"] == (True, "toml")
    assert picked["tool_mode"] == ("native", "default")
    assert picked["base_url"] == (None, "default")
    assert rows["temperature"]["env"] == "SHELFHAND_TEMPERATURE"


def test_secrets_are_masked_and_urls_lose_their_password(tmp_path: Path) -> None:
    secrets = {
        "OPENAI_API_KEY": "sk-very-secret",
        "SHELFHAND_RERANK_API_KEY": "rk-very-secret",
        "SHELFHAND_DATABASE_URL": "postgresql://app:pg-very-secret@db:5432/shelf",
        "SHELFHAND_REDIS_URL": "redis://:redis-very-secret@cache:6379/0",
    }

    as_json = run_config("-w", str(tmp_path), "--json", **secrets)
    as_table = run_config("-w", str(tmp_path), **secrets)

    rows = shown(as_json)
    assert (rows["api_key"]["value"], rows["rerank_api_key"]["value"]) == ("***", "***")
    assert rows["database_url"]["value"] == "postgresql://app:***@db:5432/shelf"
    assert rows["redis_url"]["value"] == "redis://cache:6379/0"
    assert as_table.returncode == 0, as_table.stderr
    assert "postgresql://app:***@db:5432/shelf" in as_table.stdout
    for out in (as_json, as_table):
        assert "very-secret" not in out.stdout + out.stderr


def test_the_table_lists_every_setting_with_its_source(tmp_path: Path) -> None:
    out = run_config("-w", str(tmp_path), SHELFHAND_RETRIEVAL_MODE="keyword")

    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    for setting in SETTINGS:
        assert any(f" {setting.name} " in line for line in lines), setting.name
    (mode,) = [line for line in lines if " retrieval_mode " in line]
    assert "keyword" in mode and "env" in mode


def test_an_unknown_key_in_the_file_exits_2_naming_the_nearest_setting(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text('[shelfhand]\nmodle = "qwen"\n', encoding="utf-8")

    out = run_config("-w", str(tmp_path), "--json")

    assert out.returncode == 2 and not out.stdout
    told = " ".join(out.stderr.split())
    assert "'modle' under [shelfhand] is not a setting (did you mean 'model'?)" in told


def test_an_invalid_setting_exits_2_saying_what_to_fix(tmp_path: Path) -> None:
    out = run_config("-w", str(tmp_path), SHELFHAND_QUERY_REWRITE="llm")

    assert out.returncode == 2
    assert "query_rewrite must be on or off" in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr and out.stdout == ""


def test_a_shelfhand_variable_nothing_reads_is_a_warning(tmp_path: Path) -> None:
    out = run_config("-w", str(tmp_path), "--json", SHELFHAND_MODLE="qwen")

    assert out.returncode == 0, out.stderr
    (warning,) = json.loads(out.stdout)["warnings"]
    assert "SHELFHAND_MODLE is not a shelfhand setting" in warning
    assert "did you mean 'SHELFHAND_MODEL'?" in warning
