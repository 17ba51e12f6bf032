"""The security keys: their spec and the checks that they fit together."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.runtime.config import SPEC, Config
from actors.security.config import (
    SECURITY_CHOICES,
    SECURITY_RANGES,
    SECURITY_SPEC,
    SecurityConfigError,
    SecuritySettings,
)
from actors.security.listeners import SecurityProtocol
from actors.security.tls import server_context
from bench.certs import make_pki


def test_the_spec_fits_the_node_config() -> None:
    assert set(SECURITY_SPEC) <= set(SPEC)  # registered by SPEC.update in the node's config
    for key, (default, kind, _help) in SECURITY_SPEC.items():
        assert SPEC[key][:2] == (default, kind), key
    for key, (default, kind, help_) in SECURITY_SPEC.items():
        assert isinstance(default, kind) and help_, key
    assert set(SECURITY_CHOICES) <= set(SECURITY_SPEC) >= set(SECURITY_RANGES)
    for key, choices in SECURITY_CHOICES.items():
        assert SECURITY_SPEC[key][0] in choices, key


def test_defaults_are_a_plaintext_node() -> None:
    settings = SecuritySettings.from_config(Config().values)
    assert [listener.security_protocol for listener in settings.listeners] == [
        SecurityProtocol.PLAINTEXT]
    assert settings.tls is None and settings.sasl_mechanisms == () and not settings.acl_enabled
    assert not settings.curve.enabled


def test_a_secured_node(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    settings = SecuritySettings.from_config({
        "listeners": "SASL_SSL://127.0.0.1:9093,INTERNAL://127.0.0.1:9094",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,INTERNAL:SSL",
        "ssl.keystore.location": str(pki.server), "ssl.truststore.location": str(pki.ca),
        "ssl.client.auth": "requested", "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "connections.max.reauth.ms": 3_600_000, "authorizer.class.name": "acl",
        "super.users": "User:admin;User:CN=ops", "allow.everyone.if.no.acl.found": False,
    })
    assert settings.tls is not None and settings.tls.client_auth == "requested"
    server_context(settings.tls)  # the settings make a working context
    assert settings.sasl_mechanisms == ("SCRAM-SHA-512",) and settings.reauth_ms == 3_600_000
    assert settings.acl_enabled and settings.super_users == {"User:admin", "User:CN=ops"}
    assert [listener.name for listener in settings.advertised] == ["SASL_SSL", "INTERNAL"]


@pytest.mark.parametrize(("values", "message"), [
    ({"listeners": "SSL://127.0.0.1:9093"},
     "ssl.keystore.location is not set, and the TLS listener SSL://127.0.0.1:9093 needs it"),
    ({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093", "sasl.enabled.mechanisms": "GSSAPI"},
     "sasl.enabled.mechanisms: GSSAPI is not supported; use some of PLAIN, SCRAM-SHA-256, "
     "SCRAM-SHA-512"),
    ({"listeners": "127.0.0.1:9092", "authorizer.class.name": "com.example.Mine"},
     "authorizer.class.name = 'com.example.Mine': use \"acl\" (Kafka's AclAuthorizer rules) "
     "or leave it empty"),
    ({"listeners": "127.0.0.1:9092", "super.users": "admin"},
     "principal 'admin' is not TYPE:NAME (e.g. User:alice)"),
    ({"listeners": "127.0.0.1:9092", "actor.curve.public.keys.dir": "/keys"},
     "CURVE needs both actor.curve.secret.key.file and actor.curve.public.keys.dir; "
     "actor.curve.secret.key.file is not set"),
    ({"listeners": "127.0.0.1:9092", "connections.max.reauth.ms": -5},
     "connections.max.reauth.ms = -5: use 0 (no re-authentication) or more"),
    ({"listeners": "FOO://h:1"},
     "listeners: 'FOO://h:1': no security protocol for listener name FOO; use one of "
     "PLAINTEXT, SASL_PLAINTEXT, SASL_SSL, SSL or map it in listener.security.protocol.map"),
])
def test_settings_that_do_not_fit_get_one_line(values: dict[str, object], message: str) -> None:
    with pytest.raises(SecurityConfigError) as caught:
        SecuritySettings.from_config(values)
    assert str(caught.value) == message
