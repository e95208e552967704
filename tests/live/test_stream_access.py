"""Who may keep a live stream open, over WebSocket and Server-Sent Events.

A stream is opened only from this site's own origin (scheme, host and port) or a
trusted one; it closes (4401 on a WebSocket, an ``error`` frame that ends an SSE
stream) once the credentials it was opened with stop giving access: the browser
session signs out, the account is deactivated, or its owner loses the staff status
or permission that let it read someone else's session. A session's streams close
with 4404 when the session is deleted, however it is deleted.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any
from uuid import UUID

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group, Permission
from django.test import Client
from django.utils import timezone

from goaai.asgi import application
from goaai.runtime import rt
from runs_app.sessions import session_end, sessions_purge
from sessions_app.models import Session
from sessions_app.publisher import publisher, session_group
from sessions_app.services import api_token_create, session_delete
from tests.factories import UserFactory
from tests.integration.celery_support import RedisServer
from tests.live.test_sse import Stream, events_path

TIMEOUT = 5
LIST_PATH = "/ws/sessions/"
SSE_LIST_PATH = "/api/v1/sessions/stream/"

Headers = list[tuple[bytes, bytes]]
OpenSocket = Callable[..., Awaitable[WebsocketCommunicator]]
OpenStream = Callable[..., Awaitable[tuple[Stream, int]]]


# Fixtures


@pytest.fixture
async def open_socket(runtime) -> AsyncIterator[OpenSocket]:
    """Connects sockets, and disconnects them all when the test ends."""
    opened: list[WebsocketCommunicator] = []

    async def connect(
        path: str, headers: Headers | None = None, scheme: str | None = None
    ) -> WebsocketCommunicator:
        socket = WebsocketCommunicator(application, path, headers=headers or [])
        if scheme is not None:
            socket.scope["scheme"] = scheme
        opened.append(socket)
        connected, _ = await socket.connect(timeout=TIMEOUT)
        assert connected
        return socket

    yield connect
    for socket in opened:
        if not socket.future.done():
            await socket.disconnect(timeout=TIMEOUT)


@pytest.fixture
async def open_stream(runtime) -> AsyncIterator[OpenStream]:
    """Sends SSE requests, and makes sure every client is gone when the test ends."""
    opened: list[Stream] = []

    async def open_(path: str, headers: Headers | None = None) -> tuple[Stream, int]:
        stream = Stream(path, headers=headers)
        opened.append(stream)
        status, _ = await stream.open()
        return stream, status

    yield open_
    for stream in opened:
        if stream.task is not None and not stream.task.done():
            await stream.close()


@pytest.fixture
def session(runtime, owner) -> UUID:
    """Alice's session, with its one ``session.created`` event."""
    return rt.create_session(owner=owner).id


@pytest.fixture
def reader(db) -> Any:
    """Dave: an operator (staff, not superuser) who reads everyone's sessions
    through a group's permissions."""
    user = UserFactory(username="dave", is_staff=True)
    group = Group.objects.create(name="session readers")
    group.permissions.add(*_read_permissions())
    user.groups.add(group)
    return user


def _read_permissions() -> list[Permission]:
    return list(
        Permission.objects.filter(
            content_type__app_label="sessions_app", codename__in=["view_session", "view_runevent"]
        )
    )


# Helpers


def socket_path(session_id: UUID) -> str:
    return f"/ws/sessions/{session_id}/"


@database_sync_to_async
def token_of(user: Any) -> Headers:
    _, raw = api_token_create(user_id=user.pk, name="access tests")
    return [(b"authorization", f"Bearer {raw}".encode())]


def signed_in(user: Any) -> tuple[Client, Headers]:
    """A browser signed in as ``user``, and the cookie header its requests carry."""
    client = Client()
    client.force_login(user)
    return client, [(b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())]


async def browser(user: Any) -> tuple[Client, Headers]:
    return await sync_to_async(signed_in)(user)


