"""IdleExpiry: the connections quiet for max_idle_ms, oldest first, on a clock handed in."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from actors.core.idle_expiry import IdleExpiry


def test_quiet_connections_expire_oldest_first_and_activity_resets_them() -> None:
    idle = IdleExpiry(100)
    idle.update(1, 0)
    idle.update(2, 10)
    idle.update(3, 20)
    assert idle.next_expiry_ms() == 100
    assert idle.expired(99) == []
    idle.update(1, 50)  # activity: 1 becomes the newest
    assert idle.next_expiry_ms() == 110
    assert idle.expired(115) == [2]
    assert idle.expired(200) == [3, 1]
    assert idle.expired(10_000) == [] and len(idle) == 0 and idle.next_expiry_ms() is None


def test_removed_connections_never_expire_and_negative_max_turns_expiry_off() -> None:
    idle = IdleExpiry(5)
    idle.update(7, 0)
    idle.remove(7)
    assert idle.expired(100) == []
    off = IdleExpiry(-1)
    off.update(1, 0)
    assert not off.enabled and off.expired(10**12) == [] and off.next_expiry_ms() is None


@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 50)), max_size=60),
       st.integers(1, 40))
@example([(1, 0), (2, 0), (1, 0), (3, 5)], 1)  # 1 and 2 tie at 0 ms; 1 was active last
def test_expired_matches_a_model_of_last_activity(steps: list[tuple[int, int]],
                                                  max_idle: int) -> None:
    idle = IdleExpiry(max_idle)
    last: dict[int, int] = {}
    now = 0
    for conn, advance in steps:
        now += advance
        got = idle.expired(now)
        want = sorted((c for c, t in last.items() if now - t >= max_idle), key=lambda c: last[c])
        assert got == want
        for c in got:
            del last[c]
        idle.update(conn, now)
        # The model keeps connections in order of activity too: a connection active
        # again moves behind those active at the same millisecond before it.
        last.pop(conn, None)
        last[conn] = now
