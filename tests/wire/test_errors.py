from __future__ import annotations

import kafka.errors

from wire.errors import ErrorCode

# kafka-python spells a few names differently; the codes are what matter.
_ALIASES = {
    "NONE": "NO_ERROR",
    "UNKNOWN_SERVER_ERROR": "UNKNOWN",
    "NOT_LEADER_OR_FOLLOWER": "NOT_LEADER_FOR_PARTITION",
    "MESSAGE_TOO_LARGE": "MESSAGE_SIZE_TOO_LARGE",
    "INVALID_TOPIC_EXCEPTION": "INVALID_TOPIC",
    "INVALID_REPLICA_ASSIGNMENT": "INVALID_REPLICATION_ASSIGNMENT",
}


def test_every_code_matches_kafka_python() -> None:
    for code in ErrorCode:
        cls = kafka.errors.for_code(int(code))
        assert cls.message == _ALIASES.get(code.name, code.name), code
