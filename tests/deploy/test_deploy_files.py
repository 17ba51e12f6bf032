"""The files in deploy/: the example config is the SPEC, the systemd unit is valid."""

from __future__ import annotations

import configparser
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest

from actors.cli import UserError
from actors.cli.serve import command as serve_command
from actors.runtime.config import INTERNAL_KEYS, SPEC, Config, example_toml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "deploy" / "actorlog.example.toml"
UNIT = ROOT / "deploy" / "actorlog.service"


def test_example_config_is_generated_from_the_spec() -> None:
    assert EXAMPLE.read_text() == example_toml(), (
        "deploy/actorlog.example.toml is stale: run "
        "`actorlog config example --out deploy/actorlog.example.toml`")
    data = tomllib.loads(EXAMPLE.read_text())
    # every key, in the SPEC's order; one without a default (TOML has no null) commented,
    # and an internal one (set, DescribeConfigs would list it, as Kafka's set ones)
    valued = {k: spec[0] for k, spec in SPEC.items()
              if spec[0] is not None and k not in INTERNAL_KEYS}
    assert list(data) == list(valued)
    assert {k: v for k, v in data.items()} == valued
    for key in set(SPEC) - set(valued) - INTERNAL_KEYS:
        assert f'\n# "{key}" =\n' in EXAMPLE.read_text(), key
    for key in INTERNAL_KEYS:
        assert f'\n# "{key}" = ' in EXAMPLE.read_text(), key
    assert Config.load(EXAMPLE).values == Config().values
    text = EXAMPLE.read_text()
    for key, (_default, _kind, meaning) in SPEC.items():
        assert meaning.split()[0] in text.split(f'"{key}"')[0].rsplit("\n\n", 1)[-1], key


def test_config_example_command_prints_the_file() -> None:
    proc = subprocess.run([sys.executable, "-m", "actors.cli", "config", "example"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == EXAMPLE.read_text()
    check = subprocess.run([sys.executable, "-m", "actors.cli", "config", "check", str(EXAMPLE)],
                           cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "0 key(s) differ" in check.stdout, check.stderr


def _unit() -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser


def test_systemd_unit_runs_serve_with_a_config_and_does_not_restart_on_a_user_error() -> None:
    service = _unit()["Service"]
    argv = shlex.split(service["ExecStart"])
    assert argv[0].endswith("/.venv/bin/actorlog") and argv[1] == "serve"
    ctx = serve_command.make_context("serve", argv[2:])  # the flags parse as serve's own
    assert ctx.params["config_file"] == "/etc/actorlog/actorlog.toml"
    assert int(service["RestartPreventExitStatus"]) == UserError.exit_code
    assert service["KillSignal"] == "SIGTERM" and service["Restart"] == "on-failure"
    assert service["Environment"].startswith("ACTORLOG_IPC_DIR=/run/")
    assert service["ReadWritePaths"] == f"/var/lib/{service['StateDirectory']}"
    with pytest.raises(click.UsageError):  # the check above can fail
        serve_command.make_context("serve", ["--no-such-flag"])


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is missing")
def test_systemd_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    unit = tmp_path / "actorlog.service"
    unit.write_text(UNIT.read_text().replace("/opt/actorlog", str(ROOT)))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
