"""Fixtures for the chat model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.chat_server import ChatServer


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
