"""`--command-config FILE`: a Kafka client's security settings for `topics` and `groups`.

The file is what kafka-topics.sh and kafka-consumer-groups.sh take: Java
properties with Kafka's client config names. ``security.protocol`` (PLAINTEXT,
SSL, SASL_PLAINTEXT, SASL_SSL); ``sasl.mechanism`` (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512) with the login either in a Java client's ``sasl.jaas.config``
(``... required username="u" password="p";``) or librdkafka's ``sasl.username``
and ``sasl.password``; for TLS a PEM CA in ``ssl.ca.location`` (or a PEM
``ssl.truststore.location``; a JKS file is not read), a client certificate and
key for mutual TLS in ``ssl.certificate.location`` / ``ssl.key.location`` (or a
PEM ``ssl.keystore.location`` holding both) with ``ssl.key.password``, and
``ssl.endpoint.identification.algorithm`` (``https``, the default, checks the
broker's name; empty does not). Other keys are named in one warning line and
left alone.
"""

from __future__ import annotations

import re
import ssl
from pathlib import Path
from typing import Any

from actors.runtime.properties import PropertiesError
from actors.runtime.properties import read_properties as _read_properties

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN = frozenset({
    "security.protocol", "sasl.mechanism", "sasl.jaas.config", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.truststore.location", "ssl.truststore.type",
    "ssl.certificate.location", "ssl.key.location", "ssl.keystore.location",
    "ssl.keystore.type", "ssl.key.password", "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm",
})


class ClientConfigError(ValueError):
    """A setting that cannot be used: the message is one line naming the key."""


def read_properties(text: str) -> dict[str, str]:
    """Java's .properties form (actors.runtime.properties); ClientConfigError for what
    Java refuses."""
    try:
        return _read_properties(text)
    except PropertiesError as exc:
        raise ClientConfigError(str(exc)) from None


_JAAS_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "a": "\a", "v": "\v"}


def _jaas_word_char(char: str, first: bool) -> bool:
    # java.io.StreamTokenizer as Kafka's JaasConfig sets it up: letters, chars from U+00A0,
    # and - _ $ start a word; digits and '.' go on with one
    return (char.isascii() and char.isalpha()) or char in "-_$" or ord(char) >= 0xA0 or (
        not first and (char.isdigit() or char == "."))


def _jaas_tokens(text: str) -> list[tuple[str, str | None]]:
    """Kafka's JaasConfig tokens (its StreamTokenizer): ("word", text), ("quoted", text),
    ("number", None) (a Java number has no string value) or (char, None) for any other
    char; blanks, ``//`` and ``/* */`` comments skipped."""
    tokens: list[tuple[str, str | None]] = []
    i, end = 0, len(text)
    while i < end:
        char = text[i]
        if char <= " ":
            i += 1
        elif text.startswith("//", i):
            while i < end and text[i] not in "\r\n":
                i += 1
        elif text.startswith("/*", i):
            close = text.find("*/", i + 2)
            i = end if close < 0 else close + 2
        elif char == "/":  # StreamTokenizer's comment char: the rest of the line
            while i < end and text[i] not in "\r\n":
                i += 1
        elif char in "\"'":
            i += 1
            value: list[str] = []
            while i < end and text[i] != char and text[i] not in "\r\n":
                if text[i] == "\\" and i + 1 < end:
                    octal = re.match(r"[0-3][0-7]{0,2}|[4-7][0-7]?", text[i + 1:])
                    if octal:
                        value.append(chr(int(octal.group(), 8)))
                        i += 1 + len(octal.group())
                        continue
                    value.append(_JAAS_ESCAPES.get(text[i + 1], text[i + 1]))
                    i += 2
                else:
                    value.append(text[i])
                    i += 1
            i += 1  # the closing quote (an unclosed one ends at the line's end)
            tokens.append(("quoted", "".join(value)))
        elif _jaas_word_char(char, True):
            start = i
            while i < end and _jaas_word_char(text[i], False):
                i += 1
            tokens.append(("word", text[start:i]))
        elif char.isdigit() or char == ".":
            while i < end and (text[i].isdigit() or text[i] == "."):
                i += 1
            tokens.append(("number", None))
        else:
            tokens.append((char, None))
            i += 1
    return tokens