def site(origin: str, host: str) -> Headers:
    return [(b"origin", origin.encode()), (b"host", host.encode())]


async def caught_up(socket: WebsocketCommunicator) -> None:
    while (await socket.receive_json_from(timeout=TIMEOUT))["type"] != "caught_up":
        pass


async def ready(socket: WebsocketCommunicator) -> None:
    assert await socket.receive_json_from(timeout=TIMEOUT) == {"type": "ready"}


async def closed_with(socket: WebsocketCommunicator) -> int:
    message = await socket.receive_output(timeout=TIMEOUT)
    assert message["type"] == "websocket.close", message
    return message["code"]


async def ended_with(socket: WebsocketCommunicator, code: str) -> int:
    """The error frame naming why the socket closes, then its close code."""
    frame = await socket.receive_json_from(timeout=TIMEOUT)
    assert (frame["type"], frame["code"]) == ("error", code), frame
    assert frame["detail"]
    return await closed_with(socket)


async def still_usable(socket: WebsocketCommunicator) -> None:
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=TIMEOUT) == {"type": "pong"}


async def sse_ended_with(stream: Stream, code: str) -> None:
    """The stream's ``error`` frame naming why, and then the end of the response."""
    while True:
        frame = await stream.frame()
        if frame.get("event") == "error":
            break
        assert frame.get("event") in {None, "caught_up", "ready"}, frame
    assert frame["data"]["code"] == code, frame
    while not stream.ended:
        assert await stream.chunk() == ""


async def sse_open(stream: Stream, ready_event: str = "caught_up") -> None:
    while (await stream.frame()).get("event") != ready_event:
        pass


def save(user: Any, **changes: Any) -> None:
    for name, value in changes.items():
        setattr(user, name, value)
    user.save()


# A. The origin: scheme, host and port, exactly


@pytest.mark.django_db(transaction=True)
async def test_a_page_on_another_port_or_scheme_of_the_same_host_is_refused(
    open_socket, session, owner
):
    _, cookie = await browser(owner)
    host = "localhost:8000"

    for origin in (
        "http://localhost:9000",
        "http://localhost",
        "https://localhost:8000",
        "http://127.0.0.1:8000",
        "http://localhost:8000.evil.example",
        "null",
    ):
        for path in (socket_path(session), LIST_PATH):
            socket = await open_socket(path, [*cookie, *site(origin, host)])
            assert await closed_with(socket) == 4403, (origin, path)
    # Nobody joined anything: no events reached a refused socket.
    assert session_group(session) not in get_channel_layer().groups

    own = await open_socket(socket_path(session), [*cookie, *site("http://localhost:8000", host)])
    await caught_up(own)
    listing = await open_socket(LIST_PATH, [*cookie, *site("http://localhost:8000", host)])
    await ready(listing)


@pytest.mark.django_db(transaction=True)
async def test_any_host_allowed_still_means_only_this_site_s_origin(
    open_socket, session, owner, settings
):
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["*"]
    _, cookie = await browser(owner)
    here = "goaai.example"

    for origin, scheme in (
        ("https://evil.example", "wss"),
        ("http://goaai.example", "wss"),
        ("https://goaai.example", "ws"),
        ("https://goaai.example:8443", "wss"),
    ):
        socket = await open_socket(socket_path(session), [*cookie, *site(origin, here)], scheme)
        assert await closed_with(socket) == 4403, (origin, scheme)

    socket = await open_socket(
        socket_path(session), [*cookie, *site("https://goaai.example", here)], "wss"
    )
    await caught_up(socket)


