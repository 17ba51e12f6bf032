"""num.processes: one broker's actors over several OS processes of one host.

Every process is a runtime node of its own (process 0 is the ``actorlog serve``
process, node ``<node>``; process k is ``<node>-p<k>``) and runs a share of the
partitions: shard i and purgatory i live in process ``i % N`` (Topology.shard;
num.processes.shard.placement = spread, the default; with ``first`` all of them
live in process 0 and processes 1.. run connections and handlers only),
with a Timer for its purgatories' waits. Process 0 alone runs the LogManager,
the controller, the group and transaction coordinators and the log cleaner.
Each process serves connections (same TLS context, same SCRAM users and ACLs), and
clients see one broker (one node id, one address). How connections
reach them is num.processes.connection.distribution: ``reuseport``, each of its
listeners is bound to the port of the same listener of process 0 with SO_REUSEPORT
and the kernel spreads new connections over the processes; ``handoff``, process 0
accepts them all and passes each socket to the process with the fewest (actors/
handoff.py), over a link per listener that process k opens when it starts. A handler
sends Append/Read/... to the shard that owns the partition, in its own process
or through the nodes' ipc gateways (one hop each way, as between threads), and
asks a shard of another process for reads as bytes (a file region's descriptor
means nothing in another process).

Processes 1.. open their shards' logs from the checkpoints on disk without
writing anything (process 0 holds the log dir's lock and its LogManager writes
the checkpoints for every shard, whose reports come as messages). Process 0's
ProcessSupervisor starts the others, restarts one that dies (its logs
recovered as after a crash; ``RESTARTS_MAX`` within ``RESTART_WINDOW_S``, past
that it stops the broker with one clear line; one killed by SIGKILL before it
was ready too, at the broker's start or during a restart), and stops them first at
shutdown: their shards' final checkpoint reports reach the LogManager while
process 0 still runs, so it writes the clean-shutdown marker once its own shards
closed too. A process whose parent dies gets SIGTERM (PR_SET_PDEATHSIG), so none
outlives the broker.

In a cluster (zookeeper.connect) process 0 also runs the ReplicaManager and the
replica fetchers, and it alone talks to other brokers: its gateway is the one
registered in /brokers/ids, the controller's LeaderAndIsr/StopReplica/UpdateMetadata
reach its ReplicaManager, which hands roles to the shards of every process and
forwards the metadata to every process's handlers (one ipc hop each); followers'
fetches reach its handlers, which read the shards of any process; fetched batches go
from its fetchers to the owning shard; a shard's ISR proposal goes to its
ReplicaManager. Markers another broker's transaction coordinator sends to a shard of
processes 1.. pass through a ShardRelay of process 0 under that shard's name.
Process k, before it takes connections, tells the ReplicaManager it runs
(ProcessStarted): its handlers get the metadata, and after a restart its shards get
their partitions' last roles again (RestoreRoles, as a shard a crash restarted in
place), the fetchers ask the followed ones where they end, and the shards have the
purgatories watch them again. Controlled shutdown runs before processes 1.. stop.

A restart must not write what was given up. While process k is away, the links of
the others keep what they send it, and deliver it to the new process once it listens;
the handlers give up what they sent it when they learn of the restart (ProcessStarted:
in a cluster the ReplicaManager forwards it, on a single node process k tells them
itself, and the single node's Controller too, which has the topic changes that wait for
its shards go on at once). So each process has a generation (0 at the broker's start, +1 at each
restart; the supervisor hands a process all of them at spawn), a handler stamps its
Appends with the generation it knows of the target shard's process, and a shard refuses
one stamped older than its own process: what a handler sent before it learnt of the
restart, and gave up then, is refused; what it sends after is written and answered.
A process spawned before a restart (the broker's start) reads the generations the
supervisor writes in the ipc dir before it takes connections, and tells its handlers.
A refusal also tells the handler the generation, should the notice not have reached it.
The fence covers what a restart gave up, not a request a handler gave up by its
abandon timeout while the target process lives on (slow, not restarted), nor the
coordinators' writes (unstamped; one they gave up after its timeout): those may still
be written, as a timed-out request may be on any broker.

The SCRAM users and ACLs (SASL listeners, ``authorizer.class.name``): on a single
node every process reads them from the data dir's security files; in a cluster
process 0's ClusterController alone reads them from ZooKeeper and relays them to
a SecurityView in each other process (all of them when it starts, then each
change), and those processes' handlers send the SCRAM and ACL admin requests to
it. A process waits for that first copy before it takes connections.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
import functools
import gc
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from loguru import logger

from wire.fingerprint import wire_fingerprint

RESTARTS_MAX = 5
RESTART_WINDOW_S = 60.0
READY_TIMEOUT_S = 60.0
# how long the supervisor's stop waits for its watch thread (a restart under way) to end
STOP_JOIN_S = 5.0
READY_LINE = "actorlog process ready"
# what process 0's supervisor logs once process k (the pid) is ready: the broker log's
# word that a process started or restarted serves (actors/hosts reads it after a kill)
SERVES_LINE = "process {} (pid {}) serves connections"
PROCESS_MODULE = "-m actors.processes "
# The steps a process waits on before it serves (the ReplicaManager's answer, its
# handlers' metadata, its shards' roles, the SCRAM users and ACLs) share one deadline,
# this much short of the supervisor's READY_TIMEOUT_S (which counts from the spawn): what
# follows them (the processors, the ready line) has time left, and a slow step ends the
# wait rather than have the supervisor kill the process and stop the broker.
READY_MARGIN_S = 10.0
# of that deadline, kept for take_security (the steps before it stop this much earlier)
SECURITY_SHARE_S = 10.0
# one readiness ask of an actor: a slow answer (a shard opening its logs) is asked again
READY_ASK_TIMEOUT_S = 5.0
PROCESS_LOCK_WAIT_S = 30.0
_PR_SET_PDEATHSIG = 1
# A process whose inter-node wire fingerprint is not process 0's exits with this: it was
# started from other code than process 0 runs (the code on disk changed under a running
# broker), and would dead-letter what the others send it. Its supervisor gives up on it.
WIRE_MISMATCH_EXIT = 78
TEST_HOLD_READY_ENV = "ACTORLOG_TEST_HOOK_HOLD_READY"
"""Test hook only: a path; a process 1.. holds before it takes connections (and so
before its ready line) until that file exists, at most until its readiness deadline,
so a test knows process 0 is still starting. Never set it outside tests."""


def process_node_name(main: str, index: int) -> str:
    """The runtime node name of process ``index`` (0 is the main process itself)."""
    return main if index == 0 else f"{main}-p{index}"


def process_index_of(args: str) -> int | None:
    """The index of a process 1.. of a broker from its command line as ``ps`` shows it
    (``python -m actors.processes <spec>``); None for any other command line."""
    at = args.find(PROCESS_MODULE)
    if at < 0:
        return None
    try:
        index = json.loads(args[at + len(PROCESS_MODULE):]).get("index")
    except (ValueError, AttributeError):
        return None
    return index if isinstance(index, int) and index > 0 else None


def generations_path(ipc_dir: str, main: str) -> Path:
    """Where process 0's supervisor keeps every process's generation as it is now (a JSON
    list, written at the broker's start and at each restart), for a process still
    starting to read before it takes connections (run_process)."""
    return Path(ipc_dir) / f"{main}.generations"


def read_generations(path: Path, processes: int) -> list[int] | None:
    """The generations the supervisor wrote at ``path``; None when there are none to read
    (no file, or not a list of ``processes`` integers)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(found, list) or len(found) != processes
            or not all(type(g) is int and g >= 0 for g in found)):
        return None
    return found


