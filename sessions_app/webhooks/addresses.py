"""Where a webhook may go: public addresses only, unless an operator allowed more.

A URL is checked when it is subscribed (a clear 400) and again before every attempt
(a name's addresses change). The check resolves the host and refuses it if *any* of
its addresses is private, loopback, link-local, multicast, reserved or unspecified,
unless that address is within ``GOAAI_WEBHOOK_ALLOWED_NETWORKS`` or the host itself
is named there. An IPv6 address that leads to an IPv4 one (IPv4-mapped, NAT64's
64:ff9b::/96, 6to4, Teredo, IPv4-compatible) is judged by that IPv4 address. The
attempt then connects to the address that was checked, not to whatever the name
resolves to a moment later (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from goaai.runtime.errors import GoaaiError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_URL_LENGTH = 2000


class RefusedUrl(GoaaiError):
    """A URL goaai will not send webhooks to; the message says why."""

    code = "refused_url"


@dataclass(frozen=True)
class AllowList:
    """``GOAAI_WEBHOOK_ALLOWED_NETWORKS`` parsed: networks and host names."""

    networks: tuple[IPNetwork, ...] = ()
    hosts: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        networks: list[IPNetwork] = []
        hosts: set[str] = set()
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.add(entry.lower().rstrip("."))
        return cls(tuple(networks), frozenset(hosts))

    def permits(self, address: IPAddress) -> bool:
        return any(address in network for network in self.networks)


@dataclass(frozen=True)
class Target:
    """A checked URL: where to connect (``address``), and what to say to it."""

    url: str
    scheme: str
    host: str
    port: int
    address: str

    @property
    def connect_url(self) -> str:
        """The URL with its host replaced by the checked address (the request
        carries the real host in its ``Host`` header, and, over TLS, as the name
        the certificate must match)."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if ":" in self.address else self.address
        return parts._replace(netloc=f"{literal}:{self.port}").geturl()

    @property
    def host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"


def _split(url: str) -> SplitResult:
    if not isinstance(url, str) or len(url) > MAX_URL_LENGTH:
        raise RefusedUrl(f"A webhook URL is a string of at most {MAX_URL_LENGTH} characters.")
    if any(ch.isspace() or ord(ch) < 32 for ch in url):
        raise RefusedUrl("A webhook URL cannot contain spaces or control characters.")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RefusedUrl("A webhook URL must start with http:// or https://.")
    if not parts.hostname:
        raise RefusedUrl("A webhook URL must name a host.")
    if parts.username is not None or parts.password is not None:
        raise RefusedUrl("A webhook URL cannot carry a user name or password.")
    try:
        parts.port  # noqa: B018 (parsing it is the check)
    except ValueError:
        raise RefusedUrl("The webhook URL's port is not a number from 0 to 65535.") from None
    return parts


def resolve(host: str, port: int) -> list[str]:
    """The host's addresses, in the resolver's order (a seam for tests, which
    cannot make a name resolve to 10.x otherwise)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# IPv6 prefixes that carry an IPv4 address in their last 32 bits: NAT64's
# well-known prefix (a translator on the path delivers 64:ff9b::7f00:1 to
# 127.0.0.1) and IPv4-compatible addresses (::a.b.c.d).
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
# NAT64 prefixes for one operator's network (RFC 8215): where they lead is local.
LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")


def _embedded(address: IPAddress) -> tuple[IPAddress, ...]:
    """The IPv4 addresses an IPv6 address leads to (mapped, NAT64, 6to4, Teredo,
    IPv4-compatible), or the address itself when it carries none."""
    if isinstance(address, ipaddress.IPv4Address):
        return (address,)
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address.teredo is not None:
        return address.teredo
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address in NAT64 or address in IPV4_COMPATIBLE:
        return (ipaddress.IPv4Address(int(address) & 0xFFFFFFFF),)
    return (address,)


def _public(address: IPAddress) -> bool:
    if address in LOCAL_NAT64:
        return False
    return all(inner.is_global and not inner.is_multicast for inner in _embedded(address))


def _allowed(address: IPAddress, allow: AllowList) -> bool:
    """Public, or in the allow-list itself or by the IPv4 address it leads to."""
    if _public(address) or allow.permits(address):
        return True
    embedded = _embedded(address)
    return embedded != (address,) and all(allow.permits(inner) for inner in embedded)


def check_url(url: str, allow: AllowList) -> Target:
    """The URL as a :class:`Target`, or :class:`RefusedUrl` saying why not."""
    parts = _split(url)
    host = (parts.hostname or "").rstrip(".")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        addresses = resolve(host, port)
    except (OSError, UnicodeError):
        raise RefusedUrl(f"The webhook host {host!r} cannot be resolved.") from None
    if not addresses:
        raise RefusedUrl(f"The webhook host {host!r} has no address.")
    if host.lower() not in allow.hosts:
        for raw in addresses:
            address = ipaddress.ip_address(raw.split("%", 1)[0])
            if not _allowed(address, allow):
                raise RefusedUrl(
                    f"The webhook host {host!r} resolves to {address}, which is not a "
                    "public address; an operator may allow it with "
                    "GOAAI_WEBHOOK_ALLOWED_NETWORKS."
                )
    return Target(url=url, scheme=parts.scheme, host=host, port=port, address=addresses[0])
