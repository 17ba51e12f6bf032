from __future__ import annotations

from pathlib import Path

import pytest

from actors.runtime.config import Config, ConfigError


def test_defaults_work_on_one_machine() -> None:
    cfg = Config()
    assert cfg["listeners"] == "127.0.0.1:9092"
    assert cfg["num.io.threads"] >= 1
    assert cfg["auto.create.topics.enable"] is True


def test_flat_and_nested_keys_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('"num.io.threads" = 4\n[log]\ndirs = "/data/x"\n[trace.sample]\nratio = 1\n')
    cfg = Config.load(path, {"listeners": "127.0.0.1:1234", "log.dirs": None})
    assert cfg["num.io.threads"] == 4
    assert cfg["log.dirs"] == "/data/x"  # None overrides leave the file's value
    assert cfg["trace.sample.ratio"] == 1.0
    assert cfg["listeners"] == "127.0.0.1:1234"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"num.io.thread" = 4\n', "unknown config key 'num.io.thread'"),
        ('"num.io.threads" = "four"\n', "num.io.threads must be an integer, got 'four'"),
        ('"auto.create.topics.enable" = 1\n', "auto.create.topics.enable must be true or false"),
        ("this is = not toml\n", "not valid TOML"),
    ],
)
def test_bad_files_are_refused_with_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        Config.load(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Config.load(tmp_path / "nope.toml")