def lock_process(path: Path, timeout: float) -> int:
    """Take ``path``'s flock for the life of this process (its descriptor), waiting while
    another process holds it; RuntimeError after ``timeout`` seconds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise RuntimeError(
                    f"{path} is still held by an earlier process of this broker (it closes its "
                    f"logs after a kill of process 0); stop it, then start again") from None
            time.sleep(0.05)


def process_lock_path(ipc_dir: str, node_name: str) -> Path:
    """Process k's lock: held while it has logs open (in the broker's ipc dir)."""
    return Path(ipc_dir) / f"{node_name}.lock"


def wait_for_earlier_processes(ipc_dir: str, timeout: float = PROCESS_LOCK_WAIT_S) -> None:
    """Before process 0 opens the logs: no process 1.. of an earlier run still has logs
    open (process 0 killed, they get SIGTERM and close theirs; a shard must not open a
    partition another process still writes)."""
    for path in sorted(Path(ipc_dir).glob("*.lock")):
        os.close(lock_process(path, timeout))


def remove_process_locks(ipc_dir: str, main: str) -> None:
    """At the end of a broker's stop, when processes 1.. have exited."""
    for path in Path(ipc_dir).glob(f"{main}-p*.lock"):
        path.unlink(missing_ok=True)


def _die_with_parent(parent: int) -> None:
    """In the new process, before it runs anything: SIGTERM when ``parent`` dies."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD_SIGNALS)  # held by its spawn only
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass
    # A parent that died between the fork and the prctl never signals: this process
    # would outlive the broker, reparented
    if os.getppid() != parent:
        os._exit(1)


_HELD_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Inside _signals_held: what a signal handler would raise waits here for the block's end.
# The mask alone does not hold it off: a process-directed signal goes to another thread
# that does not block it, and Python runs its handler in the main thread all the same.
_held = 0
_deferred: list[BaseException] = []


def raise_or_defer(exc: BaseException) -> None:
    """For a signal handler that stops the start by raising: raise now, or, inside
    ``_signals_held`` (a process being made, a thread being started), at its end."""
    if _held:
        _deferred.append(exc)
        return
    raise exc


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGTERM/SIGINT wait until the block ends: the broker's handler while it starts
    raises, and must not do so between a new process's fork and its Popen being kept
    (a process nobody stops or waits for). The mask keeps them from this thread (and a
    forked child, which unblocks them once its parent-death signal is set);
    ``raise_or_defer`` keeps the handler's exception for the block's end."""
    global _held
    before = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD_SIGNALS)
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
        if not _held and _deferred:
            raise _deferred.pop()


