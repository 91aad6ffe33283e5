"""The destination guard: which addresses a webhook may reach."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from reminders.channels.addresses import (
    DestinationLookupError,
    DestinationRefused,
    Resolver,
    check_destination,
    check_url_characters,
    parse_allow_list,
    resolve_host,
)
from reminders.errors import InvalidInput


def resolver(*addresses: str) -> Resolver:
    def resolve(host: str, port: int) -> list[str]:
        return list(addresses)

    return resolve


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("224.0.0.251", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("100.64.0.1", "not globally routable"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd12:3456::1", "private"),
        ("fec0::1", "site-local (deprecated private IPv6)"),
        ("feff:ffff::1", "site-local (deprecated private IPv6)"),
        ("ff02::1", "multicast"),
        ("::ffff:10.0.0.5", "an IPv4-mapped form of a private address"),
        ("::ffff:169.254.169.254", "an IPv4-mapped form of a link-local address"),
        ("2002:a00:5::1", "an IPv6 tunnel form of a private address"),
    ],
)
def test_refuses_non_global_addresses_naming_why(address: str, reason: str) -> None:
    with pytest.raises(DestinationRefused) as caught:
        check_destination("hooks.example.com", 443, [], resolver(address))
    shown = ipaddress.ip_address(address)
    assert str(caught.value) == (
        f"destination {shown} is {reason}; add it to REMINDERS_WEBHOOK_ALLOW to permit"
    )


def test_the_documented_message_for_a_private_address() -> None:
    with pytest.raises(DestinationRefused, match=r"^destination 10\.0\.0\.5 is private; add it "
                       r"to REMINDERS_WEBHOOK_ALLOW to permit$"):
        check_destination("10.0.0.5", 80, [], resolver("10.0.0.5"))


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c",
                                     "::ffff:93.184.215.14"])
def test_global_addresses_pass(address: str) -> None:
    vetted = check_destination("hooks.example.com", 443, [], resolver(address))
    assert vetted == [ipaddress.ip_address(address)]


def test_one_private_answer_among_public_ones_refuses_the_host() -> None:
    with pytest.raises(DestinationRefused, match=r"169\.254\.169\.254 is link-local"):
        check_destination(
            "rebind.example.com", 80, [], resolver("93.184.215.14", "169.254.169.254")
        )


def test_allow_list_permits_exactly_what_it_names() -> None:
    allow = parse_allow_list("127.0.0.1/32, 10.1.0.0/16")
    resolve = resolver("127.0.0.1")
    assert check_destination("localhost", 8080, allow, resolve) == [
        ipaddress.ip_address("127.0.0.1")
    ]
    assert check_destination("svc", 80, allow, resolver("10.1.200.3"))
    with pytest.raises(DestinationRefused, match=r"10\.2\.0\.1 is private"):
        check_destination("svc", 80, allow, resolver("10.2.0.1"))
    with pytest.raises(DestinationRefused, match=r"127\.0\.0\.2 is loopback"):
        check_destination("svc", 80, allow, resolver("127.0.0.2"))


def test_allow_list_covers_the_ipv4_mapped_form() -> None:
    allow = parse_allow_list("127.0.0.1")
    assert check_destination("x", 80, allow, resolver("::ffff:127.0.0.1"))


def test_ipv6_zone_is_ignored_when_judging() -> None:
    with pytest.raises(DestinationRefused, match="fe80::1 is link-local"):
        check_destination("x", 80, [], resolver("fe80::1%eth0"))


def test_resolution_failure_is_a_lookup_error_not_a_refusal() -> None:
    def failing(host: str, port: int) -> list[str]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(DestinationLookupError, match=r"cannot resolve nowhere\.invalid"):
        check_destination("nowhere.invalid", 80, [], failing)
    with pytest.raises(DestinationLookupError, match="no addresses"):
        check_destination("empty.example", 80, [], resolver())


def test_resolve_host_returns_each_address_once() -> None:
    assert resolve_host("127.0.0.1", 80) == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("  ", []),
        ("127.0.0.1", ["127.0.0.1/32"]),
        ("127.0.0.1/32,::1", ["127.0.0.1/32", "::1/128"]),
        (" 10.0.0.0/8 , 192.168.0.0/16 ", ["10.0.0.0/8", "192.168.0.0/16"]),
    ],
)
def test_parse_allow_list(text: str, expected: list[str]) -> None:
    assert [str(n) for n in parse_allow_list(text)] == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("localhost", "'localhost' is not an IP address or CIDR network"),
        ("10.0.0.1/8", "'10.0.0.1/8' is not an IP address or CIDR network .*host bits set"),
        ("10.0.0.0/33", "'10.0.0.0/33' is not an IP address"),
        ("127.0.0.1,,10.0.0.0/8", "empty entry"),
    ],
)
def test_parse_allow_list_names_a_bad_entry(text: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=f"REMINDERS_WEBHOOK_ALLOW: {message}"):
        parse_allow_list(text)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1\x00.evil/", "the host contains a control character (U+0000)"),
        ("http://u\x01:p@hooks.example.com/", "the credentials contain a control character "
                                              "(U+0001)"),
        ("http://hooks.example.com:8\x0b0/x", "the port contains a control character (U+000B)"),
        ("http://[::1\x1f]:80/", "the host contains a control character (U+001F)"),
        ("http://[::1]:8\x000/", "the port contains a control character (U+0000)"),
        ("ht\x00tp://hooks.example.com/", "the scheme contains a control character (U+0000)"),
        ("http://hooks.example.com/p\x7fq", "the path contains a control character (U+007F)"),
        ("http://hooks.example.com/p?q=\x9f1", "the query contains a control character "
                                               "(U+009F)"),
        ("http://hooks.example.com/p#f?\x01x", "the fragment contains a control character "
                                               "(U+0001)"),
        ("http:/a\x00b", "the path contains a control character (U+0000)"),
        ("no\x00colon", "the URL contains a control character (U+0000)"),
        ("http://hooks.example.com/a\u2028b", "the path contains whitespace (U+2028)"),
        ("http://hooks.example.com/a\u3000b", "the path contains whitespace (U+3000)"),
        ("http://hooks.example.com/\t", "the URL ends with a control character (U+0009)"),
        ("\u00a0http://hooks.example.com/", "the URL begins with whitespace (U+00A0)"),
    ],
)
def test_a_url_with_a_control_character_or_whitespace_is_refused_naming_where(
        url: str, message: str) -> None:
    with pytest.raises(InvalidInput) as err:
        check_url_characters(url, "webhook URL")
    assert str(err.value) == f"webhook URL: {message}"


@pytest.mark.parametrize("url", ["https://hooks.example.com/a%20b?x=%00#f",
                                 "https://bücher.example/pfad?q=ü", "http://[::1]:8080/"])
def test_a_url_without_them_is_accepted_unchanged(url: str) -> None:
    assert check_url_characters(url, "webhook URL") == url
