"""ConnectionBalance: the fewest open connections win, ties in turn, dead processes never."""

from __future__ import annotations

import pytest

from actors.core.connection_balance import ConnectionBalance


def place(balance: ConnectionBalance, conn_ids: range, exclude: tuple[int, ...] = ()
          ) -> list[int]:
    chosen = []
    for conn_id in conn_ids:
        process = balance.choose(exclude)
        balance.opened(process, conn_id, "h")
        chosen.append(process)
    return chosen


def test_only_process_0_until_the_others_say_hello() -> None:
    balance = ConnectionBalance(3)
    assert place(balance, range(4)) == [0, 0, 0, 0]


def test_ties_go_in_turn_and_the_fewest_win() -> None:
    balance = ConnectionBalance(2)
    balance.up(1)
    assert place(balance, range(8)) == [0, 1, 0, 1, 0, 1, 0, 1]
    assert balance.counts() == [4, 4]
    for conn_id in (1, 3, 5):  # three of process 1's close
        assert balance.closed(1, conn_id) == "h"
    assert place(balance, range(10, 14)) == [1, 1, 1, 0]


def test_a_process_that_goes_down_loses_its_connections_and_gets_none() -> None:
    balance = ConnectionBalance(3)
    balance.up(1)
    balance.up(2)
    place(balance, range(6))
    assert balance.counts() == [2, 2, 2]
    assert balance.down(1) == ["h", "h"]
    assert balance.closed(1, 1) is None  # a late report of a connection it lost
    assert set(place(balance, range(10, 14))) == {0, 2}
    assert balance.up(1) == []
    assert place(balance, range(20, 24)) == [1, 1, 1, 1]


def test_excluded_processes_are_skipped_but_never_process_0() -> None:
    balance = ConnectionBalance(2)
    balance.up(1)
    assert place(balance, range(4), exclude=(1,)) == [0, 0, 0, 0]
    assert balance.choose(exclude=(0, 1)) == 0
    with pytest.raises(ValueError):
        balance.down(0)