@pytest.mark.django_db(transaction=True)
async def test_behind_a_tls_proxy_the_scheme_comes_from_its_header(
    open_socket, session, owner, settings
):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    _, cookie = await browser(owner)
    proxied = [*cookie, (b"x-forwarded-proto", b"https")]

    refused = await open_socket(
        socket_path(session), [*proxied, *site("http://localhost", "localhost")], "ws"
    )
    assert await closed_with(refused) == 4403
    plain = await open_socket(
        socket_path(session), [*cookie, *site("https://localhost", "localhost")], "ws"
    )
    assert await closed_with(plain) == 4403

    socket = await open_socket(
        socket_path(session), [*proxied, *site("https://localhost", "localhost")], "ws"
    )
    await caught_up(socket)


@pytest.mark.django_db(transaction=True)
async def test_trusted_origins_match_as_django_s_csrf_check_matches_them(
    open_socket, session, owner, settings
):
    settings.CSRF_TRUSTED_ORIGINS = ["https://app.example", "https://*.trusted.example"]
    _, cookie = await browser(owner)
    here = "localhost:8000"

    for origin in ("https://app.example", "https://a.trusted.example", "https://trusted.example"):
        socket = await open_socket(socket_path(session), [*cookie, *site(origin, here)])
        await caught_up(socket)
    for origin in (
        "http://app.example",
        "https://app.example:8443",
        "https://other.app.example",
        "http://a.trusted.example",
        "https://eviltrusted.example",
    ):
        socket = await open_socket(socket_path(session), [*cookie, *site(origin, here)])
        assert await closed_with(socket) == 4403, origin


@pytest.mark.django_db(transaction=True)
async def test_a_host_this_site_does_not_serve_is_refused(open_socket, session, owner):
    # A rebound DNS name: the page's origin and the Host agree, but the host is not ours.
    _, cookie = await browser(owner)

    socket = await open_socket(
        socket_path(session), [*cookie, *site("http://evil.example", "evil.example")]
    )

    assert await closed_with(socket) == 4403


@pytest.mark.django_db(transaction=True)
async def test_clients_that_send_no_origin_are_judged_by_their_credentials(
    open_socket, session, owner, other_user
):
    socket = await open_socket(socket_path(session), await token_of(owner))
    await caught_up(socket)
    bobs = await open_socket(socket_path(session), await token_of(other_user))
    assert await closed_with(bobs) == 4404


@pytest.mark.django_db(transaction=True)
async def test_sse_from_another_origin_is_refused_and_from_this_one_served(
    open_stream, session, owner
):
    _, cookie = await browser(owner)

    for origin in ("http://evil.example", "http://localhost:8000", "https://localhost"):
        for path in (events_path(session), SSE_LIST_PATH):
            stream, status = await open_stream(path, [*cookie, (b"origin", origin.encode())])
            assert status == 403, (origin, path)
            body = await stream.body()
            assert '"code":"origin_not_allowed"' in body.replace(" ", ""), body
    assert session_group(session) not in get_channel_layer().groups

    # Requests come over http with "Host: localhost" (see Stream).
    same_site = await open_stream(events_path(session), [*cookie, (b"origin", b"http://localhost")])
    no_origin = await open_stream(events_path(session), cookie)
    for stream, status in (same_site, no_origin):
        assert status == 200
        await sse_open(stream)


# B. Streams close when their credentials stop giving access


@pytest.mark.django_db(transaction=True)
async def test_signing_out_closes_that_browser_s_streams_only(
    open_socket, open_stream, session, owner
):
    client, cookie = await browser(owner)
    _, other_cookie = await browser(owner)
    watching = await open_socket(socket_path(session), cookie)
    listing = await open_socket(LIST_PATH, cookie)
    elsewhere = await open_socket(socket_path(session), other_cookie)
    by_token = await open_socket(socket_path(session), await token_of(owner))
    stream, _ = await open_stream(events_path(session), cookie)
    for socket in (watching, elsewhere, by_token):
        await caught_up(socket)
    await ready(listing)
    await sse_open(stream)

    response = await sync_to_async(client.post)("/accounts/logout/")
    assert response.status_code == 302

    assert await ended_with(watching, "signed_out") == 4401
    assert await ended_with(listing, "signed_out") == 4401
    await sse_ended_with(stream, "signed_out")
    await still_usable(elsewhere)
    await still_usable(by_token)


