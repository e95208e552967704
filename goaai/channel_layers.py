"""The in-memory channel layer of the embedded default, with upkeep that does not
grow with its subscribers.

channels' own ``InMemoryChannelLayer`` scans every channel's queue for expired
messages on every ``receive`` and every ``group_send``, copies each message once per
member of the group, and sends to each member through a task of its own. With one
session followed by 500 sockets, each message to it cost 500 scans of 500 queues,
500 deep copies and 500 tasks: events reached the last sockets seconds late.
"""

from __future__ import annotations

import asyncio
import time
from copy import deepcopy
from typing import Any

from channels import layers

# How often, at most, expired messages and group memberships are looked for. A
# message lives for ``expiry`` (60 s by default): finding it a second late is fine.
UPKEEP_SECONDS = 1.0


class InMemoryChannelLayer(layers.InMemoryChannelLayer):  # type: ignore[misc]
    """channels' in-memory layer, with expiry looked for at most once a second, one
    copy of a group message shared by all its members, and a channel's queue kept
    while someone receives from it (channels' drops it each time it is emptied and
    makes a new one for the next message: two queues per message and subscriber).

    Receivers treat a message as read-only (goaai's consumers and streams do): a
    group's members are handed the same copy, taken when it is sent, so that the
    sender's later changes reach none of them.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._upkept = float("-inf")
        # Channels with a receive waiting, and how many.
        self._receiving: dict[str, int] = {}

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._upkept < UPKEEP_SECONDS:
            return
        self._upkept = now
        super()._clean_expired()
        # An empty queue nobody waits on belongs to a consumer that has gone (or is
        # handling a message, and gets a new queue from its next receive).
        for channel, queue in list(self.channels.items()):
            if queue.empty() and channel not in self._receiving:
                del self.channels[channel]

    async def receive(self, channel: str) -> dict[str, Any]:
        self.require_valid_channel_name(channel)
        self._clean_expired()
        queue = self.channels.get(channel)
        if queue is None:
            queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
        self._receiving[channel] = self._receiving.get(channel, 0) + 1
        try:
            item: tuple[float, dict[str, Any]] = await queue.get()
        finally:
            if self._receiving[channel] == 1:
                del self._receiving[channel]
            else:
                self._receiving[channel] -= 1
        return item[1]

    def receive_ready(self, channel: str) -> list[dict[str, Any]]:
        """The messages waiting in ``channel``'s queue, taken at once, oldest first
        (none if it has none): a subscriber that fell behind while the server was
        busy sends what it finds together (see sessions_app.consumers)."""
        queue = self.channels.get(channel)
        taken: list[dict[str, Any]] = []
        while queue is not None and not queue.empty():
            taken.append(queue.get_nowait()[1])
        return taken

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.group_send_now(group, message)

    def group_send_now(self, group: str, message: dict[str, Any], *, copy: bool = True) -> None:
        """``group_send``, done at once on the layer's loop (it never waits: a full
        channel misses the message). ``copy=False`` when the caller hands the message
        over and never changes it again (goaai's publisher, which builds each one
        for the send): its members then get it without a deep copy."""
        if not isinstance(message, dict):
            raise TypeError("A channel-layer message is a dict.")
        self.require_valid_group_name(group)
        self._clean_expired()
        members = self.groups.get(group)
        if not members:
            return
        shared = (time.time() + self.expiry, deepcopy(message) if copy else message)
        for channel in list(members):
            queue = self.channels.get(channel)
            if queue is None:
                queue = self.channels[channel] = asyncio.Queue(maxsize=self.get_capacity(channel))
            # A full channel misses the message, as with channels' own layer: its
            # subscriber finds the gap by sequence number and reads the database.
            if not queue.full():
                queue.put_nowait(shared)
