import pytest

import gputape.core.state
import gputape.core.tape


@pytest.fixture(autouse=True)
def _no_leaked_tapes():
    """Every test must leave this thread's observer stack (tapes, paused tapes, watchers,
    traces, debug modes) and device scope as it found them: a leak would slow down every
    later op, or change what it does."""
    tls = gputape.core.state.tls
    obs, dev = tls.obs, tls.device
    yield
    assert tls.obs is obs
    assert tls.device == dev or dev is None  # (None: the default device, resolved on first use)


@pytest.fixture
def fresh_warnings():
    """gputape warns once per process per dtype key; forget what was already warned."""
    saved = set(gputape.core.tape._warned)
    gputape.core.tape._warned.clear()
    yield
    gputape.core.tape._warned.clear()
    gputape.core.tape._warned.update(saved)


def pytest_collection_modifyitems(config, items):
    """Tests marked ``gpu`` skip, saying why (no cupy / no driver / no device), without a working GPU."""
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    from gputape.devices import backend

    why = backend.cuda_unavailable_reason(0)
    if why is not None:
        skip = pytest.mark.skip(reason=f"needs a CUDA GPU: {why}")
        for item in gpu_items:
            item.add_marker(skip)