class SupervisorGaveUp(RuntimeError):
    """A process died more often than the restart budget allows (the message says so)."""


class ProcessSupervisor:
    """Starts, watches, restarts and stops processes 1..N-1 of one broker."""

    def __init__(self, spec: dict[str, Any], processes: int,
                 on_give_up: Callable[[str], None]) -> None:
        self.spec = spec
        self.processes = processes
        self.on_give_up = on_give_up
        self.procs: dict[int, subprocess.Popen[str]] = {}
        self.restarts: dict[int, list[float]] = {k: [] for k in range(1, processes)}
        # Each process's generation: 0 at the broker's start, +1 at each restart of it
        # (process 0 is never restarted). A process gets them all at spawn; one changed
        # while others still start (a restart during the broker's start, in its main
        # thread, or later in the watch thread) reaches them by the file of them
        # (generations_path, read before a process takes connections), by ProcessStarted,
        # or by the restarted process's first refusal of a stale Append.
        self.generations = [0] * processes
        self.stopping = threading.Event()
        # held to check ``stopping`` and spawn and keep the new process in ``procs`` as one
        # step, and by stop() to set ``stopping``: none is spawned once stop() began
        self._spawning = threading.Lock()
        self.thread: threading.Thread | None = None
        self.log = logger.bind(node=spec["main"])
        self.restarted = 0

    def start(self) -> ProcessSupervisor:
        stopped = RuntimeError("the broker stopped while its processes started")
        self._publish_generations()  # (a file of an earlier run of the broker replaced)
        for k in range(1, self.processes):  # all spawned, then each waited for: in parallel
            with _signals_held():
                if self._spawn_kept(k, restarted=False) is None:
                    raise stopped
        for k in range(1, self.processes):
            if self._bring_up(k, self.procs[k], starting=True) is None:
                raise stopped
        with _signals_held():  # not interrupted between the thread's start and its run
            self.thread = threading.Thread(target=self._watch, name="process-supervisor",
                                           daemon=True)
            self.thread.start()
        return self

    def _publish_generations(self) -> None:
        """Every process's generation as it is now, where a process still starting reads
        it before it takes connections (generations_path): written whole, a new file
        renamed over the old. Not written: the restarted process's ProcessStarted and its
        refusals still tell the others' handlers (said once)."""
        ipc_dir = self.spec.get("ipc_dir")
        if not ipc_dir:
            return  # (stand-in processes of a test: none reads it)
        path = generations_path(str(ipc_dir), str(self.spec["main"]))
        fresh = path.with_name(path.name + ".new")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fresh.write_text(json.dumps(self.generations))
            os.replace(fresh, path)
        except OSError as exc:
            # an earlier file left would tell a process generations that are not (one
            # higher than true would let its stale Appends through the fence): none at all
            for gone in (fresh, path):
                with contextlib.suppress(OSError):
                    gone.unlink(missing_ok=True)
            self.log.warning("the processes' generations not written to {} ({}); a process "
                             "still starting learns of a restart from the restarted one",
                             path, exc)

    def _spawn(self, index: int, restarted: bool = False) -> subprocess.Popen[str]:
        # ``wire``: process 0's inter-node wire fingerprint, which the new process checks
        spec = dict(self.spec, index=index, restarted=restarted,
                    generations=list(self.generations), wire=wire_fingerprint())
        return subprocess.Popen(
            [sys.executable, *PROCESS_MODULE.split(), json.dumps(spec)],
            stdout=subprocess.PIPE, text=True,
            preexec_fn=functools.partial(_die_with_parent, os.getpid()),
            cwd=str(Path(__file__).resolve().parents[1]))

    def _bring_up(self, index: int, proc: subprocess.Popen[str],
                  starting: bool = False) -> subprocess.Popen[str] | None:
        """Until process ``index`` (``proc``, just spawned) is ready; the process that is
        (None: the broker stops meanwhile, and stop() ends what ``procs`` holds).
        One killed by SIGKILL before it was ready (the OOM killer, an operator; process 0
        already serves connections while the others start) is spawned again as a restart,
        within the restart budget, as one that dies later is: it used to stop the broker's
        start, or the supervisor after a restart, at once. A process that exits on its own
        before it is ready (its start failed, or a crash's signal: SIGSEGV, SIGABRT, which
        would come again) or is not ready in time stops them still:
        RuntimeError (SupervisorGaveUp past the budget). ``starting``: the broker's start,
        in its main thread, whose SIGTERM handler raises (held off while a process is made;
        the watch thread never holds it: what the handler raised would be raised there)."""
        while not self._wait_ready(index, proc):
            if self.stopping.is_set():
                return None
            self.log.error("broker process {} (pid {}) exited with {} before it was ready; "
                           "restarting it", index, proc.pid, proc.returncode)
            self._count_restart(index)
            with _signals_held() if starting else contextlib.nullcontext():
                fresh = self._spawn_kept(index)
            if fresh is None:
                return None
            proc = fresh
            self.restarted += 1
        return None if self.stopping.is_set() else proc

    def _spawn_kept(self, index: int, restarted: bool = True) -> subprocess.Popen[str] | None:
        """Process ``index`` spawned (again) and kept where stop() finds it; None once the
        broker stops (stop() ends what ``procs`` holds then; nothing is spawned after)."""
        with self._spawning:
            if self.stopping.is_set():
                return None
            proc = self.procs[index] = self._spawn(index, restarted=restarted)
            return proc

    def _count_restart(self, index: int) -> None:
        """A restart of process ``index`` is due: counted in its window, its generation one
        more (the new process takes it from its spec); SupervisorGaveUp past RESTARTS_MAX
        within RESTART_WINDOW_S. A restart while other processes still start (the broker's
        start, num.processes >= 3) spawned them with the generation before: each reads the
        generations written here before it takes connections (run_process), and its
        handlers learn the new one then, if the restarted process's ProcessStarted has not
        reached them yet (it may come later: its link connects again only every 100 to
        200 ms while their gateway is not bound). Written before the new process is
        spawned."""
        now = time.monotonic()
        window = [t for t in self.restarts[index] if now - t < RESTART_WINDOW_S]
        if len(window) >= RESTARTS_MAX:
            raise SupervisorGaveUp(f"broker process {index} died {len(window) + 1} times "
                                   f"within {RESTART_WINDOW_S:.0f} s; stopping the broker")
        window.append(now)
        self.restarts[index] = window
        self.generations[index] += 1
        self._publish_generations()

    def _wait_ready(self, index: int, proc: subprocess.Popen[str]) -> bool:
        """True once ``proc`` says it is ready; False when SIGKILL ended it before (it may
        be restarted) or the broker stops (stop() owns the process then); RuntimeError
        when it exited on its own or was not ready in time (killed then)."""
        assert proc.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.stopping.is_set():
                return False
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline()
                if line.strip() == READY_LINE:
                    self.log.info(SERVES_LINE, index, proc.pid)
                    return True
                if not line:  # its stdout closed: it exits (maybe not reaped yet)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        proc.wait(timeout=5)
                    break
            elif proc.poll() is not None:
                break
        died = proc.poll() is not None  # before the deadline, not by this kill
        proc.kill()
        proc.wait()
        proc.stdout.close()
        if died and proc.returncode == -signal.SIGKILL:
            return False
        if proc.returncode == WIRE_MISMATCH_EXIT:
            raise RuntimeError(f"broker process {index} runs another inter-node wire than "
                               f"process 0 (its code on disk is another build); the broker "
                               f"stops: start it again to run that build")
        raise RuntimeError(f"broker process {index} did not start (exit code "
                           f"{proc.returncode}); see its lines above in the broker log")

    def _watch(self) -> None:
        while not self.stopping.wait(0.2):
            for k, proc in list(self.procs.items()):
                if proc.poll() is None or self.stopping.is_set():
                    continue
                self.log.error("broker process {} (pid {}) exited with {}; restarting it",
                               k, proc.pid, proc.returncode)
                if proc.stdout is not None:
                    proc.stdout.close()
                try:
                    self._count_restart(k)
                    fresh = self._spawn_kept(k)
                    if fresh is not None:
                        fresh = self._bring_up(k, fresh)
                # (ValueError: a pipe stop() closed under a read, as it stops)
                except (OSError, RuntimeError, ValueError) as exc:
                    if not self.stopping.is_set():  # (the broker's stop ending it: no failure)
                        self.on_give_up(str(exc) if isinstance(exc, SupervisorGaveUp) else
                                        f"broker process {k} cannot restart: {exc}")
                    return
                if fresh is None:  # the broker stops
                    return
                self.restarted += 1

    def stop(self, timeout: float = 30.0,
             while_stopping: Callable[[], None] | None = None) -> None:
        """SIGTERM every process (each stops accepting, finishes its requests), then wait.

        ``while_stopping`` runs once they are signalled, before the wait (process 0
        stops its own intake then: its new requests would keep their shards busy)."""
        with self._spawning:
            self.stopping.set()
        # (not alive: never started, or a start interrupted before it ran; it sees stopping)
        if (self.thread is not None and self.thread is not threading.current_thread()
                and self.thread.is_alive()):
            self.thread.join(timeout=STOP_JOIN_S)
            if self.thread.is_alive():
                # (it spawns nothing from now on: ``stopping`` is set under ``_spawning``)
                self.log.warning("the process supervisor's thread (it watches processes 1.. "
                                 "and restarts one that dies) has not ended {:g} s into the "
                                 "stop; stopping processes {} without it (it restarts "
                                 "nothing more)", STOP_JOIN_S, sorted(self.procs))
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        if while_stopping is not None:
            while_stopping()
        deadline = time.monotonic() + timeout
        for k, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.log.error("broker process {} did not stop in {:.0f} s; killing it", k,
                               timeout)
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        self.procs = {}

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]


