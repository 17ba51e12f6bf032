"""TLS for the Kafka listeners: an ``ssl.SSLContext`` from Kafka's PEM keystore settings.

Kafka's keys, as a broker reads them:

``ssl.keystore.type``        "PEM" (the only type here; JKS and PKCS12 are Java's)
``ssl.keystore.location``    a PEM file with the certificate chain and the private key
``ssl.key.password``         the private key's password, if it is encrypted
``ssl.truststore.type``      "PEM"
``ssl.truststore.location``  PEM file of the CA certificates client certificates must chain to
``ssl.client.auth``          none / requested / required (mutual TLS)
``ssl.enabled.protocols``    e.g. "TLSv1.2,TLSv1.3"
``ssl.cipher.suites``        Kafka's (IANA) suite names, or OpenSSL's; empty: OpenSSL's defaults

Python's ``ssl`` cannot restrict TLS 1.3 suites, so a ``ssl.cipher.suites``
that names some but not all TLS 1.3 suites is refused rather than silently
widened; one that names only TLS 1.2 suites turns TLS 1.3 off, which is what
Java does with such a list.

:func:`principal_of_certificate` gives Kafka's principal for a client
certificate: ``User:`` and the subject as an RFC 2253 distinguished name
(most specific first: ``User:CN=alice,OU=eng,O=acme,C=US``).
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.x509.oid import NameOID

ANONYMOUS = "User:ANONYMOUS"
CLIENT_AUTH = ("none", "requested", "required")
_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
TLS13_SUITES = ("TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256", "TLS_AES_128_GCM_SHA256")

# Kafka (Java, IANA) names of the certificate-based TLS 1.2 suites -> OpenSSL's names.
IANA_TO_OPENSSL: dict[str, str] = {
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_GCM_SHA384": "DHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_DHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "DHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_GCM_SHA256": "DHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA384": "ECDHE-ECDSA-AES256-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384": "ECDHE-RSA-AES256-SHA384",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA256": "DHE-RSA-AES256-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA256": "DHE-RSA-AES128-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_DHE_RSA_WITH_AES_256_CBC_SHA": "DHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_DHE_RSA_WITH_AES_128_CBC_SHA": "DHE-RSA-AES128-SHA",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA256": "AES256-SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA256": "AES128-SHA256",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
}


class TlsConfigError(ValueError):
    """TLS settings that cannot make a context; the message is one line naming the key."""


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """One listener's TLS settings (Kafka's ``ssl.*`` keys)."""

    keystore_location: str
    key_password: str | None = None
    truststore_location: str | None = None
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    cipher_suites: tuple[str, ...] = ()
    keystore_type: str = "PEM"
    truststore_type: str = "PEM"

    @classmethod
    def from_config(cls, values: Mapping[str, Any]) -> TlsSettings:
        """The settings from config values keyed by Kafka's names (missing keys: defaults)."""

        def text(key: str, default: str = "") -> str:
            value = values.get(key)
            return default if value is None else str(value).strip()

        def listed(key: str, default: str) -> tuple[str, ...]:
            return tuple(s.strip() for s in text(key, default).split(",") if s.strip())

        return cls(
            keystore_location=text("ssl.keystore.location"),
            key_password=text("ssl.key.password") or None,
            truststore_location=text("ssl.truststore.location") or None,
            client_auth=text("ssl.client.auth", "none").lower() or "none",
            enabled_protocols=listed("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"),
            cipher_suites=listed("ssl.cipher.suites", ""),
            keystore_type=text("ssl.keystore.type", "PEM").upper() or "PEM",
            truststore_type=text("ssl.truststore.type", "PEM").upper() or "PEM",
        )


def _check_file(key: str, location: str) -> Path:
    path = Path(location)
    if not path.is_file():
        state = "is a directory" if path.is_dir() else "does not exist"
        raise TlsConfigError(f"{key} {location} {state}; give a PEM file")
    try:
        head = path.read_bytes()[:1 << 20]
    except OSError as exc:
        raise TlsConfigError(f"{key} {location}: cannot read it ({exc.strerror})") from None
    if b"-----BEGIN " not in head:
        raise TlsConfigError(f"{key} {location} is not a PEM file (no '-----BEGIN' line)")
    return path


def _protocol_range(protocols: tuple[str, ...]) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    if not protocols:
        raise TlsConfigError("ssl.enabled.protocols is empty; use TLSv1.2,TLSv1.3")
    for name in protocols:
        if name not in _PROTOCOLS:
            raise TlsConfigError(f"ssl.enabled.protocols: {name} is not supported; use "
                                 f"{', '.join(_PROTOCOLS)}")
    versions = sorted(_PROTOCOLS[name] for name in protocols)
    return versions[0], versions[-1]


