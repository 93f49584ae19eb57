"""Agent-loop overhead of shelfhand beside a hand-written loop (and peers), in one run.

Uses the shared harness in ``../shared/bench/agent`` (scripted model, one ``add`` tool call per
run). shelfhand plugs in through ``bench/fw_shelfhand.py``. Every framework x scenario runs in
its own subprocess, interleaved, ``--repeats`` times; medians are reported with ratios to the
hand-written loop measured in the same run.

    python bench/agent_overhead.py                     # shelfhand + hand loop
    python bench/agent_overhead.py --venvs DIR         # + peers installed as DIR/venv-<name>

Targets (issue #2): one run <= 0.3 ms; each extra step <= 0.1 ms; schema cost <= 1 us per tool
per model call; ``python -c "import shelfhand"`` <= 0.2 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = {  # harness adapter name -> venv folder name
    "pydanticai": "venv-pydanticai",
    "langchain": "venv-langchain",
    "agentscope": "venv-agentscope",
    "openai_agents": "venv-openai-agents",
    "smolagents": "venv-smolagents",
}
SCENARIOS = ("basic", "seq10", "tools50")


def run_cell(python: str, harness: Path, fw: str, scenario: str, runs: int) -> dict[str, object]:
    # this checkout's src first: an editable install elsewhere must not be what is measured
    paths = [str(HERE), str(harness), str(HERE.parent / "src")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths))
    cmd = [python, str(harness / "bench.py"), fw, scenario, "--runs", str(runs), "--warmup", "50"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise RuntimeError(f"{fw} {scenario} failed:\n{out.stderr[-2000:]}")


def import_seconds(python: str, stmt: str, n: int = 7) -> float:
    # this checkout's src, as for the cells (not whatever an editable install points at)
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))

    def wall(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([python, "-c", code], check=True, env=env)
        return time.perf_counter() - t0

    return statistics.median(wall(stmt) for _ in range(n))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--harness", type=Path, default=HERE.parent.parent / "shared" / "bench" / "agent"
    )
    ap.add_argument("--venvs", type=Path, help="folder holding peer venvs (venv-<name>)")
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "agent_overhead.json")
    a = ap.parse_args()
    if not (a.harness / "bench.py").is_file():
        sys.exit(f"harness not found at {a.harness} (pass --harness)")

    frameworks = {
        "shelfhand": sys.executable,
        "shelfhand_inline": sys.executable,
        "shelfhand_traced": sys.executable,
        "baseline": sys.executable,
    }
    if a.venvs:
        for fw, folder in PEERS.items():
            py = a.venvs / folder / "bin" / "python"
            if py.exists():
                frameworks[fw] = str(py)
    print(f"load before: {os.getloadavg()}", flush=True)
    cells: dict[tuple[str, str], list[dict[str, object]]] = {}
    for r in range(a.repeats):
        for scenario in SCENARIOS:
            for fw, py in frameworks.items():
                res = run_cell(py, a.harness, fw, scenario, a.runs)
                cells.setdefault((fw, scenario), []).append(res)
                print(
                    f"repeat {r + 1} {fw:>14} {scenario:>8}: {res['us_per_run']:9.1f} us/run",
                    flush=True,
                )
    print(f"load after: {os.getloadavg()}", flush=True)

    def med(fw: str, scenario: str, key: str = "us_per_run") -> float:
        return statistics.median(float(c[key]) for c in cells[(fw, scenario)])  # type: ignore[arg-type]

    python_start = import_seconds(sys.executable, "pass")
    imp = import_seconds(sys.executable, "import shelfhand")
    imp_api = import_seconds(sys.executable, "from shelfhand import Agent, Toolkit, tool")
    summary: dict[str, object] = {
        "load": os.getloadavg(),
        "python_startup_s": python_start,
        "import_shelfhand_s": imp,
        "import_shelfhand_net_s": imp - python_start,
        "import_agent_toolkit_tool_s": imp_api,
        "frameworks": {},
    }
    rows = []
    base = med("baseline", "basic")
    for fw in frameworks:
        basic, seq10, tools50 = (med(fw, s) for s in SCENARIOS)
        calls_basic = med(fw, "basic", "model_calls_per_run")
        per_step = (seq10 - basic) / 9
        per_tool = (tools50 - basic) / 49 / calls_basic
        summary["frameworks"][fw] = {  # type: ignore[index]
            "us_per_run": basic,
            "us_per_extra_step": per_step,
            "us_per_tool_per_model_call": per_tool,
            "ratio_to_hand_loop": basic / base,
            "version": cells[(fw, "basic")][0]["version"],
        }
        rows.append(
            f"| {fw} | {basic:.0f} | {basic / base:.1f}x | {per_step:.0f} | {per_tool:.2f} |"
        )
    print(
        "\n| framework | one run (us) | vs hand loop | extra step (us) | schema (us/tool/model call) |"
    )
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"\nimport shelfhand: {imp:.3f} s wall ({imp - python_start:.3f} s over bare python start);"
        f" from shelfhand import Agent, Toolkit, tool: {imp_api:.3f} s"
    )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(summary, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
