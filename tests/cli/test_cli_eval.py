"""``shelfhand eval``: case files with kinds, ``--ablation`` as a table and as ``--json``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shelfhand.knowledge.base import sample_corpus

CASES = sample_corpus().parent / "projector-cases.jsonl"
ENV = {"SHELFHAND_EMBEDDER": "hashing"}


def shelfhand(
    *args: str, workspace: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    full_env.update({"COLUMNS": "200", **(env or {}), "SHELFHAND_WORKSPACE": str(workspace)})
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("eval-samples")
    out = shelfhand("ingest", "--samples", workspace=ws, env=ENV)
    assert out.returncode == 0, out.stderr
    return ws


def test_ablation_json_has_one_row_per_stage_with_quality_latency_and_kinds(
    workspace: Path,
) -> None:
    out = shelfhand("eval", str(CASES), "--ablation", "--json", workspace=workspace, env=ENV)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ablation"] is True and report["dataset"] == "projector-cases.jsonl"
    assert report["n_cases"] == 27 and report["n_queries"] == 21  # 6 not_found cases
    stages = {row["stage"]: row for row in report["stages"]}
    assert list(stages)[:3] == ["keyword", "vector", "hybrid"]
    assert "+ compression" in stages
    for name in ("keyword", "vector", "hybrid"):
        row = stages[name]
        assert row["status"] == "ok" and row["mode"] == name
        for key in ("ndcg@10", "recall@5", "recall@10", "mrr@10", "p50_ms", "p95_ms"):
            assert isinstance(row[key], float)
        assert set(row["kinds"]) == {"identifier", "question", "not_found"}
        assert row["kinds"]["not_found"]["n"] == 6
        assert set(row["langs"]) == {"en", "zh"}
    for row in stages.values():
        assert row["status"] == "ok" or row["reason"]


def test_ablation_table_shows_every_stage_and_skipped_ones_with_the_reason(
    workspace: Path,
) -> None:
    out = shelfhand(
        "eval", str(CASES), "--ablation", workspace=workspace, env=ENV | {"COLUMNS": "250"}
    )
    assert out.returncode == 0, out.stderr
    for stage in ("keyword", "vector", "hybrid", "+ exact boost", "+ rerank", "+ compression"):
        assert stage in out.stdout
    assert "by kind and language" in out.stdout and "identifier rank-1" in out.stdout
    # rerank is off by default, so at least that stage says why it did not run
    assert "skipped: " in out.stdout


def test_plain_eval_of_a_case_file_adds_per_kind_figures(workspace: Path) -> None:
    out = shelfhand("eval", str(CASES), "--mode", "keyword", "--json", workspace=workspace, env=ENV)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["n_queries"] == 21 and report["n_cases"] == 27
    assert report["kinds"]["identifier"]["n"] == 8
    assert 0.0 <= report["kinds"]["not_found"]["not_found"] <= 1.0
    text = shelfhand("eval", str(CASES), "--mode", "keyword", workspace=workspace, env=ENV)
    assert "not found" in text.stdout and "ndcg@10" in text.stdout


def test_a_bad_case_file_is_a_clear_error(workspace: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "x", "kind": "lookup", "relevant": ["a.md"]}\n')
    out = shelfhand("eval", str(bad), "--ablation", workspace=workspace, env=ENV)
    assert out.returncode == 2
    assert "bad.jsonl:1" in out.stderr and "'kind'" in out.stderr
    assert "Traceback" not in out.stderr


def test_eval_on_a_workspace_with_nothing_indexed_says_so(tmp_path: Path) -> None:
    out = shelfhand("eval", str(CASES), workspace=tmp_path, env=ENV)
    assert out.returncode == 2
    assert f"nothing is indexed in {tmp_path}" in out.stderr and "Traceback" not in out.stderr