def take_security(node: Any, topo: Any, mirror: Any, index: int,
                  deadline: float | None = None) -> bool:
    """Processes 1.. of a cluster node, before they take connections: ask process 0's
    controller for every user and ACL (sent to this process's SecurityView) and wait
    until the copy holds them; asked again while none comes, until ``deadline``
    (monotonic; READY_TIMEOUT_S / 2 from now at most). False: none came."""
    from wire.security_messages import SecuritySnapshotAsk

    started = time.monotonic()
    cap = started + READY_TIMEOUT_S / 2
    deadline = cap if deadline is None else min(deadline, cap)
    while True:
        node.tell(topo.controller, SecuritySnapshotAsk(index))
        if mirror.ready.wait(min(5.0, max(0.1, deadline - time.monotonic()))):
            logger.info("process {}: SCRAM users and ACLs of process 0 taken", index)
            return True
        if time.monotonic() >= deadline:
            break
    logger.error("process {}: process 0 sent no SCRAM users and ACLs in {:.0f} s; this process "
                 "cannot authenticate or authorize without them", index,
                 time.monotonic() - started)
    return False


def _ready_ask(node: Any, actor: Any, index: int, field: str, deadline: float) -> bool | None:
    """Ask ``actor``'s GetStats for ``field`` until ``deadline``: its value, or None when
    no answer came by then (an ask that times out is asked again: the actor may be busy,
    a shard opening its logs; one that fails is not)."""
    from actors.runtime.node import AskFailed, AskTimeout
    from wire.broker_messages import GetStats

    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            logger.warning("process {}: {} did not answer in time", index, actor)
            return None
        try:
            return bool(node.ask(actor, GetStats(),
                                 timeout=min(READY_ASK_TIMEOUT_S, left)).get(field))
        except AskTimeout:
            continue
        except AskFailed as exc:
            logger.warning("process {}: {} did not answer ({})", index, actor, exc)
            return None


