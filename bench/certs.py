"""Real certificates for the TLS tests and `bench compare --tls`, made with
``cryptography`` into a directory.

``make_pki(dir)`` writes a CA, a server keystore (chain + key, as Kafka's PEM
keystore), the same with an encrypted key, client keystores signed by the CA
(one valid, one expired), one signed by a foreign CA, and the truststore.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "keystore-secret"


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Path                  # CA certificate (the truststore)
    server: Path              # server chain + key
    server_encrypted: Path    # same, key encrypted with KEY_PASSWORD
    client: Path              # client chain + key, CN=alice
    client_expired: Path      # expired client certificate
    client_foreign: Path      # signed by a CA the server does not trust
    foreign_ca: Path
    client_subject: str       # Kafka's principal name of `client`


def _name(*attrs: tuple[x509.ObjectIdentifier, str]) -> x509.Name:
    return x509.Name([x509.NameAttribute(oid, value) for oid, value in attrs])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _ca(name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    subject = _name((NameOID.ORGANIZATION_NAME, "actorlog tests"), (NameOID.COMMON_NAME, name))
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    return cert, key


def _leaf(ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], subject: x509.Name,
          server: bool, expired: bool = False
          ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = dt.datetime.now(dt.UTC)
    start, end = ((now - dt.timedelta(days=10), now - dt.timedelta(days=1)) if expired
                  else (now - dt.timedelta(days=1), now + dt.timedelta(days=30)))
    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca[0].subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(start).not_valid_after(end)
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage(
                   [ExtendedKeyUsageOID.SERVER_AUTH if server
                    else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1")),
            x509.IPAddress(IPv6Address("::1"))]), critical=False)
    return builder.sign(ca[1], hashes.SHA256()), key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _write_keystore(path: Path, chain: list[x509.Certificate], key: ec.EllipticCurvePrivateKey,
                    password: str | None = None) -> Path:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                encryption)
    path.write_bytes(b"".join(_pem(c) for c in chain) + key_pem)
    return path


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("actorlog test CA")
    foreign = _ca("someone else's CA")
    (directory / "ca.pem").write_bytes(_pem(ca[0]))
    (directory / "foreign-ca.pem").write_bytes(_pem(foreign[0]))
    server = _leaf(ca, _name((NameOID.COMMON_NAME, "localhost")), server=True)
    client_subject = _name((NameOID.COUNTRY_NAME, "US"), (NameOID.ORGANIZATION_NAME, "Acme, Inc"),
                           (NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                           (NameOID.COMMON_NAME, "alice"))
    client = _leaf(ca, client_subject, server=False)
    expired = _leaf(ca, _name((NameOID.COMMON_NAME, "old-alice")), server=False, expired=True)
    stranger = _leaf(foreign, _name((NameOID.COMMON_NAME, "mallory")), server=False)
    return Pki(
        dir=directory,
        ca=directory / "ca.pem",
        server=_write_keystore(directory / "server.pem", [server[0], ca[0]], server[1]),
        server_encrypted=_write_keystore(directory / "server-enc.pem", [server[0], ca[0]],
                                         server[1], KEY_PASSWORD),
        client=_write_keystore(directory / "client.pem", [client[0]], client[1]),
        client_expired=_write_keystore(directory / "client-expired.pem", [expired[0]],
                                       expired[1]),
        client_foreign=_write_keystore(directory / "client-foreign.pem", [stranger[0]],
                                       stranger[1]),
        foreign_ca=directory / "foreign-ca.pem",
        client_subject="CN=alice,OU=eng,O=Acme\\, Inc,C=US",
    )