def _jaas_login(jaas: str) -> tuple[str | None, str | None]:
    """username and password of a Java client's sasl.jaas.config (Plain or Scram
    LoginModule), read as Kafka's JaasConfig reads it: ``Module flag key=value ...;``,
    a value a word or a quoted string; ClientConfigError naming what is wrong."""
    tokens = _jaas_tokens(jaas)
    options: dict[str, str] = {}
    i = 0
    if not tokens:
        raise ClientConfigError("sasl.jaas.config: login module not specified")
    while i < len(tokens):
        if tokens[i][1] is None or i + 1 >= len(tokens) or tokens[i + 1][1] is None:
            raise ClientConfigError("sasl.jaas.config: 'LoginModule required "
                                    "username=\"...\" password=\"...\";' expected")
        i += 2  # the login module and its control flag
        while i < len(tokens) and tokens[i][0] != ";":
            key = tokens[i][1]
            if key is None:
                raise ClientConfigError(f"sasl.jaas.config: {tokens[i][0]!r} where an "
                                        f"option's name was expected")
            value = tokens[i + 2][1] if i + 2 < len(tokens) else None
            if tokens[i + 1:i + 2] != [("=", None)] or value is None:
                raise ClientConfigError(f"sasl.jaas.config: value not specified for key "
                                        f"'{key}'")
            options.setdefault(key, value)  # the first module's login
            i += 3
        if i >= len(tokens):
            raise ClientConfigError("sasl.jaas.config: not terminated by a semicolon")
        i += 1
    return options.get("username"), options.get("password")