def _wait_for_handlers_metadata(node: Any, topo: Any, index: int, deadline: float) -> None:
    """Until every handler of this process holds the metadata the ReplicaManager sent it.

    The answer to ProcessStarted may overtake that metadata: they go to different actors
    of this process, and process 0 may reach them by different links (after a restart the
    ZeroMQ link its ReplicaManager kept for the answer's address was up again before the
    direct link, which reconnects on its own timer). A connection taken before then was
    answered Metadata without a topic or a controller.
    """
    from actors.runtime.address import Address

    for i in range(topo.num_handlers):
        handler = Address(node.name, topo.handler(i).name)
        while True:
            got = _ready_ask(node, handler, index, "metadata_updates", deadline)
            if got is None:
                return
            if got:
                break
            if time.monotonic() > deadline:
                logger.warning("process {}: {} has no metadata yet; it learns the cluster "
                               "from the next UpdateMetadata", index, handler)
                return
            time.sleep(0.005)


def _wait_for_shards_restored(node: Any, topo: Any, index: int, here: list[int],
                              deadline: float) -> bool:
    """After a restart, until every shard of this process holds its partitions' last roles
    again (the ReplicaManager's RestoreRoles, sent with the answer to ProcessStarted, to
    another actor and maybe by another link): a broker that is not ready does not serve, so
    a client of this process never finds a partition led here not yet restored. Bounded:
    a shard still waiting then answers NOT_LEADER_OR_FOLLOWER for such a partition (the
    client retries), as it does to the other processes' handlers meanwhile. A shard slow
    to answer (it opens its logs as it takes its roles) is asked again until ``deadline``.
    True: every shard has its roles."""
    from actors.runtime.address import Address

    for i in here:
        shard = Address(node.name, topo.shard(i).name)
        while True:
            awaiting = _ready_ask(node, shard, index, "awaiting_restore", deadline)
            if awaiting is None:
                return False
            if not awaiting:
                break
            if time.monotonic() > deadline:
                logger.warning("process {}: {} has not had its roles restored yet; it "
                               "answers NOT_LEADER_OR_FOLLOWER until it has", index, shard)
                return False
            time.sleep(0.005)
    return True


def _learn_restarts(node: Any, topo: Any, index: int, known: list[int], path: Path,
                    deadline: float) -> None:
    """Before this process takes connections: its handlers learn of each restart of
    another process since this one was spawned (the supervisor's generations at ``path``
    newer than ``known``, this spawn's), and have taken it in (asked) before any
    connection comes. The restarted process tells them itself (ProcessStarted), but while
    this process's gateway was not bound yet its links to them (one per handler) connect
    again only every 100 to 200 ms, ZeroMQ's reconnect interval: the notice came up to
    200 ms after this process served, and a handler's first Append to that process,
    stamped with the generation before, was refused (NOT_LEADER_OR_FOLLOWER to the
    client). That notice, when it comes, is not newer and changes nothing."""
    from actors.runtime.address import Address
    from actors.runtime.node import AskFailed, AskTimeout
    from wire.cluster_messages import ProcessStarted

    now = read_generations(path, len(known))
    if now is None:
        logger.warning("process {}: the processes' generations not read from {}; a restart "
                       "since this one was spawned is learnt from the restarted process",
                       index, path)
        return
    for k, (was, current) in enumerate(zip(known, now, strict=True)):
        if k == index or current <= was:
            continue
        logger.info("process {}: process {} restarted (generation {}) since this one was "
                    "spawned; its handlers are told before it takes connections",
                    index, k, current)
        for i in range(topo.num_handlers):
            handler = Address(node.name, topo.handler(i).name)
            left = deadline - time.monotonic()
            if left <= 0:  # (the ready deadline: the restarted process tells the rest)
                logger.warning("process {}: out of time to tell {} of the restart of "
                               "process {}; it learns it from that process", index, handler, k)
                continue
            try:
                node.ask(handler, ProcessStarted(k, True, current),
                         timeout=min(READY_ASK_TIMEOUT_S, max(0.1, left)))
            except (AskFailed, AskTimeout) as exc:
                logger.warning("process {}: {} not told of the restart of process {} ({}); "
                               "it learns it from that process", index, handler, k, exc)


