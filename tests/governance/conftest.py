import pytest
from governance_helpers import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()
