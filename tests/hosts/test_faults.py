"""Network faults on a test host: netem (tc, or nftables for loss) and their removal."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from actors.hosts.faults import (
    FaultError,
    Netem,
    apply_netem,
    clear_netem,
    current_netem,
    parse_delay_ms,
    parse_loss_pct,
)
from actors.hosts.netns import TestHost
from actors.hosts.runner import NetnsRunner, Runner
from tests.fixtures.pids import HeldProcess
from tests.hosts.helpers import answers, netns_host_spec, serve_http, wait_until

pytestmark = pytest.mark.multiprocess
MakeHosts = Callable[[int], list[TestHost]]


@pytest.mark.parametrize(("text", "ms"), [("50ms", 50), ("0.2s", 200), ("75", 75), ("0", 0)])
def test_parse_delay(text: str, ms: int) -> None:
    assert parse_delay_ms(text) == ms


@pytest.mark.parametrize(("text", "pct"), [("5%", 5.0), ("0.5", 0.5), ("100%", 100.0)])
def test_parse_loss(text: str, pct: float) -> None:
    assert parse_loss_pct(text) == pct


@pytest.mark.parametrize(("parse", "text", "message"), [
    (parse_delay_ms, "fast", "delay 'fast' is not a duration like 50ms or 0.2s"),
    (parse_delay_ms, "-5ms", "delay '-5ms' is negative"),
    (parse_loss_pct, "lots", "loss 'lots' is not a percentage like 5%"),
    (parse_loss_pct, "150%", "loss '150%' must be between 0% and 100%"),
])
def test_bad_shapes_are_one_line(parse: Callable[[str], object], text: str,
                                 message: str) -> None:
    with pytest.raises(FaultError) as info:
        parse(text)
    assert str(info.value) == message


def server_on(make_test_hosts: MakeHosts,
              tmp_path: Path) -> tuple[TestHost, Runner, HeldProcess]:
    (host,) = make_test_hosts(1)
    runner = NetnsRunner(netns_host_spec(host, tmp_path))
    server = serve_http(runner, host, tmp_path)
    try:
        wait_until(lambda: answers(host.address, 8000), what="http server")
    except BaseException:
        with server:
            server.kill()
        raise
    return host, runner, server


def test_loss_drops_what_the_host_sends_until_cleared(make_test_hosts: MakeHosts,
                                                      tmp_path: Path) -> None:
    host, runner, server = server_on(make_test_hosts, tmp_path)
    try:
        method = apply_netem(runner, Netem(loss_pct=100))
        assert method in ("tc", "nftables")
        assert current_netem(runner)
        # every answer the host sends is lost: a connection cannot be made
        assert not answers(host.address, 8000, timeout_s=1.5)
        apply_netem(runner, Netem(loss_pct=30))
        shown = current_netem(runner)
        assert ("loss 30%" in shown) if method == "tc" else ("< 3000 drop" in shown), shown
        clear_netem(runner)
        assert current_netem(runner) == ""
        wait_until(lambda: answers(host.address, 8000), what="answers after clearing")
    finally:
        with server:
            server.kill()


def test_delay_where_the_kernel_has_netem(make_test_hosts: MakeHosts, tmp_path: Path) -> None:
    (host,) = make_test_hosts(1)
    runner = NetnsRunner(netns_host_spec(host, tmp_path))
    apply_netem(runner, Netem(loss_pct=10))
    before = current_netem(runner)
    try:
        method = apply_netem(runner, Netem(delay_ms=40, loss_pct=1))
    except FaultError as exc:
        assert str(exc) == ("host h: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM), "
                            "so a delay cannot be applied; --loss alone works (through "
                            "nftables)")
        assert current_netem(runner) == before  # a refused shape leaves the old one
        pytest.skip("this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM): delay is refused "
                    "with the message checked above")
    assert method == "tc"
    shown = current_netem(runner)
    assert "delay 40ms" in shown and "loss 1%" in shown
    clear_netem(runner)
    assert current_netem(runner) == ""
