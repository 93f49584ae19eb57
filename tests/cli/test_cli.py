"""The ``shelfhand`` command line, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shelfhand.knowledge.base import sample_corpus


def shelfhand(
    *args: str, workspace: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SHELFHAND_", "OPENAI_"))}
    full_env.update(env or {})
    full_env["SHELFHAND_WORKSPACE"] = str(workspace)
    full_env["COLUMNS"] = "200"
    return subprocess.run(
        [sys.executable, "-m", "shelfhand.cli", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
        check=False,
    )


def test_help_lists_the_commands(tmp_path: Path) -> None:
    out = shelfhand("--help", workspace=tmp_path)
    assert out.returncode == 0
    for command in ("tools", "chat", "ingest", "sources", "forget", "search", "ask", "eval"):
        assert command in out.stdout


def test_tools_prints_schemas_without_context_parameters(tmp_path: Path) -> None:
    env = {"SHELFHAND_BUILTIN_TOOLS": "calculator,current_time,http_get"}
    out = shelfhand("tools", "--json", workspace=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    schemas = json.loads(out.stdout)
    names = {s["function"]["name"] for s in schemas}
    assert {"retrieve", "calculator", "current_time", "http_get"} <= names
    default = shelfhand("tools", "--json", workspace=tmp_path)
    assert {s["function"]["name"] for s in json.loads(default.stdout)} == {"retrieve"}
    retrieve = next(s for s in schemas if s["function"]["name"] == "retrieve")
    assert set(retrieve["function"]["parameters"]["properties"]) == {"query", "top_k"}


def test_chat_without_a_model_says_how_to_configure_one(tmp_path: Path) -> None:
    out = shelfhand("chat", workspace=tmp_path)
    assert out.returncode != 0
    assert "SHELFHAND_MODEL" in out.stderr
    assert "Traceback" not in out.stderr + out.stdout


def test_a_wrong_retrieval_mode_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    out = shelfhand("search", "x", workspace=tmp_path, env={"SHELFHAND_RETRIEVAL_MODE": "magic"})
    assert out.returncode == 2
    assert "retrieval mode 'magic'" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_ingest_sources_search_forget_on_the_samples(tmp_path: Path) -> None:
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    out = shelfhand("ingest", "--samples", workspace=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "6 added" in out.stdout
    again = shelfhand("ingest", "--samples", workspace=tmp_path, env=env)
    assert "0 added, 0 updated, 6 unchanged" in again.stdout

    listed = shelfhand("sources", workspace=tmp_path, env=env)
    assert "projector/returns-policy.md" in listed.stdout

    found = shelfhand("search", "E-203", "--json", "-k", "2", workspace=tmp_path, env=env)
    hits = json.loads(found.stdout)
    assert hits[0]["source"] == "projector/troubleshooting-manual.pdf"
    assert hits[0]["page"] == 2

    gone = shelfhand("forget", "projector/troubleshooting-manual.pdf", workspace=tmp_path, env=env)
    assert gone.returncode == 0, gone.stderr
    found = shelfhand("search", "E-203", "--json", workspace=tmp_path, env=env)
    assert all(
        h["source"] != "projector/troubleshooting-manual.pdf" for h in json.loads(found.stdout)
    )
    missing = shelfhand("forget", "nope.md", workspace=tmp_path, env=env)
    assert missing.returncode == 1 and "not indexed" in missing.stderr


@pytest.mark.slow
def test_ask_without_a_model_prints_the_passages_sentences_and_a_hint(tmp_path: Path) -> None:
    assert shelfhand("ingest", str(sample_corpus()), workspace=tmp_path).returncode == 0
    out = shelfhand("ask", "E-203 是什么故障？", workspace=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("摘自文档：")
    assert "troubleshooting-manual.pdf" in out.stdout and "灯泡过热" in out.stdout
    # the hint in the question's language too
    assert "没有配置对话模型。请设置 SHELFHAND_MODEL" in out.stdout
    english = shelfhand("ask", "What does E-203 mean?", workspace=tmp_path)
    assert "No chat model is configured. Set SHELFHAND_MODEL" in english.stdout


@pytest.mark.slow
def test_eval_on_the_sample_cases(tmp_path: Path) -> None:
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    assert shelfhand("ingest", "--samples", workspace=tmp_path, env=env).returncode == 0
    cases = sample_corpus().parent / "projector-eval.jsonl"
    out = shelfhand("eval", str(cases), "--mode", "keyword", "--json", workspace=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["n_queries"] >= 8
    assert report["recall@5"] >= 0.8
    for key in ("ndcg@10", "recall@10", "mrr@10", "p50_ms", "p95_ms"):
        assert key in report


@pytest.mark.parametrize(
    "args", [["eval"], ["eval", "--beir", "/nonexistent"], ["ingest", "/no/such/dir"]]
)
def test_bad_arguments_get_a_clear_error_not_a_traceback(tmp_path: Path, args: list[str]) -> None:
    out = shelfhand(*args, workspace=tmp_path)
    assert out.returncode == 2
    assert "error:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
def test_reindex_rebuilds_the_keyword_index_in_one_segment(tmp_path: Path) -> None:
    env = {"SHELFHAND_EMBEDDER": "hashing"}
    empty = shelfhand("reindex", workspace=tmp_path, env=env)
    assert empty.returncode == 2 and f"nothing is indexed in {tmp_path}" in empty.stderr
    assert shelfhand("ingest", "--samples", workspace=tmp_path, env=env).returncode == 0
    before = shelfhand("search", "E-203", "--json", workspace=tmp_path, env=env)

    out = shelfhand("reindex", workspace=tmp_path, env=env)

    assert out.returncode == 0, out.stderr
    assert "keyword index rebuilt" in out.stdout and "1 segment," in out.stdout
    after = shelfhand("search", "E-203", "--json", workspace=tmp_path, env=env)
    assert json.loads(after.stdout) == json.loads(before.stdout)


@pytest.mark.slow
def test_reindex_on_qdrant_builds_its_graphs_and_keeps_the_answers(tmp_path: Path) -> None:
    pytest.importorskip("qdrant_edge")
    env = {"SHELFHAND_EMBEDDER": "hashing", "SHELFHAND_QDRANT_URL": str(tmp_path / "qdrant")}
    assert shelfhand("ingest", "--samples", workspace=tmp_path, env=env).returncode == 0
    before = shelfhand("search", "E-203", "--json", workspace=tmp_path, env=env)

    out = shelfhand("reindex", workspace=tmp_path, env=env)

    assert out.returncode == 0, out.stderr
    assert "Qdrant index optimized" in out.stdout
    after = shelfhand("search", "E-203", "--json", workspace=tmp_path, env=env)
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert "E-203" in json.dumps(json.loads(after.stdout)[0], ensure_ascii=False)
