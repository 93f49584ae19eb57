"""Fixtures for the chat model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from chat_completions_server import ChatServer


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def chat_server() -> Iterator[ChatServer]:
    server = ChatServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()
