"""docs/reference/configuration.md is what scripts/gen_config_reference.py writes."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from shelfhand.core.settings_table import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference" / "configuration.md"


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", ROOT / "scripts" / "gen_config_reference.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_reference_is_what_the_script_writes() -> None:
    expected = generator().render()

    assert REFERENCE.read_text(encoding="utf-8") == expected, (
        "docs/reference/configuration.md is stale: run python scripts/gen_config_reference.py"
    )


def test_the_reference_has_one_row_per_setting_naming_its_env_var_and_toml_key() -> None:
    rows = [line for line in REFERENCE.read_text(encoding="utf-8").splitlines() if "| `" in line]

    assert len(rows) == len(SETTINGS)
    for row, setting in zip(rows, SETTINGS, strict=True):
        assert row.startswith(f"| `{setting.name}` |")
        assert f"`{setting.env}`" in row if setting.env else "| — |" in row