def run_process(spec: dict[str, Any]) -> int:
    """Process ``spec["index"]`` of a broker: a node serving connections until SIGTERM."""
    from actors.acceptor import Acceptor
    from actors.apis.base import HandlerContext
    from actors.broker import bind_listener
    from actors.core.log_dir import LogDir
    from actors.core.metadata_cache import MetadataCache
    from actors.core.topic_store import TopicStore
    from actors.handoff import connect_handoff, handoff_path, hello
    from actors.partition_shard import PartitionShard
    from actors.processor import Processor
    from actors.purgatory import PurgatoryShard
    from actors.request_handler import RequestHandler
    from actors.runtime.collector import begin_serving
    from actors.runtime.config import Config
    from actors.runtime.node import AskFailed, AskTimeout, Directory, Node, NodeEndpoint
    from actors.security.acl import Authorizer
    from actors.security.config import SecuritySettings
    from actors.security.credentials import CredentialCache
    from actors.security.local_store import LocalSecurityStore
    from actors.security.mirror import SecurityMirror
    from actors.security.tls import server_context
    from actors.security_view import SecurityView
    from actors.timer import Timer
    from actors.topology import Topology
    from wire import kafka_codec
    from wire.cluster_messages import ProcessStarted

    # the readiness steps' shared deadline (see READY_MARGIN_S)
    ready_by = time.monotonic() + READY_TIMEOUT_S - READY_MARGIN_S
    main = spec["main"]
    index = int(spec["index"])
    own, theirs = wire_fingerprint(), str(spec.get("wire") or "")
    if not theirs:
        # process 0 is of a build from before this check: its wire is not known (the
        # usual case: the same wire, upgraded in place), so start as such a build did
        logger.warning("broker process {} cannot compare its inter-node wire {} with process "
                       "0's (a build that does not tell it); starting", index, own)
    elif own != theirs:
        logger.error("broker process {} runs inter-node wire {}, process 0 runs {}: its code "
                     "on disk is another build than the running broker's; not starting",
                     index, own, theirs)
        return WIRE_MISMATCH_EXIT
    cfg = Config(spec["config"], source="<broker process>")
    processes = int(cfg["num.processes"])
    names = tuple(process_node_name(main, k) for k in range(processes))
    name = names[index]
    endpoint = NodeEndpoint(spec["gateway_host"], 0, spec["ipc_dir"])
    data_dir = Path(spec["data_dir"])
    security = SecuritySettings.from_config(cfg.values)
    # The same key pair as process 0: each process of a broker is that broker to CURVE
    curve = security.curve.identity(main, names[1:]) if security.curve.enabled else None
    node = Node(name, directory=Directory({n: endpoint for n in names}), endpoint=endpoint,
                data_dir=data_dir, trace_sample_ratio=float(cfg["trace.sample.ratio"]),
                max_frame_bytes=max(int(cfg["actor.max.frame.bytes"]),
                                    int(cfg["socket.request.max.bytes"]) + 1024 * 1024),
                batch_max_messages=int(cfg["actor.batch.max.messages"]), curve=curve,
                direct_peers=names)
    topo = Topology.from_config(name, cfg)
    topo = dataclasses.replace(topo, home=main, process_nodes=names)
    restarted = bool(spec.get("restarted"))
    # every process's generation (the supervisor's, at this spawn): this one's shards
    # refuse an Append stamped older than this process's; its handlers stamp theirs with
    # the generation of the target shard's process
    generations = [int(g) for g in spec.get("generations") or [0] * processes]
    if len(generations) != processes:
        raise ValueError(f"the spec of process {index} has {len(generations)} generations "
                         f"for {processes} processes")
    generation = generations[index]
    cluster = bool(spec.get("cluster"))
    shared = cfg["actor.threads"] in ("shared", "single")
    single = cfg["actor.threads"] == "single"
    here = topo.local_shards()
    # single: the worker loop, its first shard's; a process with no shard
    # (num.processes.shard.placement = first) runs it in handler-0's
    loop = topo.shard(here[0]).name if here else topo.handler(0).name

    def place(i: int) -> dict[str, Any]:
        """actor.threads = shared: the loop of a shard of this process (as in process 0);
        single: the worker loop (none before handler-0, which makes it, is spawned)."""
        if not shared:
            return {}
        if single:
            return {"host": loop} if here or loop in node.actors else {}
        if not here:
            return {}
        return {"host": topo.shard(i if i in here else here[i % len(here)]).name}

    kafka_codec.warm_up()
    # The same listeners as process 0 (its ports), TLS context, SCRAM users and ACLs: in a
    # cluster copies of process 0's (it relays them; none of ZooKeeper here), else the data
    # dir's, read as process 0 reads them
    tls_context = server_context(security.tls) if security.tls is not None else None
    credentials = None
    authorizer = acl_store = None
    if security.sasl_mechanisms:
        if cluster:
            credentials = CredentialCache()
        else:
            local = LocalSecurityStore.in_data_dir(data_dir)
            credentials = CredentialCache(local, stamp=local.users_stamp)
            for problem in credentials.load():
                logger.warning("SCRAM credentials skipped: {}", problem)
    if security.acl_enabled:
        authorizer = Authorizer(security.super_users, security.allow_everyone_if_no_acl_found)
        if not cluster:
            acl_store = LocalSecurityStore.in_data_dir(data_dir)
            authorizer.load(acl_store.get_all_acls())
    # in a cluster the SCRAM and ACL admin goes to process 0 (whatever the listeners), and
    # the users and ACLs it relays are kept when there are SASL listeners or an authorizer
    mirror = SecurityMirror(authorizer, credentials) if cluster else None
    mirrored = mirror is not None and (credentials is not None or authorizer is not None)
    clock = node.clock
    # This process's share of the partitions: shard i and purgatory i for i % N == index
    # (num.processes.shard.placement = spread; with first, none in processes 1..).
    # They start before the gateway binds, so nothing sent to them meanwhile (queued by
    # the senders' links until this process is up) finds them missing; the topic table
    # is read after anything process 0 created before it started this process.
    # Their logs open from the checkpoints on disk without writing anything (process 0
    # holds the dir); after a restart (the process died) as after a crash: recovered.
    # An earlier life of this process (process 0 was killed) may still be closing its logs
    lock = lock_process(process_lock_path(spec["ipc_dir"], name), PROCESS_LOCK_WAIT_S)
    log_dir = LogDir.read_only(data_dir, bool(spec.get("clean_shutdown")) and not restarted)
    # a cluster's shards open nothing at start: their roles come from the controller (or,
    # after a restart, RestoreRoles), never from a topic table leading alone
    topics = {} if cluster else TopicStore.load(data_dir).table()
    node.spawn(Timer, topo.timer.name, clock=clock)
    for i in here:
        node.spawn(PartitionShard, topo.shard(i).name, topology=topo, config=cfg,
                   log_dir=log_dir, topics=topics, broker_id=int(spec["broker_id"]),
                   clock=clock, generation=generation,
                   **(place(i) if single and i != here[0] else {}))
    for i in topo.local_purgatories():
        node.spawn(PurgatoryShard, topo.purgatory(i).name, topology=topo, clock=clock,
                   purge_interval_requests=int(cfg["purge.interval.requests"]),
                   **place(i))
    if mirrored:  # before the gateway binds: relays sent meanwhile find it
        node.spawn(SecurityView, topo.security_view.name, mirror=mirror, **place(0))
    advertised: dict[str, tuple[str, int]] = {}  # as process 0's (its bound ports)
    for adv_name, adv_host, adv_port in spec.get("advertised") or ():
        advertised.setdefault(str(adv_name), (str(adv_host), int(adv_port)))
    # The handlers too run before the gateway binds: what the other processes sent them
    # meanwhile, waiting in their links, finds them. A restarted process's ProcessStarted
    # (on a single node it tells every other process's handlers itself) reached a process
    # still starting as its gateway bound and, its handlers not spawned yet, was lost: they
    # stamped their Appends to it with the generation before, and the first one of each
    # was refused, the client answered NOT_LEADER_OR_FOLLOWER. (One that comes only after
    # this process serves: _learn_restarts.)
    for i in range(topo.num_handlers):
        # In a cluster the handlers' metadata comes from process 0's ReplicaManager, which
        # forwards every UpdateMetadata to the handlers of each process (ProcessStarted
        # below: what it holds already); the SCRAM and ACL admin goes to its controller
        ctx = HandlerContext(topo, cfg, int(spec["broker_id"]), spec["adv_host"],
                             int(spec["adv_port"]), spec["cluster_id"], i,
                             {} if cluster else dict(topics), clock=clock,
                             cluster=MetadataCache() if cluster else None,
                             authorizer=authorizer, acl_store=acl_store,
                             user_store=None if cluster
                             else LocalSecurityStore.in_data_dir(data_dir),
                             credentials=credentials, security_mirror=mirror,
                             process_generations=dict(zip(names, generations, strict=True)),
                             listener_names=tuple(x.name for x in security.listeners),
                             advertised=advertised)
        placement = place(i)
        # a handler that runs a worker loop of its own (no shard here to host it): the
        # loop's policy is set from it, as a shard sets its loop's
        node.spawn(RequestHandler, topo.handler(i).name, context=ctx, **placement,
                   scheduling=str(cfg["actor.threads.scheduling"])
                   if shared and "host" not in placement else None)
    # single: the gateway runs in the worker loop too (frames from the other processes
    # reach its actors in memory, in the same turn); with no shard here handler-0 runs it
    node.start(gateway_host=loop if single else None)
    if cluster:
        # Before it takes connections: its handlers get the metadata process 0's ReplicaManager
        # holds (the answer comes after it, on the same link), and after a restart its shards
        # their roles (they were in memory)
        waits_by = ready_by - (SECURITY_SHARE_S if mirrored else 0.0)
        try:
            started = node.ask(topo.replica_manager,
                               ProcessStarted(index, restarted, generation),
                               timeout=max(0.1, min(READY_TIMEOUT_S / 2,
                                                    waits_by - time.monotonic())))
        except (AskFailed, AskTimeout) as exc:
            logger.warning("process {}: the ReplicaManager did not answer ({}); its handlers "
                           "learn the cluster from the next UpdateMetadata", index, exc)
        else:
            if isinstance(started, dict) and started.get("metadata"):
                _wait_for_handlers_metadata(node, topo, index, waits_by)
            if restarted:
                _wait_for_shards_restored(node, topo, index, here, waits_by)
    elif restarted:
        # A single node has no ReplicaManager to tell the other processes' handlers: this
        # process does. Each gives up what it sent to the process this one replaced (its
        # Appends, stamped older, are refused here if a link still delivers them), and
        # stamps its next Appends to this process's shards with this generation.
        for handler in topo.all_handlers():
            if handler.node != name:
                node.tell(handler, ProcessStarted(index, True, generation))
        # and the Controller: a topic change whose message to one of this process's shards
        # died with the process it replaced goes on now (its shards and handlers run),
        # not at the Controller's give-up
        node.tell(topo.controller, ProcessStarted(index, True, generation))
    if mirrored and not take_security(node, topo, mirror, index, ready_by):
        node.shutdown(timeout=5)
        os.close(lock)
        return 1
    for i in range(topo.num_processors):
        node.spawn(Processor, topo.processor(i).name, topology=topo, config=cfg, clock=clock,
                   listener_protocols=tuple(b.security_protocol.value
                                           for b in security.listeners),
                   tls_context=tls_context, sasl_mechanisms=security.sasl_mechanisms,
                   credentials=credentials.lookup if credentials else None,
                   **(place(i) if here or single else
                      {"host": topo.handler(i % topo.num_handlers).name} if shared else {}))
    if hold := os.environ.get(TEST_HOLD_READY_ENV):  # test hook (see TEST_HOLD_READY_ENV)
        logger.info("process {} holds its start until {} exists", index, hold)
        while not os.path.exists(hold) and time.monotonic() < ready_by:
            time.sleep(0.05)
    # last before it takes connections: a restart since this process was spawned (the
    # broker's start, num.processes >= 3) is known to its handlers from the first one
    _learn_restarts(node, topo, index, generations,
                    generations_path(spec["ipc_dir"], main), ready_by)
    # Bound last: a connection the kernel gives this process is accepted at once (after a
    # restart, none waits in a backlog while the shards recover). Handoff: no listener of
    # its own, a link per listener to process 0's Acceptor, greeted once the Acceptors
    # run (process 0 hands it connections from then on).
    listeners = spec.get("listeners") or [[spec["host"], spec["port"]]]
    handoff = cfg["num.processes.connection.distribution"] == "handoff"
    links = ([connect_handoff(handoff_path(spec["ipc_dir"], main, i))
              for i in range(len(listeners))] if handoff else [])
    sockets = ([socket.socket() for _ in listeners] if handoff else
               [bind_listener(host, int(port), reuse_port=True) for host, port in listeners])
    for at, sock in enumerate(sockets):  # one Acceptor per listener, as in process 0
        if handoff:
            sock.close()  # unused: the connections come over the link
        node.spawn(Acceptor, topo.listener_acceptor(at).name, topology=topo, config=cfg,
                   listen_socket=sock, clock=clock, listener_index=at,
                   listener_name=security.listeners[at].name,
                   handoff_link=links[at] if handoff else None,
                   **(place(0) if here or single else
                      {"host": topo.handler(0).name} if shared else {}))
    for link in links:
        hello(link, index)
    print(READY_LINE, flush=True)
    begin_serving()  # as process 0 does (actorlog serve)
    code = node.run_until_signal()
    for sock in sockets:
        sock.close()
    try:
        for suffix in (".gw", ".ux"):  # ZeroMQ's and the direct links' (a gateway not
            (Path(spec["ipc_dir"]) / f"{name}{suffix}").unlink(missing_ok=True)  # stopped)
    except OSError:
        pass
    os.close(lock)  # the logs are closed
    return code


if __name__ == "__main__":
    _spec = json.loads(sys.argv[1])
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    # the format of process 0's log (actorlog serve), each line tagged with its actor
    from actors.cli.serve import LOG_LEVEL_ENV, LOG_LEVELS, configure_logging

    _level = os.environ.get(LOG_LEVEL_ENV, "INFO").upper()
    configure_logging(_level if _level in LOG_LEVELS else "INFO",
                      process_node_name(str(_spec["main"]), int(_spec["index"])))
    _code = run_process(_spec)
    gc.freeze()  # the exit's last collection would only walk (0.5 s after a load) what dies now
    sys.exit(_code)
