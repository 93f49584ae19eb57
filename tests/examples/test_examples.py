"""The examples run, and do what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_after_sales_example_runs_the_reference_scenario(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "after_sales.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout
    assert "有 12 台现货" in lines and "warranty-policy" in lines
    assert '"found":false' in lines  # another customer's order is invisible
    assert "return RMA-1 created for SO-1001" in lines
    assert "E-203 → projector/troubleshooting-manual.pdf, p. 2" in lines
