"""Private destinations are refused unless allowed; the checked address is the one
connected to."""

from __future__ import annotations

import pytest

from sessions_app.webhooks import addresses, services
from sessions_app.webhooks.addresses import AllowList, RefusedUrl, check_url
from sessions_app.webhooks.delivery import deliver_due

NONE = AllowList()


def _resolving(monkeypatch, table: dict[str, list[str]]) -> None:
    """Names resolve as ``table`` says (no test can make real DNS answer 10.x)."""
    real = addresses.resolve
    monkeypatch.setattr(
        addresses, "resolve", lambda host, port: table[host] if host in table else real(host, port)
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://localhost:8000/hook",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://100.64.0.1/hook",
        "http://0.0.0.0/hook",
        "http://224.0.0.1/hook",
    ],
)
def test_private_loopback_and_special_addresses_are_refused(url):
    with pytest.raises(RefusedUrl, match="not a public address"):
        check_url(url, NONE)


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1: the translator delivers it to loopback
        "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
        "64:ff9b:1::a9fe:a9fe",  # a local-use NAT64 prefix (RFC 8215)
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo, client 10.0.0.1
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::a00:1",  # IPv4-compatible 10.0.0.1
    ],
)
def test_ipv6_forms_of_private_ipv4_addresses_are_refused(monkeypatch, address):
    _resolving(monkeypatch, {"tunnel.example.com": [address]})
    with pytest.raises(RefusedUrl, match="not a public address"):
        check_url("https://tunnel.example.com/hook", NONE)
    with pytest.raises(RefusedUrl, match="not a public address"):
        check_url(f"http://[{address}]/hook", NONE)


@pytest.mark.parametrize("address", ["64:ff9b::5db8:d822", "2002:5db8:d822::1"])
def test_ipv6_forms_of_public_ipv4_addresses_are_accepted(monkeypatch, address):
    _resolving(monkeypatch, {"tunnel.example.com": [address]})
    assert check_url("https://tunnel.example.com/hook", NONE).address == address


def test_an_allowed_ipv4_network_also_allows_its_ipv6_forms(monkeypatch):
    _resolving(monkeypatch, {"tunnel.example.com": ["64:ff9b::a00:7"]})
    allow = AllowList.parse(["10.0.0.0/8"])
    assert check_url("https://tunnel.example.com/hook", allow).address == "64:ff9b::a00:7"


def test_a_name_that_resolves_to_a_private_address_is_refused(monkeypatch):
    _resolving(monkeypatch, {"hooks.example.com": ["10.0.0.7"]})
    with pytest.raises(RefusedUrl, match=r"resolves to 10\.0\.0\.7"):
        check_url("https://hooks.example.com/goaai", NONE)


def test_any_private_address_among_several_refuses_the_name(monkeypatch):
    _resolving(monkeypatch, {"mixed.example.com": ["93.184.216.34", "127.0.0.1"]})
    with pytest.raises(RefusedUrl):
        check_url("https://mixed.example.com/", NONE)


def test_a_public_name_is_accepted_and_pinned_to_its_address(monkeypatch):
    _resolving(monkeypatch, {"hooks.example.com": ["93.184.216.34"]})
    target = check_url("https://hooks.example.com/in?x=1", NONE)
    assert target.address == "93.184.216.34"
    assert target.connect_url == "https://93.184.216.34:443/in?x=1"
    assert target.host_header == "hooks.example.com"


def test_the_allow_list_takes_networks_and_host_names(monkeypatch):
    _resolving(monkeypatch, {"receiver.internal": ["10.9.8.7"]})
    assert check_url("http://10.1.2.3/", AllowList.parse(["10.0.0.0/8"])).address == "10.1.2.3"
    assert check_url("http://receiver.internal/", AllowList.parse(["receiver.internal"]))
    with pytest.raises(RefusedUrl):
        check_url("http://192.168.1.1/", AllowList.parse(["10.0.0.0/8", "receiver.internal"]))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://example.com/", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("https://user:pw@example.com/", "user name or password"),
        ("https:///path", "must name a host"),
        ("https://example.com:99999/", "port"),
        ("https://exa mple.com/", "spaces"),
        ("https://no-such-host.invalid/", "cannot be resolved"),
        ("https://example.com/" + "a" * 2000, "at most 2000"),
    ],
)
def test_malformed_urls_are_refused_with_a_reason(url, reason):
    with pytest.raises(RefusedUrl, match=reason):
        check_url(url, NONE)


@pytest.mark.django_db(transaction=True)
def test_an_endpoint_for_a_private_address_is_refused_at_subscription(owner):
    with pytest.raises(services.InvalidWebhook) as refused:
        services.webhook_endpoint_create(
            owner_id=owner.pk, url="http://127.0.0.1:8000/", events=["run.completed"]
        )
    assert refused.value.field == "url"
    assert refused.value.code == "refused_url"


@pytest.mark.django_db(transaction=True)
def test_the_attempt_connects_to_the_checked_address_with_the_real_host(
    owner, receiver, monkeypatch, settings
):
    port = int(receiver.url.rsplit(":", 1)[1].split("/")[0])
    settings.GOAAI_WEBHOOK_ALLOWED_NETWORKS = ["hooks.test"]
    _resolving(monkeypatch, {"hooks.test": ["127.0.0.1"]})
    endpoint = services.webhook_endpoint_create(
        owner_id=owner.pk, url=f"http://hooks.test:{port}/in", events=["run.completed"]
    )
    services.webhook_ping(endpoint_id=endpoint.pk)
    deliver_due()
    (received,) = receiver.requests
    assert received.path == "/in"
    assert received.headers["host"] == f"hooks.test:{port}"
