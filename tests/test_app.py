"""Provider modes (docs/design.md R11): explicit modes fail fast, ``auto`` degrades and says why."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

import shelfhand.app as app_module
from shelfhand.app import App
from shelfhand.core.errors import ConfigurationError
from shelfhand.core.settings import Settings
from shelfhand.knowledge.base import sample_corpus
from shelfhand.knowledge.embeddings.router import EmbeddingRouter, Vectors


class BrokenEmbedder:
    name = "broken"
    dim = 8

    def check(self) -> None:
        raise ConfigurationError("model file missing at /nowhere/model.onnx")

    def embed(self, texts: Sequence[str]) -> Vectors:
        raise ConfigurationError("model file missing at /nowhere/model.onnx")

    def embed_query(self, text: str) -> Vectors:
        return self.embed([text])[0]


def app_for(tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> App:
    monkeypatch.setattr(
        app_module, "_build_router", lambda spec, **_: EmbeddingRouter({"any": BrokenEmbedder()})
    )
    return App(settings=Settings.load(tmp_path, env={"SHELFHAND_RETRIEVAL_MODE": mode}))


def test_simple_mode_with_a_broken_embedder_fails_at_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ConfigurationError, match="retrieval mode 'simple'"):
        app_for(tmp_path, "simple", monkeypatch).open_knowledge()


def test_auto_mode_degrades_to_keyword_search_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        kb = app_for(tmp_path, "auto", monkeypatch).open_knowledge()
    assert kb.keyword_only
    assert kb.degraded_reason and "model file missing" in kb.degraded_reason
    assert any("degraded" in r.getMessage() for r in caplog.records)
    kb.ingest([sample_corpus()])
    hits = kb.search("E-203", k=3)
    assert hits and hits[0].chunk.source == "projector/troubleshooting-manual.pdf"
    kb.close()


def test_keyword_mode_uses_no_embedder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(spec: str) -> EmbeddingRouter:
        raise AssertionError("keyword mode must not build embedders")

    monkeypatch.setattr(app_module, "_build_router", refuse)
    a = App(settings=Settings.load(tmp_path, env={"SHELFHAND_RETRIEVAL_MODE": "keyword"}))
    kb = a.open_knowledge()
    assert kb.keyword_only and kb.degraded_reason is None
    kb.close()


@pytest.mark.parametrize(("value", "bridged"), [(None, True), ("false", False), ("true", True)])
def test_cross_language_bridges_english_to_use_unless_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None, bridged: bool
) -> None:
    seen: list[bool] = []
    real = app_module._build_router

    def build(spec: str, *, cross_language: bool) -> EmbeddingRouter:
        seen.append(cross_language)
        return EmbeddingRouter({"any": BrokenEmbedder()})

    monkeypatch.setattr(app_module, "_build_router", build)
    env = {"SHELFHAND_RETRIEVAL_MODE": "auto"}
    if value is not None:
        env["SHELFHAND_CROSS_LANGUAGE"] = value
    App(settings=Settings.load(tmp_path, env=env)).open_knowledge().close()
    assert seen == [bridged]
    router = real("default", cross_language=bridged)
    assert ("en_via_zh" in router.spaces) is bridged


def test_an_unknown_embedder_name_is_a_configuration_error(tmp_path: Path) -> None:
    a = App(settings=Settings.load(tmp_path, env={"SHELFHAND_EMBEDDER": "magic"}))
    with pytest.raises(ConfigurationError, match="unknown embedder 'magic'"):
        a.open_knowledge()


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SHELFHAND_RETRIEVAL_MODE": "pgvector"}, "retrieval mode"),
        ({"SHELFHAND_MODEL_TIMEOUT": "soon"}, "model_timeout .*must be a number"),
        ({"SHELFHAND_MODEL_TIMEOUT": "-1"}, "model_timeout .*must be between"),
    ],
)
def test_invalid_settings_fail_with_a_message(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Settings.load(tmp_path, env=env)


def test_a_broken_settings_file_names_itself(tmp_path: Path) -> None:
    (tmp_path / "shelfhand.toml").write_text("[shelfhand\nmodel = 1", encoding="utf-8")
    with pytest.raises(ConfigurationError, match=r"shelfhand\.toml is not valid TOML"):
        Settings.load(tmp_path, env={})


DESK = '''
from shelfhand import UserContext, tool

IMPORTS = []
IMPORTS.append(1)


@tool(read_only=True)
def order_status(ctx: UserContext, order_id: str) -> dict:
    """Look up one of the caller's orders."""
    return {"order": order_id, "tenant": ctx.tenant}


@tool(name="retrieve")
def search(query: str) -> str:
    """Another search."""
    return query
'''


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A project folder holding ``app_desk.py``, the current folder of the test (imported
    afresh by each test)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "app_desk.py").write_text(DESK, encoding="utf-8")
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield project
    sys.modules.pop("app_desk", None)


def test_the_tools_setting_adds_its_tools_to_every_toolkit_importing_them_once(
    tmp_path: Path, desk: Path
) -> None:
    env = {"SHELFHAND_TOOLS": "app_desk:order_status"}
    app = App(settings=Settings.load(tmp_path / "ws", env=env))
    assert [t.name for t in app.toolkit(None).visible_tools()] == ["retrieve", "order_status"]
    assert app.toolkit(None, governed=False).get("order_status") is not None
    assert sys.modules["app_desk"].IMPORTS == [1]
    assert str(desk) in sys.path


def test_an_own_tool_named_as_one_of_shelfhands_is_refused_at_start_up(
    tmp_path: Path, desk: Path
) -> None:
    app = App(settings=Settings.load(tmp_path / "ws", env={"SHELFHAND_TOOLS": "app_desk"}))
    with pytest.raises(ConfigurationError) as e:
        app.toolkit(None)
    assert str(e.value) == (
        "tools: 'app_desk' gives a tool named 'retrieve', as one of shelfhand's own tools is; "
        "pass name=... to @tool"
    )
