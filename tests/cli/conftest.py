"""Shared by the CLI tests that talk to a model: a ``server`` fixture running the scripted
chat-completions server of :mod:`support.chat_server` on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.chat_server import ChatServer


@pytest.fixture
def server() -> Iterator[ChatServer]:
    s = ChatServer()
    s.start()
    yield s
    s.stop()
