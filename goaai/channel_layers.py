"""The channel layers goaai runs on: the in-memory layer of the embedded default,
with upkeep that does not grow with its subscribers, and the Redis pub/sub layer
that ``REDIS_URL`` selects, which committing threads can publish to directly.

channels' own ``InMemoryChannelLayer`` scans every channel's queue for expired
messages on every ``receive`` and every ``group_send``, copies each message once per
member of the group, and sends to each member through a task of its own. With one
session followed by 500 sockets, each message to it cost 500 scans of 500 queues,
500 deep copies and 500 tasks: events reached the last sockets seconds late.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from copy import deepcopy
from typing import Any

import redis
from channels import layers
from channels_redis import pubsub
from channels_redis.utils import _consistent_hash, _wrap_close, decode_hosts

from goaai.live_frames import (
    SUBSCRIBERS_PER_FRAME,
    DeltaCoalescer,
    frame_seconds,
    is_delta,
    with_delta_frame,
)

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


# A direct publish never waits for Redis longer than this to take its bytes (a
# healthy connection takes them at once: they go to the socket's buffer); opening the
# connection and its handshake, done off the committing threads, give up after
# CONNECT_SECONDS.
SEND_SECONDS = 0.05
CONNECT_SECONDS = 1.0
# A connection written to no more recently than this is checked before the next
# write (a Redis server may close idle clients).
IDLE_SECONDS = 1.0
PUBLISHING_CLIENT_NAME = "goaai-publish"
# How long a new publishing connection waits for a refusal of CLIENT REPLY OFF.
REFUSAL_SECONDS = 0.25


class RedisPubSubChannelLayer(pubsub.RedisPubSubChannelLayer):  # type: ignore[misc]
    """channels_redis' pub/sub layer, which a process's committing threads can also
    publish to directly (:meth:`publish_now`): no event loop, no thread hop, no wait
    for Redis's answer.

    channels_redis publishes from an event loop and waits for each PUBLISH's reply.
    A run commits its steps in a worker thread, so each message crossed to a loop
    (the server's, or a thread's own in a Celery worker) before it was published:
    about as long again as the publish itself. Here each shard has one more
    connection, opened off the committing threads (:meth:`open_for_publishing`),
    that asked Redis to send it no replies (``CLIENT REPLY OFF``): a publish writes
    the same PUBLISH channels_redis would (the group's channel, the layer's
    serializer) and returns. A write that fails closes the connection and raises;
    goaai's publisher then sends the message through channels_redis' own path
    while its thread opens the connection again (sessions_app.publisher).
    """

    def __init__(self, hosts: Any = None, prefix: str = "asgi", **kwargs: Any) -> None:
        super().__init__(hosts=hosts, prefix=prefix, **kwargs)
        self.publish_prefix = prefix
        self.publish_hosts = decode_hosts(hosts)
        # Shard index -> (its open connection, when it was last written to), in the
        # process that opened them (a forked Celery child opens its own).
        self._publishing: dict[int, tuple[Any, float]] = {}
        self._publishing_pid = os.getpid()
        self._publishing_lock = threading.Lock()

    def publishes_now(self) -> bool:
        """Whether :meth:`publish_now` can reach this layer's servers (a Sentinel
        configuration cannot: its master is found through the sentinels)."""
        return all("master_name" not in host for host in self.publish_hosts)

    def group_channel(self, group: str) -> tuple[str, int]:
        """The Redis channel of ``group``'s messages and the index of its shard, as
        channels_redis' pub/sub layer names and places them."""
        channel = f"{self.publish_prefix}__group__{group}"
        return channel, _consistent_hash(channel, len(self.publish_hosts))

    def publishing_open(self) -> bool:
        """Whether every shard has a connection to publish on, in this process."""
        with self._publishing_lock:
            return self._publishing_pid == os.getpid() and len(self._publishing) == len(
                self.publish_hosts
            )

    def open_for_publishing(self) -> None:
        """Open the connections :meth:`publish_now` writes to (blocking: for a thread
        that may wait). Raises what connecting raised."""
        with self._publishing_lock:
            if self._publishing_pid != os.getpid():
                self._publishing = {}  # the parent's, in a forked child
                self._publishing_pid = os.getpid()
            missing = [i for i in range(len(self.publish_hosts)) if i not in self._publishing]
        for index in missing:
            connection = _connection(self.publish_hosts[index])
            connection.connect()
            connection.send_command("CLIENT", "REPLY", "OFF")
            # Nothing comes back unless Redis refused (an ACL without CLIENT).
            if connection.can_read(timeout=REFUSAL_SECONDS):
                try:
                    answer = connection.read_response()
                finally:
                    connection.disconnect()
                raise redis.ResponseError(f"CLIENT REPLY OFF was answered: {answer!r}")
            # The handshake may wait for a distant server; a write may not.
            sock = getattr(connection, "_sock", None)
            if sock is not None:
                sock.settimeout(SEND_SECONDS)
            with self._publishing_lock:
                self._publishing[index] = (connection, time.monotonic())

    def publish_now(self, group: str, message: dict[str, Any]) -> bool:
        """``group_send`` from any thread, without waiting for Redis's answer. False
        when the shard's connection is not open (:meth:`open_for_publishing`); raises
        ``redis.RedisError`` when writing to it failed, and the connection is closed."""
        channel, index = self.group_channel(group)
        payload = self.serialize(message)
        with self._publishing_lock:
            opened = self._publishing.get(index) if self._publishing_pid == os.getpid() else None
            if opened is None:
                return False
            connection, written = opened
            now = time.monotonic()
            try:
                # Data to read on a connection Redis sends nothing to: it closed it.
                if now - written > IDLE_SECONDS and connection.can_read(timeout=0):
                    raise redis.ConnectionError("Redis closed the connection")
                connection.send_packed_command(
                    connection.pack_command("PUBLISH", channel, payload), check_health=False
                )
            except redis.RedisError:
                del self._publishing[index]
                connection.disconnect()
                raise
            self._publishing[index] = (connection, now)
        return True

    def _get_layer(self) -> _LoopLayer:
        # channels_redis' own, with a layer of goaai's for each event loop.
        loop = asyncio.get_running_loop()
        layer = self._layers.get(loop)
        if layer is None:
            layer = self._layers[loop] = _LoopLayer(*self._args, **self._kwargs, channel_layer=self)
            _wrap_close(self, loop)
        return layer  # type: ignore[no-any-return]

    def deserialize(self, message: Any) -> Any:
        # A group's message is decoded once for this process's members (_LoopLayer).
        if type(message) is _Decoded:
            return message.value
        return super().deserialize(message)

    def receive_ready(self, channel: str) -> list[dict[str, Any]]:
        """The messages waiting in ``channel``'s queue on this loop, taken at once,
        oldest first (see goaai's in-memory layer)."""
        return self._get_layer().receive_ready(channel)

    def close_for_publishing(self) -> None:
        with self._publishing_lock:
            opened, self._publishing = self._publishing, {}
        for connection, _ in opened.values():
            connection.disconnect()


