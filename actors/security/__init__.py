"""Security cores: listeners, TLS, SASL (PLAIN, SCRAM), credentials, ACLs, CURVE between nodes.

Each module is usable on its own and does no I/O of its own except where
its name says so (the key files of ``curve``, the files of ``local_store``,
the ZAP thread of ``zap_handler``, the log lines of ``authorizer_log``):

``listeners``       Kafka's listeners / advertised.listeners / protocol map
``tls``             an SSLContext from Kafka's PEM keystore keys; principals of certificates
``tls_connection``  a socket-free TLS connection (MemoryBIO) for the Processor's loop
``scram``           SCRAM credentials in Kafka's text form; the server's exchange (scramp)
``sasl``            the per-connection SASL state machine (handshake, authenticate, re-auth)
``credentials``     the credential cache SASL reads; users add/delete/describe
``scram_admin``     Describe/AlterUserScramCredentials (KIP-554) against the store
``acl``             Kafka's AclAuthorizer rules; resource, operation and pattern types
``acl_admin``       CreateAcls / DeleteAcls against the store
``api_acls``        which API needs which operation on which resource
``authorizer_log``  the ``authorizer`` logger
``local_store``     a single node's users and ACLs in its data dir
``curve``, ``zap``, ``zap_handler``  CURVE keys and the ZAP handler between nodes
``config``          the security config keys and their checks
"""

from actors.security.acl import Authorizer, Decision, Operation, ResourceType
from actors.security.config import SECURITY_SPEC, SecurityConfigError, SecuritySettings
from actors.security.listeners import Listener, SecurityProtocol, parse_listeners
from actors.security.sasl import SaslConnection
from actors.security.tls import TlsSettings, server_context
from actors.security.tls_connection import TlsConnection, TlsError

__all__ = [
    "SECURITY_SPEC",
    "Authorizer",
    "Decision",
    "Listener",
    "Operation",
    "ResourceType",
    "SaslConnection",
    "SecurityConfigError",
    "SecurityProtocol",
    "SecuritySettings",
    "TlsConnection",
    "TlsError",
    "TlsSettings",
    "parse_listeners",
    "server_context",
]
