"""ListTransactions' answer folded from every transaction coordinator, without actors.

The request is encoded as kafka-python encodes it, decoded by the broker codec, run through
its API generator with each coordinator's answer given by hand, and the response encoded
and decoded again as a client would. With num.processes > 1 every process's handler asks
process 0's coordinators, so the fold is what every process answers.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin.transactions import ListTransactionsRequest

from actors.apis import transactions
from actors.apis.base import HandlerContext
from actors.runtime.address import Address
from actors.runtime.clock import ManualClock
from actors.runtime.config import Config
from actors.topology import Topology
from actors.transaction_coordinator import txn_coordinator_name
from wire import kafka_codec as kc
from wire.api_versions import ADVERTISED_BY_KEY
from wire.errors import ErrorCode
from wire.transaction_messages import ListTxns, ListTxnsDone, TxnListRow

LOADING = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
# process 1 of a two-process broker: its coordinators live in process 0 ("n")
PROCESS_1 = Topology("n-1", 1, 1, 1, 1, 2, home="n", process_nodes=("n", "n-1"))


def _versions() -> list[int]:
    entry = ADVERTISED_BY_KEY[66]
    return list(range(entry.min_version, entry.max_version + 1))


def _list(version: int, answers: dict[str, ListTxnsDone]) -> tuple[Any, list[Address]]:
    """(decoded response, coordinators asked); ``answers`` by coordinator name."""
    request = ListTransactionsRequest(state_filters=[], producer_id_filters=[])
    request.with_header(correlation_id=5, client_id="client-a")
    frame = bytes(request.encode(version=version, header=True))
    header = kc.parse_request_header(frame)
    decoded = kc.decode_request(header, frame)
    ctx = HandlerContext(PROCESS_1, Config(), 1, "127.0.0.1", 9092, "cluster", 0, {},
                         clock=ManualClock())
    gen = transactions.handle_list_transactions(ctx, header, decoded)
    calls = next(gen)
    asked = [c.target for c in calls]
    msgs = [c.make(100 + i) for i, c in enumerate(calls)]
    assert all(isinstance(m, ListTxns) for m in msgs)
    with pytest.raises(StopIteration) as stop:
        gen.send([answers[t.name]._replace(req_id=m.req_id)
                  for t, m in zip(asked, msgs, strict=True)])
    body = kc.encode_response(header, stop.value.value.data)[4:]
    return kc.response_class(66, version).decode(body, version=version, header=True), asked


@pytest.mark.parametrize("version", _versions())
def test_list_transactions_lists_every_coordinators_transactions(version: int) -> None:
    answers = {txn_coordinator_name(0): ListTxnsDone(0, 0, [TxnListRow("a", 1, "Ongoing")]),
               txn_coordinator_name(1): ListTxnsDone(0, 0, [TxnListRow("b", 2, "Empty")])}
    response, asked = _list(version, answers)
    assert [a.node for a in asked] == ["n", "n"]
    assert response.error_code == 0
    assert sorted((s.transactional_id, s.producer_id, s.transaction_state)
                  for s in response.transaction_states) == [("a", 1, "Ongoing"),
                                                            ("b", 2, "Empty")]


@pytest.mark.parametrize("version", _versions())
def test_list_transactions_is_refused_while_any_coordinator_loads(version: int) -> None:
    """One coordinator loading a partition: the others' rows alone would miss its
    transactions, so the answer is COORDINATOR_LOAD_IN_PROGRESS with no rows, as Kafka's
    listTransactionStates while any partition loads."""
    answers = {txn_coordinator_name(0): ListTxnsDone(0, 0, [TxnListRow("a", 1, "Ongoing")]),
               txn_coordinator_name(1): ListTxnsDone(0, LOADING, [])}
    response, _asked = _list(version, answers)
    assert response.error_code == LOADING
    assert list(response.transaction_states) == []