@pytest.mark.django_db(transaction=True)
async def test_deactivating_a_user_closes_every_stream_of_theirs(
    open_socket, open_stream, session, owner
):
    _, cookie = await browser(owner)
    token = await token_of(owner)
    sockets = [
        await open_socket(socket_path(session), cookie),
        await open_socket(socket_path(session), token),
    ]
    listing = await open_socket(LIST_PATH, token)
    streams = [
        (await open_stream(events_path(session), token))[0],
        (await open_stream(SSE_LIST_PATH, cookie))[0],
    ]
    for socket in sockets:
        await caught_up(socket)
    await ready(listing)
    await sse_open(streams[0])
    await sse_open(streams[1], "ready")

    await database_sync_to_async(save)(owner, is_active=False)

    for socket in (*sockets, listing):
        assert await ended_with(socket, "access_revoked") == 4401
    for stream in streams:
        await sse_ended_with(stream, "access_revoked")


@pytest.mark.django_db(transaction=True)
async def test_an_unrelated_change_to_the_user_leaves_their_streams_open(
    open_socket, session, owner
):
    _, cookie = await browser(owner)
    socket = await open_socket(socket_path(session), cookie)
    await caught_up(socket)

    await database_sync_to_async(save)(owner, first_name="Alice")
    await database_sync_to_async(save)(owner, last_login=timezone.now())

    await still_usable(socket)
    assert await socket.receive_nothing(0.1)


@pytest.mark.django_db(transaction=True)
async def test_a_password_change_closes_the_streams_of_other_browser_sessions(
    open_socket, session, owner
):
    _, cookie = await browser(owner)
    by_cookie = await open_socket(socket_path(session), cookie)
    by_token = await open_socket(socket_path(session), await token_of(owner))
    await caught_up(by_cookie)
    await caught_up(by_token)

    await database_sync_to_async(lambda: (owner.set_password("a new one, long"), owner.save()))()

    assert await ended_with(by_cookie, "access_revoked") == 4401
    await still_usable(by_token)


@pytest.mark.django_db(transaction=True)
async def test_a_demoted_operator_s_streams_of_other_users_sessions_close(
    open_socket, open_stream, session, staff
):
    own_session = await database_sync_to_async(lambda: rt.create_session(owner=staff).id)()
    token = await token_of(staff)
    _, cookie = await browser(staff)
    others = [
        await open_socket(socket_path(session), token),
        await open_socket(socket_path(session), cookie),
    ]
    own = await open_socket(socket_path(own_session), token)
    listing = await open_socket(LIST_PATH, token)
    stream, _ = await open_stream(events_path(session), token)
    for socket in (*others, own):
        await caught_up(socket)
    await ready(listing)
    await sse_open(stream)

    await database_sync_to_async(save)(staff, is_staff=False, is_superuser=False)

    for socket in others:
        assert await ended_with(socket, "access_revoked") == 4401
    await sse_ended_with(stream, "access_revoked")
    await still_usable(own)
    await still_usable(listing)


async def _watching(open_socket, session: UUID, user: Any) -> WebsocketCommunicator:
    socket = await open_socket(socket_path(session), await token_of(user))
    await caught_up(socket)
    return socket


