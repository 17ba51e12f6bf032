"""Running commands on a host: this machine, inside a network namespace, or over ssh.

Every runner takes an argv and runs it on its host; the same few shell
snippets then start a detached process with a pid file, look a process up
by pid (``ps``), signal it and read a file's tail, so a node is started and
stopped the same way wherever it runs. Processes in a namespace share this
machine's pid space, so their pids are real pids here too.

The ssh runner uses the ``ssh`` client in batch mode (no password prompt),
checks the host key against a known_hosts file this tool manages (the first
connection records it, a changed key is refused) or against the user's own
file, and can share one connection per host (ControlMaster), which
:meth:`Runner.close` ends.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from actors.hosts.spec import HostSpec

# $1 pid file, $2 log file, $3 working directory, then the command. The child
# writes its own pid (its pid stays the same through exec), so the file is
# right whether or not setsid had to fork; the parent waits for the file.
_DETACH = r"""
pidfile=$1; log=$2; dir=$3; shift 3
mkdir -p "$dir" && cd "$dir" || exit 97
rm -f "$pidfile"
setsid sh -c 'echo $$ > "$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidfile" "$@" \
    >>"$log" 2>&1 </dev/null &
i=0
while [ ! -s "$pidfile" ]; do
    i=$((i + 1)); [ "$i" -gt 400 ] && { echo "no pid file after 20 s" >&2; exit 98; }
    sleep 0.05
done
cat "$pidfile"
"""
# The text is written private (umask 077) and given its mode after: a secret key is
# never readable by others, not even while it is written.
_WRITE = (r'mkdir -p "$(dirname "$1")" && (umask 077 && cat > "$1.tmp") && chmod "$2" "$1.tmp"'
          r' && mv "$1.tmp" "$1"')
_PID_RE = re.compile(r"^\s*(\d+)\s*$")


class HostError(RuntimeError):
    """A command on a host failed; the message names the host, the command and its output."""


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class BytesResult:
    """A command's exit status, its stdout as bytes (an archive, say) and its stderr as text."""

    returncode: int
    stdout: bytes
    stderr: str


@dataclass(frozen=True)
class ProcessInfo:
    """What ``ps`` says about a pid: seconds since it started, its state letters, its argv."""

    pid: int
    elapsed_s: int
    state: str
    args: str

    @property
    def alive(self) -> bool:
        return not self.state.startswith(("Z", "X"))

    @property
    def paused(self) -> bool:
        return self.state.startswith("T")


def parse_ps_line(pid: int, line: str) -> ProcessInfo | None:
    """One line of ``ps -o etimes=,stat=,args=``; None if it does not parse."""
    parts = line.strip().split(None, 2)
    if len(parts) < 2 or not parts[0].isdigit():
        return None
    return ProcessInfo(pid, int(parts[0]), parts[1], parts[2] if len(parts) > 2 else "")


