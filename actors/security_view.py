"""SecurityView: process 0's users and ACLs, kept by each other process of a cluster node.

num.processes > 1 with zookeeper.connect and SASL listeners or
``authorizer.class.name``: the node's ZooKeeper session lives in process 0,
whose ClusterController reads the SCRAM users and the ACLs and relays every
change to this actor in each of processes 1.. (``SecurityRelay``). It puts
them in the process's CredentialCache (read by its Processors' SASL) and
Authorizer (read by its handlers) through a :class:`SecurityMirror`, which the
handlers also feed with the answers to the admin requests they forward.
"""

from __future__ import annotations

from typing import Any

from actors.runtime.actor import Actor, handles
from actors.security.mirror import SecurityMirror
from wire.broker_messages import GetStats
from wire.security_messages import SecurityRelay


class SecurityView(Actor):
    mailbox_size = 0  # unbounded: a relay must never be refused

    def __init__(self, node: Any, name: str, *, mirror: SecurityMirror, **kw: Any) -> None:
        super().__init__(node, name, **kw)
        self.mirror = mirror

    @handles(SecurityRelay)
    def on_relay(self, msg: SecurityRelay) -> None:
        for problem in self.mirror.apply(msg):
            self.log.warning("SCRAM credentials skipped: {}", problem)
        if msg.acls_whole or msg.users_whole:
            authorizer, credentials = self.mirror.authorizer, self.mirror.credentials
            self.log.debug("users and ACLs of process 0 taken (version {}): {} ACLs, {} users",
                           msg.version,
                           len(authorizer.bindings()) if authorizer is not None else "no",
                           len(credentials.users()) if credentials is not None else "no")

    @handles(GetStats)
    def stats(self, _msg: GetStats) -> dict[str, Any]:
        mirror = self.mirror
        return {"version": mirror.version, "relays": mirror.applied,
                "acls": (len(mirror.authorizer.bindings())
                         if mirror.authorizer is not None else None),
                "users": (sorted(mirror.credentials.users())
                          if mirror.credentials is not None else None)}