@pytest.mark.django_db(transaction=True)
async def test_losing_a_permission_the_stream_relied_on_closes_it(
    open_socket, open_stream, session, reader
):
    group = await database_sync_to_async(lambda: reader.groups.get())()
    view_runevent = await database_sync_to_async(
        lambda: Permission.objects.get(codename="view_runevent")
    )()

    # Out of the group.
    socket = await _watching(open_socket, session, reader)
    stream, _ = await open_stream(events_path(session), await token_of(reader))
    await sse_open(stream)
    await database_sync_to_async(reader.groups.remove)(group)
    assert await ended_with(socket, "access_revoked") == 4401
    await sse_ended_with(stream, "access_revoked")

    # The group loses the permission.
    await database_sync_to_async(reader.groups.add)(group)
    socket = await _watching(open_socket, session, reader)
    await database_sync_to_async(group.permissions.remove)(view_runevent)
    assert await ended_with(socket, "access_revoked") == 4401

    # A permission of the user's own, taken away from the permission's side.
    await database_sync_to_async(lambda: reader.user_permissions.add(*_read_permissions()))()
    socket = await _watching(open_socket, session, reader)
    await database_sync_to_async(view_runevent.user_set.remove)(reader)
    assert await ended_with(socket, "access_revoked") == 4401

    # Permissions count for operators only: no longer staff, the group's are moot.
    await database_sync_to_async(lambda: group.permissions.set(_read_permissions()))()
    socket = await _watching(open_socket, session, reader)
    await database_sync_to_async(save)(reader, is_staff=False)
    assert await ended_with(socket, "access_revoked") == 4401


@pytest.mark.django_db(transaction=True)
async def test_clearing_or_deleting_the_group_closes_its_members_streams(
    open_socket, session, reader
):
    group = await database_sync_to_async(lambda: reader.groups.get())()

    socket = await _watching(open_socket, session, reader)
    await database_sync_to_async(group.user_set.clear)()
    assert await ended_with(socket, "access_revoked") == 4401

    await database_sync_to_async(reader.groups.add)(group)
    socket = await _watching(open_socket, session, reader)
    await database_sync_to_async(group.permissions.clear)()
    assert await ended_with(socket, "access_revoked") == 4401

    await database_sync_to_async(lambda: group.permissions.set(_read_permissions()))()
    socket = await _watching(open_socket, session, reader)
    await database_sync_to_async(group.delete)()
    assert await ended_with(socket, "access_revoked") == 4401


@pytest.mark.django_db(transaction=True)
async def test_a_permission_that_stays_leaves_the_stream_open(
    open_socket, session, reader, other_user
):
    socket = await _watching(open_socket, session, reader)
    spare = await database_sync_to_async(lambda: Group.objects.create(name="spare"))()
    await database_sync_to_async(reader.groups.add)(spare)
    await database_sync_to_async(reader.groups.remove)(spare)
    # Someone else's group membership changes nothing here.
    group = await database_sync_to_async(lambda: reader.groups.get())()
    await database_sync_to_async(other_user.groups.add)(group)
    await database_sync_to_async(other_user.groups.remove)(group)

    await still_usable(socket)
    assert await socket.receive_nothing(0.1)


# B. A deleted session's streams close with 4404


@pytest.mark.django_db(transaction=True)
async def test_deleting_a_session_closes_its_streams_with_4404(
    open_socket, open_stream, session, owner, staff
):
    mine = await open_socket(socket_path(session), await token_of(owner))
    operators = await open_socket(socket_path(session), await token_of(staff))
    listing = await open_socket(LIST_PATH, await token_of(owner))
    stream, _ = await open_stream(events_path(session), await token_of(owner))
    for socket in (mine, operators):
        await caught_up(socket)
    await ready(listing)
    await sse_open(stream)

    await database_sync_to_async(session_delete)(session_id=session)

    for socket in (mine, operators):
        assert await ended_with(socket, "session_deleted") == 4404
    await sse_ended_with(stream, "session_deleted")
    # The session list hears of it and stays open.
    frame = await listing.receive_json_from(timeout=TIMEOUT)
    assert frame["event"]["type"] == "session.deleted"
    await still_usable(listing)


@pytest.mark.django_db(transaction=True)
async def test_deleting_a_session_in_the_admin_closes_its_streams(open_socket, session, staff):
    socket = await _watching(open_socket, session, staff)
    admin, _ = await browser(staff)

    response = await sync_to_async(admin.post)(
        f"/admin/sessions_app/session/{session}/delete/", {"post": "yes"}
    )

    assert response.status_code == 302, response.content
    assert await ended_with(socket, "session_deleted") == 4404


