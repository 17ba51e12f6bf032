"""The security config keys (Kafka's names) and one checked object made of them.

``SECURITY_SPEC`` has the shape of ``actors.runtime.config.SPEC`` (key ->
default, type, help) so the node's config can take it in with
``SPEC.update(SECURITY_SPEC)``; ``SECURITY_CHOICES`` and ``SECURITY_RANGES``
likewise for the value checks. :meth:`SecuritySettings.from_config` reads a
node's values, checks that they fit together (a TLS listener needs a
keystore, a SASL listener mechanisms, CURVE both key settings) and fails
with one line naming the key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from actors.security.acl import AclError, parse_super_users
from actors.security.curve import CurveSettings
from actors.security.listeners import (
    Listener,
    ListenerError,
    advertised_listeners,
    parse_listeners,
    parse_protocol_map,
)
from actors.security.sasl import SaslConfigError, enabled_mechanisms
from actors.security.tls import CLIENT_AUTH, TlsConfigError, TlsSettings

ACL_AUTHORIZERS = ("acl", "kafka.security.authorizer.AclAuthorizer",
                   "kafka.security.auth.SimpleAclAuthorizer")

SECURITY_SPEC: dict[str, tuple[Any, type, str]] = {
    "listener.security.protocol.map": ("", str, "NAME:PROTOCOL,... for named listeners "
                                       "(empty: each protocol names itself)"),
    "ssl.keystore.type": ("PEM", str, "PEM only"),
    "ssl.keystore.location": ("", str, "PEM file with the certificate chain and private key of "
                              "TLS listeners"),
    "ssl.key.password": ("", str, "password of the keystore's private key, if encrypted"),
    "ssl.truststore.type": ("PEM", str, "PEM only"),
    "ssl.truststore.location": ("", str, "PEM file of the CA certificates client certificates "
                                "must chain to"),
    "ssl.client.auth": ("none", str, "none, requested or required (mutual TLS: the principal "
                        "is User:<certificate subject>)"),
    "ssl.enabled.protocols": ("TLSv1.2,TLSv1.3", str, "TLS versions offered"),
    "ssl.cipher.suites": ("", str, "cipher suites offered (Kafka's or OpenSSL's names; "
                          "empty: OpenSSL's defaults)"),
    "sasl.enabled.mechanisms": ("SCRAM-SHA-256,SCRAM-SHA-512", str,
                                "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, "
                                "SCRAM-SHA-512"),
    "connections.max.reauth.ms": (0, int, "SASL session lifetime; clients re-authenticate "
                                  "before it ends (0: sessions never end)"),
    "authorizer.class.name": ("", str, "\"acl\" turns on ACLs (Kafka's AclAuthorizer rules); "
                              "empty: everyone may do everything"),
    "super.users": ("", str, "principals allowed everything, ';'-separated (User:admin)"),
    "allow.everyone.if.no.acl.found": (False, bool, "allow a resource no ACL names"),
    "actor.curve.secret.key.file": ("", str, "this node's CURVE key file (actorlog keys new); "
                                    "set with actor.curve.public.keys.dir to secure the "
                                    "gateways"),
    "actor.curve.public.keys.dir": ("", str, "directory of every node's <node name>.key "
                                    "public key"),
}
SECURITY_CHOICES: dict[str, tuple[str, ...]] = {
    "ssl.keystore.type": ("PEM",),
    "ssl.truststore.type": ("PEM",),
    "ssl.client.auth": CLIENT_AUTH,
    "authorizer.class.name": ("", *ACL_AUTHORIZERS),
}
SECURITY_RANGES: dict[str, tuple[float, float]] = {
    "connections.max.reauth.ms": (0, 2**63 - 1),
}


class SecurityConfigError(ValueError):
    """Security settings that cannot work together; one line naming the key."""


@dataclass(frozen=True, slots=True)
class SecuritySettings:
    listeners: tuple[Listener, ...]
    advertised: tuple[Listener, ...]
    tls: TlsSettings | None = None
    sasl_mechanisms: tuple[str, ...] = ()
    reauth_ms: int = 0
    acl_enabled: bool = False
    super_users: frozenset[str] = field(default_factory=frozenset)
    allow_everyone_if_no_acl_found: bool = False
    curve: CurveSettings = field(default_factory=CurveSettings)

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> SecuritySettings:
        def get(key: str) -> Any:
            return values.get(key, SECURITY_SPEC[key][0] if key in SECURITY_SPEC else None)

        try:
            protocols = parse_protocol_map(str(get("listener.security.protocol.map") or ""))
            listeners = parse_listeners(str(values.get("listeners") or ""), protocols)
            advertised = advertised_listeners(
                listeners, str(values.get("advertised.listeners") or ""), protocols)
            tls = None
            if any(listener.security_protocol.uses_tls for listener in listeners):
                tls = TlsSettings.from_config({k: get(k) for k in SECURITY_SPEC
                                               if k.startswith("ssl.")})
                if not tls.keystore_location:
                    names = ", ".join(listener.connection_string for listener in listeners
                                      if listener.security_protocol.uses_tls)
                    raise TlsConfigError(f"ssl.keystore.location is not set, and the TLS "
                                         f"listener {names} needs it")
            mechanisms: tuple[str, ...] = ()
            if any(listener.security_protocol.uses_sasl for listener in listeners):
                mechanisms = enabled_mechanisms(str(get("sasl.enabled.mechanisms")))
            authorizer = str(get("authorizer.class.name") or "").strip()
            if authorizer and authorizer not in ACL_AUTHORIZERS:
                raise SecurityConfigError(
                    f"authorizer.class.name = {authorizer!r}: use \"acl\" (Kafka's "
                    f"AclAuthorizer rules) or leave it empty")
            reauth_ms = int(get("connections.max.reauth.ms") or 0)
            if reauth_ms < 0:
                raise SecurityConfigError(f"connections.max.reauth.ms = {reauth_ms}: use 0 "
                                          f"(no re-authentication) or more")
            curve = CurveSettings.from_config(values)
            if curve.enabled and not (curve.secret_key_file and curve.public_keys_dir):
                missing = ("actor.curve.secret.key.file" if not curve.secret_key_file
                           else "actor.curve.public.keys.dir")
                raise SecurityConfigError(f"CURVE needs both actor.curve.secret.key.file and "
                                          f"actor.curve.public.keys.dir; {missing} is not set")
            return cls(listeners, advertised, tls, mechanisms, reauth_ms, bool(authorizer),
                       parse_super_users(str(get("super.users") or "")),
                       bool(get("allow.everyone.if.no.acl.found")), curve)
        except (ListenerError, TlsConfigError, SaslConfigError, AclError) as exc:
            raise SecurityConfigError(str(exc)) from None
