"""Shared by the CLI tests that talk to a model: the scripted chat-completions server of
``tests/models/chat_completions_server.py`` (importable as ``chat_completions_server``) and a
``server`` fixture running it on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

if "chat_completions_server" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "chat_completions_server",
        Path(__file__).resolve().parents[1] / "models" / "chat_completions_server.py",
    )
    assert _spec is not None and _spec.loader is not None
    _module = importlib.util.module_from_spec(_spec)
    sys.modules["chat_completions_server"] = _module
    _spec.loader.exec_module(_module)


@pytest.fixture
def server() -> Iterator[Any]:
    from chat_completions_server import ChatServer

    s = ChatServer()
    s.start()
    yield s
    s.stop()