@pytest.mark.django_db(transaction=True)
async def test_deleting_the_owner_closes_their_sessions_streams(open_socket, session, owner, staff):
    socket = await _watching(open_socket, session, staff)

    await database_sync_to_async(owner.delete)()

    assert await ended_with(socket, "session_deleted") == 4404


@pytest.mark.django_db(transaction=True)
async def test_purging_an_old_session_closes_its_streams(open_socket, session, owner):
    await database_sync_to_async(session_end)(session_id=session)
    socket = await _watching(open_socket, session, owner)
    kept = await database_sync_to_async(lambda: rt.create_session(owner=owner).id)()
    other = await _watching(open_socket, kept, owner)

    counts = await database_sync_to_async(sessions_purge)(
        older_than=dt.timedelta(days=1), now=timezone.now() + dt.timedelta(days=2)
    )

    assert counts["sessions"] == 1
    assert await ended_with(socket, "session_deleted") == 4404
    await still_usable(other)
    assert await database_sync_to_async(Session.objects.filter(pk=kept).exists)()


# B. The same across processes: the Redis channel layer


@pytest.fixture
def redis_layer(runtime, tmp_path, settings) -> Iterator[None]:
    """The live streams on a Redis server of the test's own, as deployments run
    them (the channel layer ``REDIS_URL`` selects). Skipped without the
    ``redis-server`` program, except in CI, where its absence fails the test."""
    program = shutil.which("redis-server")
    if program is None:
        if os.environ.get("CI") == "true":
            pytest.fail("redis-server is not installed")
        pytest.skip("needs the redis-server program")
    server = RedisServer(program, tmp_path)
    server.start()
    before = settings.CHANNEL_LAYERS
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "goaai.channel_layers.RedisPubSubChannelLayer",
            "CONFIG": {"hosts": [server.url]},
        }
    }
    try:
        yield
    finally:
        publisher.drain()
        settings.CHANNEL_LAYERS = before
        server.stop()


@pytest.mark.django_db(transaction=True)
async def test_over_redis_streams_close_on_deactivation_and_deletion(
    redis_layer, open_socket, open_stream, session, owner, staff
):
    assert type(get_channel_layer()).__name__ == "RedisPubSubChannelLayer"
    operators = await _watching(open_socket, session, staff)
    _, cookie = await browser(owner)
    listing = await open_socket(LIST_PATH, cookie)
    await ready(listing)
    stream, _ = await open_stream(events_path(session), await token_of(owner))
    await sse_open(stream)

    await database_sync_to_async(session_delete)(session_id=session)

    assert await ended_with(operators, "session_deleted") == 4404
    await sse_ended_with(stream, "session_deleted")
    frame = await listing.receive_json_from(timeout=TIMEOUT)
    assert frame["event"]["type"] == "session.deleted"

    await database_sync_to_async(save)(owner, is_active=False)

    assert await ended_with(listing, "access_revoked") == 4401


# C. A frame nested too deep is an error frame, not a crash


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("depth", [325, 2000, 8000])
async def test_a_deeply_nested_frame_is_invalid_json_and_the_socket_stays(
    open_socket, session, owner, depth
):
    socket = await _watching(open_socket, session, owner)
    listing = await open_socket(LIST_PATH, await token_of(owner))
    await ready(listing)

    for target in (socket, listing):
        for frame in (
            "[" * depth + "]" * depth,
            '{"type":"ping","x":' + "[" * depth + "]" * depth + "}",
        ):
            await target.send_to(text_data=frame)
            answer = await target.receive_json_from(timeout=TIMEOUT)
            assert (answer["type"], answer["code"]) == ("error", "invalid_json"), answer
            assert "nested" in answer["detail"]
            await still_usable(target)
