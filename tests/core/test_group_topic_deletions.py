"""The group core's part of a cluster's topic deletion (TopicDeletions, from the node's
UpdateMetadata): offsets of the deleted topic committed before the coordinator learned of
the deletion's start go, with tombstones; a namesake's, committed after, stay."""

from __future__ import annotations

from actors.core.offsets_codec import OffsetCommitKey, decode_record
from tests.core.test_group_state import Shell


def _deleted(shell: Shell, started: dict[str, str] | None = None,
             completed: dict[str, str] | None = None) -> None:
    shell.run(shell.core.topic_deletions(started or {}, completed or {}, shell.now))


def _tombstones(shell: Shell) -> list[tuple[str, str, int]]:
    out = []
    for record in shell.log:
        key, value = decode_record(record.key, record.value)
        if isinstance(key, OffsetCommitKey) and value is None:
            out.append((key.group, key.topic, key.partition))
    return out


def test_offsets_committed_before_the_start_go_and_later_ones_stay() -> None:
    shell = Shell()
    shell.commit({("t", 0): 6, ("u", 0): 3})
    shell.commit({("t", 1): 7}, group="h")
    shell.advance(100)
    _deleted(shell, started={"t": "id-1"})
    shell.advance(100)
    # a commit after the start (a namesake's, if a late completion came after it)
    shell.commit({("t", 2): 1}, group="h")
    shell.advance(100)
    _deleted(shell, completed={"t": "id-1"})
    assert shell.fetch() == {("u", 0): 3}
    assert shell.fetch(group="h") == {("t", 2): 1}
    assert sorted(_tombstones(shell)) == [("g", "t", 0), ("h", "t", 1)]
    # the log says the same once loaded again
    restarted = Shell()
    restarted.run(restarted.core.load(list(shell.log), 0))
    assert restarted.fetch() == {("u", 0): 3}
    assert restarted.fetch(group="h") == {("t", 2): 1}


def test_a_completion_heard_again_takes_nothing_committed_since() -> None:
    shell = Shell()
    shell.commit({("t", 0): 6})
    shell.advance(10)
    _deleted(shell, started={"t": "id-1"})
    shell.advance(10)
    _deleted(shell, completed={"t": "id-1"})
    assert shell.fetch() == {}
    shell.advance(10)
    shell.commit({("t", 0): 2})  # the namesake's
    shell.advance(10)
    _deleted(shell, started={"t": "id-1"}, completed={"t": "id-1"})  # a resend
    assert shell.fetch() == {("t", 0): 2}
    # the namesake's own deletion (another id) takes it
    _deleted(shell, started={"t": "id-2"})
    shell.advance(10)
    _deleted(shell, completed={"t": "id-2"})
    assert shell.fetch() == {}


def test_a_completion_without_a_start_takes_what_was_committed_until_it() -> None:
    shell = Shell()
    shell.commit({("t", 0): 6, ("t", 1): 4})
    shell.advance(10)
    _deleted(shell, completed={"t": ""})
    assert shell.fetch() == {}
    assert sorted(_tombstones(shell)) == [("g", "t", 0), ("g", "t", 1)]
    shell.advance(10)
    shell.commit({("t", 0): 1})
    shell.advance(10)
    _deleted(shell, completed={"t": ""})  # a resend
    assert shell.fetch() == {("t", 0): 1}


def test_a_commit_still_being_appended_goes_too() -> None:
    shell = Shell(auto_append=False)
    r = shell.commit({("t", 0): 6, ("u", 0): 3})
    shell.advance(10)
    _deleted(shell, started={"t": "id-1"})
    _deleted(shell, completed={"t": "id-1"})
    shell.complete_appends()
    assert r in shell.answers
    assert shell.fetch() == {("u", 0): 3}
    # the commit's record comes before the tombstone: loaded again, the offset stays gone
    restarted = Shell()
    restarted.run(restarted.core.load(list(shell.log), 0))
    assert restarted.fetch() == {("u", 0): 3}
