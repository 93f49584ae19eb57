"""Fixtures of the service tests (helpers live in service_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service_helpers import ThreadServer


@pytest.fixture
def thread_servers() -> Iterator[list[ThreadServer]]:
    """Collects thread servers started by a test and stops them afterwards."""
    started: list[ThreadServer] = []
    yield started
    for s in reversed(started):
        s.stop()
