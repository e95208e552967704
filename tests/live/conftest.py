"""What the live-update tests share."""

from __future__ import annotations

import pytest
from channels.layers import InMemoryChannelLayer, get_channel_layer

from goaai.runtime import rt
from sessions_app.publisher import publisher


@pytest.fixture
def runtime():
    """Runs on worker threads, so that this test's event loop receives meanwhile."""
    rt.reset()
    rt.configure(executor="thread")
    yield rt
    rt.reset()  # waits for the runs still going
    publisher.drain()
    # The in-memory layer outlives the test; its groups must not reach the next one.
    layer = get_channel_layer()
    if isinstance(layer, InMemoryChannelLayer):
        layer.channels.clear()
        layer.groups.clear()