class Runner:
    """Runs argv on one host; subclasses say how (:meth:`wrap`)."""

    def __init__(self, host: HostSpec) -> None:
        self.host = host

    def wrap(self, command: list[str]) -> list[str]:
        return command

    def describe(self, command: list[str]) -> str:
        """The command as a user would type it here (for error messages)."""
        return shlex.join(self.wrap(command))

    def run(self, command: list[str], *, input_text: str | None = None,
            timeout_s: float = 60.0, check: bool = True) -> Result:
        proc = self._spawn(command, timeout_s, input=input_text, text=True,
                           stdin=None if input_text is not None else subprocess.DEVNULL)
        result = Result(proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            raise HostError(self.failure(command, result))
        return result

    def run_bytes(self, command: list[str], *, timeout_s: float = 120.0) -> BytesResult:
        """``command`` with its stdout kept as bytes; the exit status is the caller's to judge."""
        proc = self._spawn(command, timeout_s, stdin=subprocess.DEVNULL)
        return BytesResult(proc.returncode, proc.stdout,
                           proc.stderr.decode("utf-8", errors="replace"))

    def _spawn(self, command: list[str], timeout_s: float,
               **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """``command`` wrapped for this host and run to its end; a missing program or a
        timeout is one HostError line naming the host and the command."""
        argv = self.wrap(command)
        try:
            return subprocess.run(argv, capture_output=True, timeout=timeout_s, **kwargs)
        except FileNotFoundError:
            raise HostError(f"host {self.host.name}: {argv[0]!r} is not installed here "
                            f"(running {shlex.join(argv)})") from None
        except subprocess.TimeoutExpired:
            raise HostError(f"host {self.host.name}: `{shlex.join(argv)}` did not finish "
                            f"within {timeout_s:g} s") from None

    def failure(self, command: list[str], result: Result) -> str:
        output = (result.stderr.strip() or result.stdout.strip()).splitlines()[-5:]
        text = " / ".join(output) or "no output"
        return (f"host {self.host.name}: `{self.describe(command)}` exited with "
                f"{result.returncode}: {text}")

    def sh(self, script: str, *args: str, input_text: str | None = None,
           timeout_s: float = 60.0, check: bool = True) -> Result:
        return self.run(["sh", "-c", script, "sh", *args], input_text=input_text,
                        timeout_s=timeout_s, check=check)

    # ------------------------------------------------------------- files
    def write_file(self, path: str, text: str, mode: int = 0o644) -> None:
        self.sh(_WRITE, path, f"{mode:o}", input_text=text)

    def read_tail(self, path: str, lines: int = 30) -> str:
        result = self.run(["tail", "-n", str(lines), path], check=False)
        return result.stdout if result.returncode == 0 else f"(no log at {path})"

    def read_pid(self, path: str) -> int | None:
        result = self.run(["cat", path], check=False)
        match = _PID_RE.match(result.stdout) if result.returncode == 0 else None
        return int(match.group(1)) if match else None

    def makedirs(self, path: str) -> None:
        self.run(["mkdir", "-p", path])

    # --------------------------------------------------------- processes
    def start_detached(self, command: list[str], *, cwd: str, log_path: str,
                       pid_path: str) -> int:
        """Start ``command`` in its own session, output appended to ``log_path``; its pid."""
        result = self.sh(_DETACH, pid_path, log_path, cwd, *command, timeout_s=60)
        match = _PID_RE.match(result.stdout)
        if not match:
            raise HostError(f"host {self.host.name}: no pid from `{shlex.join(command)}`: "
                            f"{result.stdout.strip()!r}")
        return int(match.group(1))

    def process(self, pid: int) -> ProcessInfo | None:
        # -ww: whole command lines whatever COLUMNS says (the marker may be far along)
        result = self.run(["ps", "-ww", "-o", "etimes=,stat=,args=", "-p", str(pid)],
                          check=False)
        if result.returncode != 0:
            return None
        return parse_ps_line(pid, result.stdout.strip().splitlines()[0]) \
            if result.stdout.strip() else None

    def group(self, pgid: int) -> list[ProcessInfo]:
        """The live processes of process group ``pgid`` (a detached process and those it
        started), by ``ps`` of every process; empty if there are none."""
        result = self.run(["ps", "-e", "-ww", "-o", "pid=,pgid=,etimes=,stat=,args="],
                          check=False)
        found = []
        for line in result.stdout.splitlines() if result.returncode == 0 else ():
            parts = line.split(None, 2)
            if len(parts) < 3 or not (parts[0].isdigit() and parts[1] == str(pgid)):
                continue
            info = parse_ps_line(int(parts[0]), parts[2])
            if info is not None and info.alive:
                found.append(info)
        return found

    def signal(self, pid: int, signame: str, group: bool = False) -> bool:
        """``kill -s SIG pid``; False if there is no such process (any more). With ``group``,
        the process group ``pid`` leads (a detached process and what it started), or the
        process alone when it leads none."""
        if group and self.run(["kill", "-s", signame, "--", f"-{pid}"],
                              check=False).returncode == 0:
            return True
        return self.run(["kill", "-s", signame, str(pid)], check=False).returncode == 0

    def close(self) -> None:
        """Release what the runner holds open (an ssh master connection)."""


class LocalRunner(Runner):
    """This machine, this network namespace."""


class NetnsRunner(Runner):
    """Inside the host's network namespace (``ip netns exec``; needs root)."""

    def wrap(self, command: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.host.netns, *command]


class SshFailed(HostError):
    """ssh itself failed (its exit status 255: no connection, a refused key, a dropped
    session): the command did not run on the host, or its end was not seen."""


class SshRunner(Runner):
    """Over ssh, in batch mode, with host keys checked (see the module docstring)."""

    def __init__(self, host: HostSpec, known_hosts: Path, control_dir: Path | None = None,
                 connect_timeout_s: int = 5) -> None:
        super().__init__(host)
        self.managed_known_hosts = host.known_hosts is None
        self.known_hosts = Path(host.known_hosts) if host.known_hosts else known_hosts
        self.control_dir = control_dir or Path(f"/tmp/actorlog-ssh-{os.getuid()}")
        self.connect_timeout_s = connect_timeout_s

    def options(self) -> list[str]:
        opts = [
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={self.connect_timeout_s}",
            "-o", f"StrictHostKeyChecking={'accept-new' if self.managed_known_hosts else 'yes'}",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "GlobalKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR",
            "-p", str(self.host.port),
        ]
        if self.host.user:
            opts += ["-l", self.host.user]
        key = self.host.identity_file
        if key:
            if not os.path.exists(key) and os.path.isfile(f"{key}.pub"):
                # the private key is the agent's: ssh drops a -i file that does not exist,
                # and with the public one signs with the agent's key that matches it
                key = f"{key}.pub"
            opts += ["-i", key, "-o", "IdentitiesOnly=yes"]
        if self.host.control_master:
            opts += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}",
                     "-o", "ControlPersist=120"]
        return opts

    @property
    def control_path(self) -> str:
        return str(self.control_dir / "%C")

    def wrap(self, command: list[str]) -> list[str]:
        # ssh hands the remote shell one string: quote each word for it.
        return ["ssh", "-T", *self.options(), self.host.address, "--", shlex.join(command)]

    def describe(self, command: list[str]) -> str:
        return f"ssh {self.host.ssh_target} -p {self.host.port} {shlex.join(command)}"

    def prepare(self) -> None:
        """What ssh needs here before it runs; a missing identity file is refused: ssh
        would only warn and then fail as "Permission denied", which names the wrong cause."""
        problem = identity_problem(self.host)
        if problem:
            raise HostError(problem)
        if self.managed_known_hosts:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        if self.host.control_master:
            self.control_dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    def run(self, command: list[str], *, input_text: str | None = None,
            timeout_s: float = 60.0, check: bool = True) -> Result:
        self.prepare()
        result = super().run(command, input_text=input_text, timeout_s=timeout_s, check=False)
        if result.returncode == 255:  # ssh itself failed: the command never ran
            raise SshFailed(self.ssh_failure(result.stderr))
        if check and result.returncode != 0:
            raise HostError(self.failure(command, result))
        return result

    def run_bytes(self, command: list[str], *, timeout_s: float = 120.0) -> BytesResult:
        self.prepare()
        result = super().run_bytes(command, timeout_s=timeout_s)
        if result.returncode == 255:  # ssh itself failed: the command never ran
            raise SshFailed(self.ssh_failure(result.stderr))
        return result

    def ssh_failure(self, stderr: str) -> str:
        where = f"host {self.host.name} ({self.host.ssh_target}, port {self.host.port})"
        if "IDENTIFICATION HAS CHANGED" in stderr or "Host key verification failed" in stderr:
            return (f"{where}: its ssh host key does not match the one recorded in "
                    f"{self.known_hosts}; if the host was reinstalled, remove its line there")
        last = [line for line in stderr.strip().splitlines() if line.strip()][-1:] or \
            ["no output"]
        return f"{where}: ssh failed: {last[0]}"

    def close(self) -> None:
        if not self.host.control_master:
            return
        subprocess.run(["ssh", "-O", "exit", "-o", f"ControlPath={self.control_path}",
                        "-p", str(self.host.port), self.host.address],
                       capture_output=True, timeout=15, check=False)