def _pem_file(settings: dict[str, str], key: str) -> str | None:
    path = settings.get(key, "").strip()
    if not path:
        return None
    try:
        head = Path(path).read_bytes()[:4096]
    except OSError as exc:
        raise ClientConfigError(f"{key}={path}: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in head:
        raise ClientConfigError(f"{key}={path}: not a PEM file (a JKS or PKCS12 store is not "
                                f"read; give PEM certificates)")
    return path


def kafka_python_settings(settings: dict[str, str]) -> dict[str, Any]:
    """kafka-python client arguments for Kafka's client settings; ClientConfigError for a
    value that cannot work (unknown protocol or mechanism, missing login or file)."""
    protocol = settings.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol not in PROTOCOLS:
        raise ClientConfigError(f"security.protocol={settings['security.protocol']}: "
                                f"not one of {', '.join(PROTOCOLS)}")
    out: dict[str, Any] = {"security_protocol": protocol}
    if protocol.startswith("SASL_"):
        mechanism = settings.get("sasl.mechanism", "").strip().upper()
        if mechanism not in MECHANISMS:
            raise ClientConfigError(
                f"sasl.mechanism={settings.get('sasl.mechanism', '')}: "
                f"{protocol} needs one of {', '.join(MECHANISMS)}")
        jaas = settings.get("sasl.jaas.config", "")
        user, password = _jaas_login(jaas) if jaas.strip() else (None, None)
        user = settings.get("sasl.username", user)
        password = settings.get("sasl.password", password)
        if jaas.strip() and (not user or password is None):
            missing = "username" if not user else "password"
            raise ClientConfigError(f"sasl.jaas.config has no {missing} (or give "
                                    f"sasl.username and sasl.password)")
        if not user or password is None:
            raise ClientConfigError(
                f"{protocol} needs a login: sasl.jaas.config with username=\"...\" "
                f"password=\"...\", or sasl.username and sasl.password")
        out |= {"sasl_mechanism": mechanism, "sasl_plain_username": user,
                "sasl_plain_password": password}
    if protocol.endswith("SSL"):
        out["ssl_context"] = _ssl_context(settings)
    return out


def _ssl_context(settings: dict[str, str]) -> ssl.SSLContext:
    ca = _pem_file(settings, "ssl.ca.location") or _pem_file(settings, "ssl.truststore.location")
    cert_key = "ssl.certificate.location"
    cert = _pem_file(settings, cert_key)
    if cert is None:
        cert_key = "ssl.keystore.location"
        cert = _pem_file(settings, cert_key)
    key = _pem_file(settings, "ssl.key.location")
    if key is not None and cert is None:
        raise ClientConfigError("ssl.key.location needs ssl.certificate.location (the "
                                "client certificate of that key)")
    algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    if algorithm not in ("https", ""):
        raise ClientConfigError(f"ssl.endpoint.identification.algorithm={algorithm}: "
                                f"'https' (check the broker's name) or empty (do not)")
    try:
        context = ssl.create_default_context(cafile=ca)
    except ssl.SSLError as exc:
        raise ClientConfigError(f"ssl CA {ca}: {exc.reason or exc}") from None
    context.check_hostname = algorithm == "https"
    if cert is not None:
        password = settings.get("ssl.key.password") or None
        try:
            context.load_cert_chain(cert, key, password=password)
        except ssl.SSLError as exc:
            raise ClientConfigError(f"{cert_key}={cert}: {exc.reason or exc} (with "
                                    f"ssl.key.location / ssl.key.password)") from None
    return context


def librdkafka_settings(settings: dict[str, str]) -> dict[str, str]:
    """librdkafka (confluent-kafka) settings for Kafka's client settings, checked as
    kafka_python_settings checks them (the same ClientConfigError for the same file): the
    login of a sasl.jaas.config becomes sasl.username / sasl.password, a PEM
    truststore / keystore ssl.ca.location / ssl.certificate.location."""
    checked = kafka_python_settings(settings)
    protocol = checked["security_protocol"]
    out = {"security.protocol": protocol}
    if protocol.startswith("SASL_"):
        out |= {"sasl.mechanism": checked["sasl_mechanism"],
                "sasl.username": checked["sasl_plain_username"],
                "sasl.password": checked["sasl_plain_password"]}
    if protocol.endswith("SSL"):
        ca = _pem_file(settings, "ssl.ca.location") or _pem_file(settings,
                                                                 "ssl.truststore.location")
        cert = _pem_file(settings, "ssl.certificate.location") or _pem_file(
            settings, "ssl.keystore.location")
        key = _pem_file(settings, "ssl.key.location") or (cert if cert else None)
        if ca:
            out["ssl.ca.location"] = ca
        if cert:
            out["ssl.certificate.location"] = cert
            out["ssl.key.location"] = key or cert
        if settings.get("ssl.key.password"):
            out["ssl.key.password"] = settings["ssl.key.password"]
        algorithm = settings.get("ssl.endpoint.identification.algorithm", "https").strip()
        out["ssl.endpoint.identification.algorithm"] = algorithm.lower() or "none"
    return out


def read_file(path: str) -> dict[str, str]:
    """The Java properties of a command-config file; ClientConfigError naming the file.
    Read as UTF-8 (Java's Properties.load(InputStream) reads ISO-8859-1; a Kafka tool's
    config of ASCII text, or with \\uXXXX escapes, reads the same)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ClientConfigError(f"{path}: {reason or exc}") from None
    return read_properties(text)


def load(path: str) -> tuple[dict[str, Any], list[str]]:
    """kafka-python arguments from a command-config file, and the keys it did not know."""
    settings = read_file(path)
    return kafka_python_settings(settings), sorted(set(settings) - KNOWN)


def load_librdkafka(path: str) -> tuple[dict[str, str], list[str]]:
    """librdkafka settings from a command-config file, and the keys it did not know."""
    settings = read_file(path)
    return librdkafka_settings(settings), sorted(set(settings) - KNOWN)


def command_config(path: str, librdkafka: bool = False) -> dict[str, Any]:
    """A ``--command-config FILE`` option's settings for kafka-python (or librdkafka):
    a bad file is the command's one-line error, unknown keys one warning."""
    import click

    from actors.cli import UserError

    try:
        settings, unknown = (load_librdkafka if librdkafka else load)(path)
    except ClientConfigError as exc:
        raise UserError(f"--command-config {exc}") from None
    if unknown:
        click.echo(f"Warning: --command-config {path}: ignoring unknown "
                   f"{'key' if len(unknown) == 1 else 'keys'} {', '.join(unknown)}", err=True)
    return settings