def openssl_cipher_names(suites: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """Split ``ssl.cipher.suites`` into (TLS 1.2 suites as OpenSSL names, TLS 1.3 suites)."""
    tls12: list[str] = []
    tls13: list[str] = []
    known_openssl = set(IANA_TO_OPENSSL.values())
    for suite in suites:
        if suite in TLS13_SUITES:
            tls13.append(suite)
        elif suite in IANA_TO_OPENSSL:
            tls12.append(IANA_TO_OPENSSL[suite])
        elif suite in known_openssl:
            tls12.append(suite)
        else:
            raise TlsConfigError(
                f"ssl.cipher.suites: {suite} is not a cipher suite this broker knows; use "
                f"names such as TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 or TLS_AES_256_GCM_SHA384")
    return tls12, tls13


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A server-side context for one listener; :class:`TlsConfigError` for any bad setting."""
    if settings.keystore_type != "PEM":
        raise TlsConfigError(f"ssl.keystore.type {settings.keystore_type} is not supported; "
                             f"convert the keystore to PEM and set ssl.keystore.type = \"PEM\"")
    if settings.truststore_type != "PEM":
        raise TlsConfigError(f"ssl.truststore.type {settings.truststore_type} is not "
                             f"supported; use a PEM file and ssl.truststore.type = \"PEM\"")
    if not settings.keystore_location:
        raise TlsConfigError("ssl.keystore.location is not set; a TLS listener needs a PEM "
                             "file with its certificate chain and private key")
    if settings.client_auth not in CLIENT_AUTH:
        raise TlsConfigError(f"ssl.client.auth = {settings.client_auth!r} is not one of "
                             f"{', '.join(CLIENT_AUTH)}")
    low, high = _protocol_range(settings.enabled_protocols)
    tls12, tls13 = openssl_cipher_names(settings.cipher_suites)
    if settings.cipher_suites:
        if not tls13:
            high = min(high, ssl.TLSVersion.TLSv1_2)
        elif set(tls13) != set(TLS13_SUITES) and high >= ssl.TLSVersion.TLSv1_3:
            raise TlsConfigError(
                "ssl.cipher.suites: Python's ssl cannot limit the TLS 1.3 suites; list all of "
                f"{', '.join(TLS13_SUITES)} or none of them (none: TLS 1.3 is off)")
        if not tls12:
            low = max(low, ssl.TLSVersion.TLSv1_3)
        if low > high:
            raise TlsConfigError(
                f"ssl.cipher.suites has no suite for ssl.enabled.protocols "
                f"{','.join(settings.enabled_protocols)}")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = low
    context.maximum_version = high
    if tls12:
        try:
            context.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise TlsConfigError(f"ssl.cipher.suites: OpenSSL here offers none of "
                                 f"{', '.join(settings.cipher_suites)}") from None

    keystore = _check_file("ssl.keystore.location", settings.keystore_location)
    try:
        context.load_cert_chain(str(keystore), password=settings.key_password or None)
    except ssl.SSLError as exc:
        hint = ("check ssl.key.password" if settings.key_password or b"ENCRYPTED"
                in keystore.read_bytes() else "it needs the certificate chain and the "
                "private key, and ssl.key.password if the key is encrypted")
        raise TlsConfigError(f"ssl.keystore.location {keystore}: cannot load the certificate "
                             f"chain and private key ({exc.reason or exc}); {hint}") from None

    if settings.client_auth != "none":
        if not settings.truststore_location:
            raise TlsConfigError(f"ssl.client.auth = {settings.client_auth} needs "
                                 f"ssl.truststore.location (the CA certificates of clients)")
        context.verify_mode = (ssl.CERT_REQUIRED if settings.client_auth == "required"
                               else ssl.CERT_OPTIONAL)
    if settings.truststore_location:
        truststore = _check_file("ssl.truststore.location", settings.truststore_location)
        try:
            context.load_verify_locations(cafile=str(truststore))
        except ssl.SSLError as exc:
            raise TlsConfigError(f"ssl.truststore.location {truststore}: no CA certificate "
                                 f"could be loaded ({exc.reason or exc})") from None
    # No TLS-level renegotiation (OpenSSL's default for TLS 1.3; here for 1.2 too) and
    # no compression; tickets stay on so clients may resume.
    context.options |= ssl.OP_NO_RENEGOTIATION | ssl.OP_NO_COMPRESSION
    return context


# The attribute keywords Java's RFC 2253 output uses; any other attribute is written as
# its OID and the hex of its DER encoding, as Java does (``1.2.840.113549.1.9.1=#16...``).
_JAVA_KEYWORDS = {
    NameOID.COMMON_NAME: "CN", NameOID.COUNTRY_NAME: "C", NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST", NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.STREET_ADDRESS: "STREET",
    NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID",
}
_STRING_CODECS = {12: "utf-8", 19: "ascii", 20: "latin-1", 22: "ascii", 26: "ascii",
                  28: "utf-32-be", 30: "utf-16-be"}


def _der_hex(attribute: x509.NameAttribute) -> str | None:
    tag = int(getattr(getattr(attribute, "_type", None), "value", 0) or 0)
    codec = _STRING_CODECS.get(tag)
    if codec is None or not isinstance(attribute.value, str):
        return None
    body = attribute.value.encode(codec)
    size = len(body)
    length = bytes([size]) if size < 0x80 else (
        bytes([0x80 | ((size.bit_length() + 7) // 8)]) + size.to_bytes((size.bit_length() + 7)
                                                                        // 8, "big"))
    return "#" + (bytes([tag]) + length + body).hex()


def distinguished_name(name: x509.Name) -> str:
    """The RFC 2253 string Java's ``X500Principal.getName()`` gives: most specific RDN first."""
    rdns = []
    for rdn in reversed(name.rdns):
        parts = []
        for attribute in rdn:
            if attribute.oid in _JAVA_KEYWORDS:
                parts.append(attribute.rfc4514_string())
            else:
                hexed = _der_hex(attribute)
                parts.append(f"{attribute.oid.dotted_string}={hexed}" if hexed
                             else attribute.rfc4514_string())
        rdns.append("+".join(parts))
    return ",".join(rdns)


def principal_of_certificate(der: bytes | None) -> str:
    """Kafka's principal for a peer certificate: ``User:<subject DN>``, or ANONYMOUS without one."""
    if not der:
        return ANONYMOUS
    certificate = x509.load_der_x509_certificate(der)
    return f"User:{distinguished_name(certificate.subject)}"