def identity_problem(host: HostSpec) -> str | None:
    """Why the ssh host's identity_file cannot be used from here, or None."""
    key = host.identity_file
    if host.via != "ssh" or not key:
        return None
    if not os.path.exists(key) and os.path.isfile(f"{key}.pub"):
        return None  # ssh signs with the agent's key that matches KEY.pub
    if not os.path.isfile(key):
        return (f"host {host.name}: identity_file {key} (in [hosts.{host.name}]) "
                f"{'is not a file' if os.path.exists(key) else 'does not exist'} here")
    if not os.access(key, os.R_OK):
        return f"host {host.name}: identity_file {key} (in [hosts.{host.name}]) is not readable"
    return None


def runner_for(host: HostSpec, state_dir: Path) -> Runner:
    if host.via == "ssh":
        return SshRunner(host, state_dir / "known_hosts")
    if host.via == "netns":
        return NetnsRunner(host)
    return LocalRunner(host)


def actorlog_command(host: HostSpec) -> str:
    """The actorlog executable on the host: the spec's, else this one (local, netns)."""
    if host.actorlog:
        return host.actorlog
    if host.via != "ssh":
        mine = Path(sys.executable).parent / "actorlog"
        if mine.exists():
            return str(mine)
    return "actorlog"


def python_command(host: HostSpec) -> str:
    """The Python that runs actorlog's modules on the host (for the ZooKeeper launcher)."""
    if host.python:
        return host.python
    if host.via != "ssh":
        return sys.executable
    actorlog = actorlog_command(host)
    return str(Path(actorlog).parent / "python") if "/" in actorlog else "python3"


def local_version() -> str:
    from importlib.metadata import version

    return version("actorlog")


def check_version(runner: Runner) -> str:
    """The actorlog version the host runs; HostError unless it is this one's."""
    host = runner.host
    command = [actorlog_command(host), "--version"]
    result = runner.run(command, check=False, timeout_s=60)
    if result.returncode == 127 or "not found" in result.stderr:
        raise HostError(f"host {host.name}: {command[0]!r} is not found there; install "
                        f"actorlog on it (deploy/install.sh) and set actorlog = "
                        f"\"/path/to/.venv/bin/actorlog\" in [hosts.{host.name}]")
    match = re.search(r"version\s+(\S+)", result.stdout)
    if result.returncode != 0 or not match:
        raise HostError(runner.failure(command, result))
    theirs, ours = match.group(1), local_version()
    if theirs != ours:
        raise HostError(f"host {host.name} runs actorlog {theirs}, this is actorlog {ours}: "
                        "install the same version on every host")
    return theirs
