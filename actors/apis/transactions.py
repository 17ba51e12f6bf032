"""Transactions are not served yet (issue 20): the one place that answers for them.

A transactional client first asks FindCoordinator for its transactional id
(key type 1). COORDINATOR_NOT_AVAILABLE, or Kafka's UNSUPPORTED_VERSION, make
librdkafka (confluent-kafka) look the coordinator up again every 500 ms until
init_transactions times out (60 s by default); the only answers it treats as
final at this step are the authorization errors. So the coordinator lookup
is refused with TRANSACTIONAL_ID_AUTHORIZATION_FAILED, whose message says
what is really missing: init_transactions fails at once with that message,
in librdkafka as in the Java client. When the TransactionCoordinator lands,
FindCoordinator answers it from here instead.
"""

from __future__ import annotations

from wire.errors import ErrorCode

TRANSACTION_COORDINATOR_ERROR = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
TRANSACTION_COORDINATOR_MESSAGE = (
    "transactions are not supported by this broker yet (actorlog): produce without "
    "transactional.id (idempotent producers work)")


def find_transaction_coordinator(transactional_id: str) -> tuple[int, str]:
    """FindCoordinator's (error code, message) for a transactional id."""
    del transactional_id  # every id is refused alike until transactions exist
    return int(TRANSACTION_COORDINATOR_ERROR), TRANSACTION_COORDINATOR_MESSAGE
