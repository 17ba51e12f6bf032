"""Fault injection on test hosts: cut a host's link, or shape what it sends.

Process faults (SIGKILL, SIGSTOP, SIGCONT) are signals to a node's process group
(every process of the node) and live with the launchers; here are the network ones, for netns hosts:

* isolate / heal: the host's bridge-side veth end down / up. The host keeps
  its address and its connections, but nothing reaches it or leaves it.
* netem: ``tc qdisc replace dev eth0 root netem delay D loss L%`` inside the
  host, shaping everything the host sends, as ``tc`` on a real machine's
  interface would. Where the kernel has no netem qdisc (some VM kernels are
  built without ``CONFIG_NET_SCH_NETEM``), loss is applied with nftables
  instead (a netdev egress chain on eth0 dropping a random share of packets,
  ``numgen random``); a delay then cannot be applied and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from actors.hosts.netns import INNER_IFACE
from actors.hosts.runner import HostError, Runner

NFT_TABLE = "actorlog_netem"


class FaultError(RuntimeError):
    """A fault cannot be applied on this host; the message says why and what works."""


@dataclass(frozen=True)
class Netem:
    delay_ms: int = 0
    loss_pct: float = 0.0

    def describe(self) -> str:
        parts = []
        if self.delay_ms:
            parts.append(f"delay {self.delay_ms}ms")
        if self.loss_pct:
            parts.append(f"loss {self.loss_pct:g}%")
        return " ".join(parts) or "nothing"


def parse_delay_ms(text: str) -> int:
    """``50ms``, ``0.2s`` or a bare number of milliseconds."""
    t = text.strip().lower()
    try:
        if t.endswith("ms"):
            value = float(t[:-2])
        elif t.endswith("s"):
            value = float(t[:-1]) * 1000
        else:
            value = float(t)
    except ValueError:
        raise FaultError(f"delay {text!r} is not a duration like 50ms or 0.2s") from None
    if value < 0:
        raise FaultError(f"delay {text!r} is negative")
    return round(value)


def parse_loss_pct(text: str) -> float:
    """``5%`` or ``5``: a percentage from 0 to 100."""
    t = text.strip().rstrip("%")
    try:
        value = float(t)
    except ValueError:
        raise FaultError(f"loss {text!r} is not a percentage like 5%") from None
    if not 0 <= value <= 100:
        raise FaultError(f"loss {text!r} must be between 0% and 100%")
    return value


def apply_netem(runner: Runner, netem: Netem) -> str:
    """Shape what the host sends; the method used ('tc', 'nftables', or 'none' for cleared).

    A shape that cannot be applied leaves the host's current shaping as it was.
    """
    if not netem.delay_ms and not netem.loss_pct:
        clear_netem(runner)
        return "none"
    command = ["tc", "qdisc", "replace", "dev", INNER_IFACE, "root", "netem"]
    if netem.delay_ms:
        command += ["delay", f"{netem.delay_ms}ms"]
    if netem.loss_pct:
        command += ["loss", f"{netem.loss_pct:g}%"]
    result = runner.run(command, check=False)
    if result.returncode == 0:
        _delete_nft_table(runner)
        return "tc"
    if "qdisc kind is unknown" not in result.stderr:
        raise HostError(runner.failure(command, result))
    if netem.delay_ms:
        raise FaultError(
            f"host {runner.host.name}: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), "
            "so a delay cannot be applied; --loss alone works (through nftables)")
    drop_below = round(netem.loss_pct * 100)  # of 10000
    drop = "drop" if drop_below >= 10000 else f"numgen random mod 10000 < {drop_below} drop"
    # "table; delete table; table {...}" replaces the table in one transaction.
    rules = (f"table netdev {NFT_TABLE}\n"
             f"delete table netdev {NFT_TABLE}\n"
             f"table netdev {NFT_TABLE} {{\n"
             f"  chain egress {{\n"
             f"    type filter hook egress device \"{INNER_IFACE}\" priority 0; policy accept;\n"
             f"    {drop}\n"
             f"  }}\n"
             f"}}\n")
    try:
        nft = runner.run(["nft", "-f", "-"], input_text=rules, check=False)
    except HostError:  # not installed where the runner looks for it
        nft = None
    if nft is None or nft.returncode == 127 or "exec of \"nft\" failed" in nft.stderr:
        raise FaultError(f"host {runner.host.name}: this kernel has no netem qdisc and nft "
                         "(Debian package nftables) is not installed to drop packets with")
    if nft.returncode != 0:
        raise HostError(runner.failure(["nft", "-f", "-"], nft))
    return "nftables"


def _delete_nft_table(runner: Runner) -> None:
    try:
        runner.run(["nft", "delete", "table", "netdev", NFT_TABLE], check=False)
    except HostError:
        pass  # nft is not installed: it put nothing there either


def clear_netem(runner: Runner) -> None:
    """Remove any shaping :func:`apply_netem` put on the host (both methods)."""
    runner.run(["tc", "qdisc", "del", "dev", INNER_IFACE, "root"], check=False)
    _delete_nft_table(runner)


def current_netem(runner: Runner) -> str:
    """What shapes the host's sending now, as the tools show it ('' if nothing)."""
    shown = []
    tc = runner.run(["tc", "qdisc", "show", "dev", INNER_IFACE], check=False).stdout
    shown += [line.strip() for line in tc.splitlines() if "netem" in line]
    try:
        nft = runner.run(["nft", "list", "table", "netdev", NFT_TABLE], check=False)
    except HostError:
        return "; ".join(shown)
    if nft.returncode == 0:
        shown += [line.strip() for line in nft.stdout.splitlines() if "drop" in line]
    return "; ".join(shown)