def _connection(host: dict[str, Any]) -> Any:
    # A connection of its own to one shard, configured as channels_redis configures
    # its pool for that host (see channels_redis.utils.create_pool).
    options = {k: v for k, v in host.items() if k != "address"}
    options |= {
        "socket_timeout": CONNECT_SECONDS,
        "socket_connect_timeout": CONNECT_SECONDS,
        # Named for whoever lists Redis's clients.
        "client_name": PUBLISHING_CLIENT_NAME,
    }
    if "address" in host:
        pool = redis.ConnectionPool.from_url(host["address"], **options)
    else:
        pool = redis.ConnectionPool(**options)
    return pool.make_connection()


class _Decoded:
    """A group message as this process's members of the group get it: decoded once
    for all of them, and read-only (as with goaai's in-memory layer)."""

    __slots__ = ("value",)

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value


class _LoopLayer(pubsub.RedisPubSubLoopLayer):  # type: ignore[misc]
    """channels_redis' layer of one event loop, which hands a group's message to
    this process's members of the group decoded once for all of them (channels_redis
    decodes it again for each), and joins the pieces of streamed text that reach a
    group of more members than a frame is for (:data:`SUBSCRIBERS_PER_FRAME`) into
    frames as long as the in-memory layer's publisher makes them: the server that
    publishes a piece does not know how many sockets of other servers follow it, the
    one that writes it to them does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shards: list[Any] = [_Shard(shard.host, self) for shard in self._shards]
        self._coalescer = DeltaCoalescer(
            lambda group: frame_seconds(len(self.groups.get(group, ())))
        )

    def receive_ready(self, channel: str) -> list[dict[str, Any]]:
        queue = self.channels.get(channel)
        taken = []
        while queue is not None and not queue.empty():
            taken.append(self.channel_layer.deserialize(queue.get_nowait()))
        return taken

    def group_message(self, group: str, data: bytes) -> None:
        """Hand a message of ``group`` (its Redis channel) to this loop's members."""
        members = self.groups.get(group)
        if not members:
            return
        message = self.channel_layer.deserialize(data)
        if len(members) <= SUBSCRIBERS_PER_FRAME and not self._coalescer.holds(group):
            self._put(group, message)
            return
        items, opened = self._coalescer.take(group, message, time.monotonic())
        if opened is not None:
            asyncio.get_running_loop().call_later(opened, self._frame_ended)
        for item in items:
            # A piece that was held may have had others joined to it: its frame is
            # encoded again.
            self._put(
                group, item if item is message or not is_delta(item) else with_delta_frame(item)
            )

    def _frame_ended(self) -> None:
        for group, piece, interval in self._coalescer.due(time.monotonic()):
            if group in self.groups:
                self._put(group, with_delta_frame(piece))
                asyncio.get_running_loop().call_later(interval, self._frame_ended)

    def _put(self, group: str, message: dict[str, Any]) -> None:
        shared = _Decoded(message)
        for channel in self.groups.get(group, ()):
            queue = self.channels.get(channel)
            if queue is not None:
                queue.put_nowait(shared)


class _Shard(pubsub.RedisSingleShardConnection):  # type: ignore[misc]
    def _receive_message(self, message: dict[str, Any] | None) -> None:
        if message is None:
            return
        name = message["channel"]
        if isinstance(name, bytes):
            name = name.decode()
        if name in self.channel_layer.groups:
            self.channel_layer.group_message(name, message["data"])
        else:
            super()._receive_message(message)
