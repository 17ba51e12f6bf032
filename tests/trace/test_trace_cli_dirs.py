"""Every trace command takes its dirs the same way: ``--dir A B`` or ``--dir A --dir B``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from actors.cli import cli


def _trace(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["trace", *args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def two_nodes(real_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The real broker's traces and a copy of them standing in for a second node."""
    other = tmp_path_factory.mktemp("second") / "data"
    shutil.copytree(real_traces / "traces", other / "traces")
    return real_traces, other


def _events_written(output: str) -> int:
    return int(output.split("wrote ", 1)[1].split(" records", 1)[0])


def test_export_reads_every_dir_after_one_dir_option(two_nodes: tuple[Path, Path],
                                                     tmp_path: Path) -> None:
    a, b = (str(d) for d in two_nodes)
    code, one = _trace("export", "--dir", a, str(tmp_path / "one.json"))
    assert code == 0, one
    single = _events_written(one)
    assert single > 0
    for args in (["--dir", a, b, str(tmp_path / "x.json")],
                 ["--dir", a, "--dir", b, str(tmp_path / "x.json")],
                 [str(tmp_path / "x.json"), "--dir", a, b],
                 ["--format", "otlp", "--dir", a, b, str(tmp_path / "x.json")]):
        code, out = _trace("export", *args)
        assert code == 0, (args, out)
        assert _events_written(out) == 2 * single, (args, out)
        json.loads((tmp_path / "x.json").read_text())


def test_export_mistakes_name_the_fix(two_nodes: tuple[Path, Path], tmp_path: Path) -> None:
    a, _b = (str(d) for d in two_nodes)
    code, out = _trace("export", "--dir", a)
    assert code == 2 and "OUT" in out
    code, out = _trace("export", "--dir", str(tmp_path / "missing"), a, str(tmp_path / "o.json"))
    assert code == 2 and "does not exist" in out
    code, out = _trace("export", "--dir", a, str(tmp_path))
    assert code == 2 and "is a directory" in out


def test_find_and_list_take_several_dirs_after_one_option(two_nodes: tuple[Path, Path],
                                                          tmp_path: Path) -> None:
    """The second word after --dir is read: an empty first dir, the traces in the second."""
    _a, b = (str(d) for d in two_nodes)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out = _trace("find", "--dir", str(empty))
    assert code == 1 and "no matching" in out
    code, both = _trace("find", "--slowest", "1", "--dir", str(empty), b)
    assert code == 0 and int(both.split(" matching", 1)[0]) > 0, both
    code, listed = _trace("list", "--dir", str(empty), b, "--limit", "5")
    assert code == 0 and len(listed.splitlines()) == 5, listed


def test_analyze_takes_dirs_like_the_other_commands(two_nodes: tuple[Path, Path],
                                                    tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsing succeeds for --dir A B (it then stops at the missing Spark extra)."""
    a, b = (str(d) for d in two_nodes)
    monkeypatch.setitem(sys.modules, "pyspark", None)
    for args in (["--dir", a, b], ["--dir", a, "--dir", b], [a, b]):
        code, out = _trace("analyze", *args, "--out", str(tmp_path / "r"))
        assert code == 1 and "actorlog[spark]" in out, (args, out)
    code, out = _trace("analyze", "--out", str(tmp_path / "r"))
    assert code == 2 and "--dir DIR" in out


def test_list_of_nothing_is_one_line_and_exit_1(tmp_path: Path) -> None:
    """An empty file, or a dir with no trace file, named by --dir: one line, status 1
    (it printed nothing and exited 0); a missing path is click's usage error, 2."""
    empty_file = tmp_path / "node-1-1-1-000001.trace.parquet"
    empty_file.write_bytes(b"")
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    for path in (empty_file, empty_dir):
        code, out = _trace("list", "--dir", str(path))
        assert code == 1 and f"no traces in {path}" in out, out
        assert len(out.strip().splitlines()) == 1, out
    code, out = _trace("list", "--dir", str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in out, out
