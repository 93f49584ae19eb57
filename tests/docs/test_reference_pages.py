"""The generated reference pages (CLI, errors and exit codes, API) are what
scripts/gen_reference.py writes from the code, and the docs site builds."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "scripts" / "gen_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_pages_are_what_the_script_writes() -> None:
    # in a fresh interpreter, as the script runs: the top-level help lists the commands in
    # the order they were registered, which a test that imported one CLI module earlier
    # (in this worker) would change
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_reference.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_errors_page_lists_every_error_code_and_every_exit_code() -> None:
    from shelfhand.core import errors

    page = (ROOT / "docs" / "reference" / "errors.md").read_text(encoding="utf-8")
    for name in errors.__all__:
        assert f"| `{name}` |" in page
    for code in (0, 1, 2, 3, 4, 69, 75, 130):
        assert f"\n| {code} |" in page


def test_the_cli_page_shows_the_help_of_every_command() -> None:
    page = (ROOT / "docs" / "reference" / "cli.md").read_text(encoding="utf-8")
    for full, _ in generator().cli_commands():
        assert f"## `{full}`" in page
