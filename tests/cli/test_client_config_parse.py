"""The pure parsers of `--command-config`: Kafka's sasl.jaas.config as its JaasConfig
(a java.io.StreamTokenizer) reads it, and Java's .properties form."""

from __future__ import annotations

import logging

import pytest

from actors.cli.client_config import ClientConfigError, kafka_python_settings, read_properties

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"


def _login(jaas: str) -> tuple[str, str]:
    out = kafka_python_settings({"security.protocol": "SASL_PLAINTEXT",
                                 "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas})
    return out["sasl_plain_username"], out["sasl_plain_password"]


@pytest.mark.parametrize(("jaas", "login"), [
    (f'{PLAIN} required username="alice" password="s3cret";', ("alice", "s3cret")),
    (f'{PLAIN} required username="al ice" password="with spaces in";',
     ("al ice", "with spaces in")),
    (f'{PLAIN} required username="alice" password="a\\"quote\\\\slash";',
     ("alice", 'a"quote\\slash')),
    (f"{PLAIN} required username=alice password=$ecret-1_x;", ("alice", "$ecret-1_x")),
    (f'{PLAIN} required /* username="mallory" */ username="alice"\n'
     f'  // password="nope"\n  password="s3cret";', ("alice", "s3cret")),
    (f"{PLAIN} required password='single' username=alice;", ("alice", "single")),
])
def test_jaas_values_as_kafka_reads_them(jaas: str, login: tuple[str, str]) -> None:
    assert _login(jaas) == login


@pytest.mark.parametrize(("jaas", "words"), [
    (f'{PLAIN} required username="alice";', ["sasl.jaas.config has no password"]),
    (f'{PLAIN} required username="alice" password=;', ["value not specified", "password"]),
    (f"{PLAIN} required username=alice password=123;", ["value not specified", "password"]),
    (f'{PLAIN} required username="alice" password="x"', ["semicolon"]),
])
def test_a_malformed_jaas_login_is_named(jaas: str, words: list[str]) -> None:
    with pytest.raises(ClientConfigError) as info:
        _login(jaas)
    message = str(info.value)
    assert all(word in message for word in words), message
    assert "needs a login" not in message  # one was given, it is not right


def test_bootstrap_failures_logged_as_an_f_string_are_read() -> None:
    """kafka-python's manager logs a failed metadata refresh as an f-string (no args): the
    login failure in its text is the one line's reason, not 'is it running?'."""
    from kafka import errors

    from actors.cli.admin import _BootstrapFailures

    logger = logging.getLogger("kafka.net.manager")
    failures = _BootstrapFailures()
    logger.addHandler(failures)
    try:
        exc = errors.SaslAuthenticationFailedError("Authentication failed during "
                                                   "authentication due to invalid credentials")
        logger.warning("Bootstrap connection to %s failed: %s (backoff %.2f secs)",
                       "bootstrap-0", errors.KafkaConnectionError("socket disconnected"), 0.05)
        assert (failures.decisive, failures.last) == (
            None, "KafkaConnection: socket disconnected")
        logger.error(f"Bootstrap attempt to bootstrap-0 failed: {exc} (backoff 0.10 secs)")
    finally:
        logger.removeHandler(failures)
    assert failures.decisive == failures.last == (
        "SaslAuthenticationFailed: Authentication failed during authentication due to "
        "invalid credentials")


@pytest.mark.parametrize(("text", "expected"), [
    ("a=b\nkey value\nk2:v2\nk3 = v3\n", {"a": "b", "key": "value", "k2": "v2", "k3": "v3"}),
    ("tab=\\tx\\n\nuni=caf\\u00e9\\u0041\n", {"tab": "\tx\n", "uni": "caféA"}),
    ("k\\=x\\:y\\ z=v\n", {"k=x:y z": "v"}),
    ("odd=one \\\n    two\n", {"odd": "one two"}),
    ("even=ends\\\\\nnext=line\n", {"even": "ends\\", "next": "line"}),
    ("c=first\\\n#not a comment\n#a comment\n", {"c": "first#not a comment"}),
    ("dup=1\ndup=2\n", {"dup": "2"}),
    ("cr=1\rcrlf=2\r\nlf=3\n", {"cr": "1", "crlf": "2", "lf": "3"}),
    # \v is no line end and no blank for Java: part of the key
    ("\x0bv=1\n\f  ff=2\n", {"\x0bv": "1", "ff": "2"}),
    ("  ! comment\n  # comment\nkey\n", {"key": ""}),
])
def test_read_properties_as_java_does(text: str, expected: dict[str, str]) -> None:
    assert read_properties(text) == expected


def test_a_malformed_unicode_escape_is_named() -> None:
    with pytest.raises(ClientConfigError, match="uXXXX"):
        read_properties("k=\\u12g4\n")


def test_a_malformed_escape_names_the_key_not_the_value() -> None:
    """The value may be a password: the error names its key only."""
    with pytest.raises(ClientConfigError) as caught:
        read_properties("sasl.jaas.config=secret-\\u12g4-word\n")
    assert "sasl.jaas.config" in str(caught.value)
    assert "secret" not in str(caught.value), caught.value
    with pytest.raises(ClientConfigError, match="in the key 'k\\\\\\\\u12'"):
        read_properties("k\\u12=v\n")
