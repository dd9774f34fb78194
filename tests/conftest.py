import pytest

import gputape.tape


@pytest.fixture
def fresh_warnings():
    """gputape warns once per process per dtype key; forget what was already warned."""
    saved = set(gputape.tape._warned)
    gputape.tape._warned.clear()
    yield
    gputape.tape._warned.clear()
    gputape.tape._warned.update(saved)
