"""`actorlog bench compare --a-setting/--num-processes`: broker settings for the A it starts.

A mistake (no `=`, settings for a broker it does not start) is one line, not a traceback.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

pytest.importorskip("confluent_kafka", reason="the load tool drives brokers with confluent-kafka")
pytest.importorskip("hdrh", reason="the load tool needs hdrhistogram (the bench extra)")

from bench import compare


def test_settings_are_key_value_pairs_integers_read_as_integers() -> None:
    assert compare.parse_settings(("num.processes=2", "log.dir = /x", "a=-3")) == {
        "num.processes": 2, "log.dir": "/x", "a": -3}
    with pytest.raises(click.BadParameter, match="not KEY=VALUE"):
        compare.parse_settings(("num.processes",))


@pytest.mark.parametrize("args, says", [
    (["--a", "127.0.0.1:1", "--b", "127.0.0.1:2", "--num-processes", "2"],
     "names a running broker"),
    (["--tls", "--a-setting", "num.processes=1"], "leave out --a-setting"),
    (["--a-cmd", "actorlog", "--b", "127.0.0.1:2", "--a-setting", "oops"], "not KEY=VALUE"),
])
def test_settings_for_a_broker_the_bench_does_not_start_are_refused(args: list[str],
                                                                    says: str) -> None:
    result = CliRunner().invoke(compare.command, [*args, "--scenarios", "small_requests",
                                                  "--rounds", "1", "--no-progress"])
    assert result.exit_code == 2
    assert says in result.output
    assert "Traceback" not in result.output
