"""The group core's part of a cluster's topic deletion (TopicDeletions, from the node's
UpdateMetadata): at the completion every offset of the deleted topic goes, with
tombstones; a start alone takes nothing; a resent completion takes no namesake's."""

from __future__ import annotations

from actors.core.group_offsets import DELETIONS_REMEMBERED
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


def test_every_offset_of_the_topic_goes_at_the_completion_and_none_at_the_start() -> None:
    shell = Shell()
    shell.commit({("t", 0): 6, ("u", 0): 3})
    shell.commit({("t", 1): 7}, group="h")
    shell.advance(100)
    _deleted(shell, started={"t": "id-1"})
    assert shell.fetch() == {("t", 0): 6, ("u", 0): 3}  # a start alone takes nothing
    shell.advance(100)
    # a commit that passed a handler's check just before the start (or a clock behind)
    shell.commit({("t", 2): 1}, group="h")
    shell.advance(100)
    _deleted(shell, completed={"t": "id-1"})
    assert shell.fetch() == {("u", 0): 3}
    assert shell.fetch(group="h") == {}
    assert sorted(_tombstones(shell)) == [("g", "t", 0), ("h", "t", 1), ("h", "t", 2)]
    # the log says the same once loaded again
    restarted = Shell()
    restarted.run(restarted.core.load(list(shell.log), 0))
    assert restarted.fetch() == {("u", 0): 3}
    assert restarted.fetch(group="h") == {}


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


def test_the_deletions_remembered_are_bounded_and_the_latest_kept() -> None:
    shell = Shell()
    for i in range(DELETIONS_REMEMBERED + 10):
        _deleted(shell, completed={f"t{i}": f"id-{i}"})
    assert len(shell.core._deletions_done) == DELETIONS_REMEMBERED
    latest = f"t{DELETIONS_REMEMBERED + 9}"
    shell.commit({(latest, 0): 4})  # a namesake's, then the latest deletion resent
    _deleted(shell, completed={latest: f"id-{DELETIONS_REMEMBERED + 9}"})
    assert shell.fetch() == {(latest, 0): 4}
