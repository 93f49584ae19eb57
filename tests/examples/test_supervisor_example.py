"""examples/supervisor.py runs the reference scenario with three specialists (issue 12)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_supervisor_example_delegates_each_question_to_its_specialist(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "supervisor.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout
    assert "-> product_advisor (depth 1)" in lines
    assert "[product_advisor] query_stock" in lines and "[product_advisor] quote_price" in lines
    assert "-> troubleshooter (depth 1)" in lines
    assert "[troubleshooter] retrieve" in lines and "troubleshooting-manual.pdf" in lines
    assert "-> returns_clerk (depth 1)" in lines
    assert "approval asked for create_return" in lines
    assert "[returns_clerk] create_return -> return RMA-1 created for SO-1001" in lines
    assert "SKU2024-011 有 12 台现货" in lines and "退货单已创建。" in lines
    assert "Traceback" not in out.stderr
