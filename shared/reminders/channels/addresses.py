"""Which network addresses a webhook may be delivered to.

A webhook URL is supplied by an application, so without a guard it could make the sender call
its own metadata service (169.254.169.254), a database in the VPC or localhost. The guard resolves
the host once, refuses any address that is not globally routable unless an operator allowed it
(``REMINDERS_WEBHOOK_ALLOW``), and hands back the vetted addresses; the caller connects to one
of those, never re-resolving, so DNS cannot change the answer between check and connect.
"""

from __future__ import annotations

import ipaddress
import socket
import unicodedata
from collections.abc import Callable, Iterable, Sequence

from reminders.errors import InvalidInput, RemindersError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]

ALLOW_ENV = "REMINDERS_WEBHOOK_ALLOW"


class DestinationRefused(InvalidInput):
    """The destination resolves to an address deliveries may not go to."""


class DestinationLookupError(RemindersError):
    """The host name could not be resolved now (DNS failure); nothing was sent."""


def check_url_characters(url: str, what: str) -> str:
    """``url`` unchanged, or InvalidInput naming ``what``, the part of the URL and the code
    point when it holds a control character (C0, DEL, C1) or whitespace anywhere.

    Checked on the text as given, before any parsing: urlsplit drops tabs and line breaks and
    strips leading blanks, getaddrinfo stops reading a name at a NUL (``127.0.0.1\\x00.evil``
    resolves to 127.0.0.1), and the raw host would still go into the Host header.
    """
    for index, char in enumerate(url):
        if unicodedata.category(char) == "Cc":
            kind = "a control character"
        elif char.isspace():
            kind = "whitespace"
        else:
            continue
        code = f"U+{ord(char):04X}"
        if index == 0:
            where = "the URL begins with"
        elif index == len(url) - 1:
            where = "the URL ends with"
        else:
            part = _url_part(url, index)
            where = f"the {part} {'contain' if part == 'credentials' else 'contains'}"
        raise InvalidInput(f"{what}: {where} {kind} ({code})")
    return url


def _url_part(url: str, index: int) -> str:
    """Which part of ``url`` the character at ``index`` is in, read as RFC 3986 lays a URL
    out: scheme, then ``//`` and the authority (credentials, host, port), path, query,
    fragment."""
    colon = url.find(":")
    if colon < 0 or index < colon:
        return "scheme" if colon >= 0 else "URL"
    start = colon + 1
    if url.startswith("//", start):
        authority = start + 2
        end = len(url)
        for mark in "/?#":
            found = url.find(mark, authority)
            if 0 <= found < end:
                end = found
        if index < end:
            at = url.rfind("@", authority, end)
            if index < at:
                return "credentials"
            host = max(authority, at + 1)
            bracket = url.find("]", host, end) if url.startswith("[", host) else -1
            port = url.rfind(":", max(host, bracket), end)
            return "port" if 0 <= port < index else "host"
        start = end
    hash_mark = url.find("#", start)
    if 0 <= hash_mark < index:
        return "fragment"
    question = url.find("?", start)
    if 0 <= question < index and (hash_mark < 0 or question < hash_mark):
        return "query"
    return "path"


def parse_allow_entries(entries: Iterable[str | IPNetwork]) -> list[IPNetwork]:
    """Networks from CIDRs or single IPs (``"127.0.0.1"`` means ``127.0.0.1/32``)."""
    networks: list[IPNetwork] = []
    for entry in entries:
        if isinstance(entry, ipaddress.IPv4Network | ipaddress.IPv6Network):
            networks.append(entry)
            continue
        text = entry.strip()
        try:
            networks.append(ipaddress.ip_network(text, strict=True))
        except ValueError as exc:
            raise InvalidInput(
                f"{ALLOW_ENV}: {text!r} is not an IP address or CIDR network ({exc})"
            ) from None
    return networks


def parse_allow_list(text: str) -> list[IPNetwork]:
    """Parse a comma-separated allow-list such as ``"127.0.0.1/32, 10.1.0.0/16"``."""
    entries = [part.strip() for part in text.split(",")]
    if any(not part for part in entries) and text.strip():
        raise InvalidInput(f"{ALLOW_ENV}: empty entry in {text!r}")
    return parse_allow_entries(part for part in entries if part)


def resolve_host(host: str, port: int) -> list[str]:
    """All addresses the host resolves to for a TCP connection, in resolver order."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    seen: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in seen:
            seen.append(address)
    return seen


def refusal_reason(address: IPAddress) -> str | None:
    """Why deliveries may not go to this address, or None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        if mapped is not None:
            # ::ffff:a.b.c.d reaches a.b.c.d itself: judge it by the IPv4 address alone.
            inner = refusal_reason(mapped)
            return None if inner is None else f"an IPv4-mapped form of a {inner} address"
        embedded = address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is not None:
            inner = refusal_reason(embedded)
            if inner is not None:
                return f"an IPv6 tunnel form of a {inner} address"
    if address.is_unspecified:
        return "unspecified"
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        # fec0::/10, deprecated (RFC 3879) yet routed inside some networks: Python counts it
        # global, so it is refused with the private ranges by name.
        return "site-local (deprecated private IPv6)"
    if address.is_multicast:
        return "multicast"
    if address.is_reserved:
        return "reserved"
    if address.is_private:
        return "private"
    if not address.is_global:
        return "not globally routable"
    return None


def _allowed(address: IPAddress, allow: Sequence[IPNetwork]) -> bool:
    candidates: list[IPAddress] = [address]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        candidates.append(address.ipv4_mapped)
    return any(
        candidate.version == network.version and candidate in network
        for candidate in candidates
        for network in allow
    )


def check_destination(
    host: str,
    port: int,
    allow: Sequence[IPNetwork] = (),
    resolve: Resolver = resolve_host,
) -> list[IPAddress]:
    """Resolve ``host`` and return its addresses if every one of them may be delivered to.

    Raises DestinationRefused (permanent) when any address is private, loopback, link-local,
    multicast, reserved, unspecified or otherwise not global and not in ``allow``; raises
    DestinationLookupError (transient) when resolution fails.
    """
    try:
        resolved = resolve(host, port)
    except (OSError, UnicodeError) as exc:
        raise DestinationLookupError(f"cannot resolve {host}: {exc}") from None
    if not resolved:
        raise DestinationLookupError(f"cannot resolve {host}: no addresses")
    vetted: list[IPAddress] = []
    for text in resolved:
        # getaddrinfo can append a zone to IPv6 link-local addresses ("fe80::1%eth0").
        address = ipaddress.ip_address(text.split("%", 1)[0])
        if not _allowed(address, allow):
            reason = refusal_reason(address)
            if reason is not None:
                raise DestinationRefused(
                    f"destination {address} is {reason}; add it to {ALLOW_ENV} to permit"
                )
        vetted.append(address)
    return vetted
