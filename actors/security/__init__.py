"""Security cores: listeners, TLS, SASL (PLAIN, SCRAM), credentials, ACLs, CURVE between nodes.

Each module is usable on its own and free of actors; the request path
(Processor, RequestHandler) wires them in.
"""
