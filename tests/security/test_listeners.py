"""Kafka's listener syntax: what parses to what, and the one line each mistake gets."""

from __future__ import annotations

import pytest

from actors.security.listeners import (
    Listener,
    ListenerError,
    SecurityProtocol,
    advertised_listeners,
    parse_listeners,
    parse_protocol_map,
)

P = SecurityProtocol


@pytest.mark.parametrize(("text", "expected"), [
    ("PLAINTEXT://127.0.0.1:9092", [Listener("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 9092)]),
    ("127.0.0.1:9092", [Listener("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 9092)]),
    ("[::1]:9092", [Listener("PLAINTEXT", P.PLAINTEXT, "::1", 9092)]),
    ("SSL://[::1]:9093", [Listener("SSL", P.SSL, "::1", 9093)]),
    ("PLAINTEXT://:9092", [Listener("PLAINTEXT", P.PLAINTEXT, "", 9092)]),
    ("sasl_ssl://localhost:9094", [Listener("SASL_SSL", P.SASL_SSL, "localhost", 9094)]),
    ("PLAINTEXT://127.0.0.1:9092, SSL://127.0.0.1:9093,SASL_PLAINTEXT://h:9094,"
     "SASL_SSL://h:9095",
     [Listener("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 9092),
      Listener("SSL", P.SSL, "127.0.0.1", 9093),
      Listener("SASL_PLAINTEXT", P.SASL_PLAINTEXT, "h", 9094),
      Listener("SASL_SSL", P.SASL_SSL, "h", 9095)]),
    ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
     [Listener("PLAINTEXT", P.PLAINTEXT, "127.0.0.1", 0), Listener("SSL", P.SSL, "127.0.0.1", 0)]),
])
def test_listener_forms(text: str, expected: list[Listener]) -> None:
    assert list(parse_listeners(text)) == expected


def test_named_listeners_take_their_protocol_from_the_map() -> None:
    got = parse_listeners("INTERNAL://10.0.0.1:9092,EXTERNAL://[::]:9093",
                          "INTERNAL:SSL, external:SASL_SSL")
    assert got == (Listener("INTERNAL", P.SSL, "10.0.0.1", 9092),
                   Listener("EXTERNAL", P.SASL_SSL, "::", 9093))
    assert got[1].connection_string == "EXTERNAL://[::]:9093"
    assert got[1].is_ipv6 and not got[0].is_ipv6


def test_an_explicit_map_replaces_the_default() -> None:
    assert parse_protocol_map("") == {p.value: p for p in SecurityProtocol}
    with pytest.raises(ListenerError, match="no security protocol for listener name SSL"):
        parse_listeners("SSL://h:1", "INTERNAL:SSL")


def test_protocol_properties() -> None:
    assert [p.uses_tls for p in P] == [False, True, False, True]
    assert [p.uses_sasl for p in P] == [False, False, True, True]


@pytest.mark.parametrize(("text", "message"), [
    ("", "listeners is empty; give at least one listener, e.g. PLAINTEXT://127.0.0.1:9092"),
    ("PLAINTEXT://127.0.0.1", "listeners: 'PLAINTEXT://127.0.0.1' has no port; write HOST:PORT "
                              "(e.g. PLAINTEXT://127.0.0.1:9092)"),
    ("PLAINTEXT://h:99999", "listeners: 'PLAINTEXT://h:99999': port '99999' must be a number "
                            "from 0 to 65535"),
    ("PLAINTEXT://h:x", "listeners: 'PLAINTEXT://h:x': port 'x' must be a number from 0 to 65535"),
    ("::1:9092", "listeners: '::1:9092': put an IPv6 address in brackets, as [::1]:9092"),
    ("[::1:9092", "listeners: '[::1:9092': an IPv6 address goes in brackets followed by :PORT, "
                  "as [::1]:9092"),
    ("[nothex]:9092", "listeners: '[nothex]:9092': 'nothex' is not an IPv6 address"),
    ("TLS://h:1", "listeners: 'TLS://h:1': no security protocol for listener name TLS; use one "
                  "of PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL or map it in "
                  "listener.security.protocol.map"),
    ("://h:1", "listeners: '://h:1' has no listener name before '://'"),
    ("PLAINTEXT://h:1,PLAINTEXT://h:2", "listeners: listener name PLAINTEXT appears twice; "
                                        "each listener needs its own name"),
    ("PLAINTEXT://h:1,SSL://h:1", "listeners: PLAINTEXT and SSL both use port 1"),
    ("PLAINTEXT://a b:1", "listeners: 'PLAINTEXT://a b:1': 'a b' is not a host name or address"),
])
def test_bad_listeners_get_one_line(text: str, message: str) -> None:
    with pytest.raises(ListenerError) as caught:
        parse_listeners(text)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("text", "message"), [
    ("INTERNAL", "listener.security.protocol.map: 'INTERNAL' is not NAME:PROTOCOL "
                 "(e.g. INTERNAL:SSL,EXTERNAL:SASL_SSL)"),
    ("INTERNAL:TLS", "listener.security.protocol.map: 'INTERNAL:TLS': unknown security "
                     "protocol 'TLS'; use one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ("A:SSL,a:SSL", "listener.security.protocol.map: listener name A is mapped twice"),
])
def test_bad_protocol_maps_get_one_line(text: str, message: str) -> None:
    with pytest.raises(ListenerError) as caught:
        parse_protocol_map(text)
    assert str(caught.value) == message


def test_advertised_defaults_to_listeners_and_must_name_them() -> None:
    bound = parse_listeners("PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093")
    assert advertised_listeners(bound, "") == bound
    told = advertised_listeners(bound, "SSL://broker1.example:19093")
    assert told == (Listener("SSL", P.SSL, "broker1.example", 19093),)
    # Advertised listeners may share a port (behind different hosts).
    both = advertised_listeners(bound, "PLAINTEXT://a:1,SSL://b:1")
    assert [listener.port for listener in both] == [1, 1]
    with pytest.raises(ListenerError, match=r"listener name SASL_SSL is not among listeners "
                                            r"\(PLAINTEXT, SSL\)"):
        advertised_listeners(bound, "SASL_SSL://a:1")


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", ""])
def test_wildcard_addresses_are_never_advertised(host: str) -> None:
    bound = parse_listeners(f"SSL://{host}:9093")
    with pytest.raises(ListenerError) as caught:
        advertised_listeners(bound, "")
    assert "binds every address, which clients cannot connect to" in str(caught.value)
    assert "SSL://127.0.0.1:9093" in str(caught.value)
    with pytest.raises(ListenerError, match="binds every address"):
        advertised_listeners(parse_listeners("SSL://h:9093"), f"SSL://{host}:9093")
