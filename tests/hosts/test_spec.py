"""The cluster spec: what is accepted, and one clear line for each mistake."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.hosts.node_config import (
    NodePlan,
    _probed,
    parse_listener,
    render_toml,
)
from actors.hosts.spec import ClusterSpec, SpecError, parse_spec
from actors.security.listeners import parse_listeners

# it parses specs and makes no host: not in the netns group (tests/conftest.py)
pytestmark = pytest.mark.local_hosts

GOOD = """
[hosts.h1]
via = "netns"
address = "198.18.0.11"
[hosts.h2]
via = "ssh"
address = "198.18.0.12"
user = "root"
identity_file = "keys/id"
[hosts.h3]
via = "netns"
address = "198.18.0.13"
[zookeeper]
hosts = ["h1"]
[nodes.1]
host = "h1"
[nodes.2]
host = "h2"
[nodes.3]
host = "h3"
[nodes.3.config]
"num.io.threads" = 4
[config]
"num.partitions" = 3
"""

PATH = Path("/specs/demo.toml")


def parse(text: str) -> ClusterSpec:
    return parse_spec(text, PATH)


def problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse(text)
    return info.value.problems


def test_the_issue_example_parses_with_its_defaults() -> None:
    spec = parse(GOOD)
    assert spec.name == "demo"
    assert spec.state_dir == Path("/specs/demo.cluster")
    assert [h.via for h in spec.hosts.values()] == ["netns", "ssh", "netns"]
    h1, h2 = spec.hosts["h1"], spec.hosts["h2"]
    assert h1.netns == "alog-demo-h1" and h1.data_dir == "/specs/demo.cluster/data"
    assert h2.ssh_target == "root@198.18.0.12" and h2.port == 22
    assert h2.identity_file == "/specs/keys/id"  # relative to the spec file
    assert h2.data_dir == "/var/lib/actorlog/demo" and h2.actorlog == "actorlog"
    assert spec.connect_string() == "198.18.0.11:2181"
    assert sorted(spec.nodes) == [1, 2, 3]
    assert spec.nodes[3].config == {"num.io.threads": 4}
    assert spec.config == {"num.partitions": 3}


def test_node_plan_listens_on_the_host_address_and_keeps_its_files_in_its_data_dir() -> None:
    spec = parse(GOOD)
    plan = NodePlan.of(spec, 3)
    assert plan.config["listeners"] == "198.18.0.13:9092"
    assert plan.client_address == "198.18.0.13:9092"
    assert plan.config["actor.gateway.host"] == "198.18.0.13"
    assert plan.config["actor.gateway.port"] == 9093
    assert plan.config["node.id"] == 3 and plan.config["node.name"] == "node-3"
    assert plan.config["log.dirs"] == "/specs/demo.cluster/data/node-3"
    assert plan.config["num.io.threads"] == 4 and plan.config["num.partitions"] == 3
    assert plan.config_path == "/specs/demo.cluster/data/node-3/node.toml"
    assert plan.pid_path.endswith("node-3/serve.pid")
    assert plan.log_path.endswith("node-3/serve.log")
    remote = NodePlan.of(spec, 2)
    assert remote.data_dir == "/var/lib/actorlog/demo/node-2"


def test_every_node_joins_the_spec_zookeeper() -> None:
    for node_id in (1, 2, 3):
        assert NodePlan.of(parse(GOOD), node_id).config["zookeeper.connect"] == \
            "198.18.0.11:2181"
    connect = "10.1.1.1:2181,10.1.1.2:2181/actorlog"
    plan = NodePlan.of(parse(GOOD.replace('hosts = ["h1"]', f'connect = "{connect}"')), 2)
    assert plan.config["zookeeper.connect"] == connect
    assert tomllib.loads(plan.config_text())["zookeeper.connect"] == connect


def test_the_written_config_is_what_serve_reads() -> None:
    from actors.runtime.config import Config

    plan = NodePlan.of(parse(GOOD), 3)
    data = tomllib.loads(plan.config_text())
    cfg = Config(data, "node.toml")
    for key, value in plan.config.items():
        assert cfg[key] == value


def test_a_wildcard_listener_is_advertised_on_the_host_address() -> None:
    spec = parse(GOOD + '\n[nodes.1.config]\n"listeners" = "0.0.0.0:19092"\n')
    plan = NodePlan.of(spec, 1)
    assert plan.config["listeners"] == "0.0.0.0:19092"
    assert plan.config["advertised.listeners"] == "198.18.0.11:19092"
    assert plan.client_address == "198.18.0.11:19092"
    assert plan.config["actor.gateway.port"] == 19093


def test_the_probed_listener_is_a_plain_one_when_there_is_one() -> None:
    """`cluster up` and `status` ask a node over plain TCP without a login: a TLS listener
    first (it closes such a connection) is passed over for a PLAINTEXT one, else a
    SASL_PLAINTEXT one (it serves ApiVersions before a login)."""
    listeners = "SASL_SSL://127.0.0.1:19093,SASL_PLAINTEXT://127.0.0.1:19095"
    plan = NodePlan.of(parse(GOOD + f'\n[nodes.1.config]\n"listeners" = "{listeners}"\n'), 1)
    assert plan.client_address == "127.0.0.1:19095"
    assert plan.config["actor.gateway.port"] == 19094  # still the first listener's port + 1
    plan = NodePlan.of(parse(GOOD + '\n[nodes.1.config]\n"listeners" = "SSL://0.0.0.0:19093,'
                             'PLAINTEXT://0.0.0.0:19095"\n'), 1)
    assert plan.client_address == "198.18.0.11:19095"
    # each wildcard listener is advertised on the host address, under its own name
    assert plan.config["advertised.listeners"] == \
        "SSL://198.18.0.11:19093,PLAINTEXT://198.18.0.11:19095"
    plan = NodePlan.of(parse(GOOD + '\n[nodes.1.config]\n"listeners" = "SSL://10.0.0.1:19093,'
                             'PLAINTEXT://10.0.0.1:19095"\n"advertised.listeners" = '
                             '"SSL://a.example:9093,PLAINTEXT://b.example:9095"\n'), 1)
    assert plan.client_address == "b.example:9095"


@pytest.mark.parametrize(("protocol", "probed"), [
    ("", "PLAINTEXT"), ("PLAINTEXT", "PLAINTEXT"), ("SSL", "SSL"),
    # the probe does not log in: a SASL client_config leaves the plain listener probed
    ("SASL_PLAINTEXT", "PLAINTEXT"), ("SASL_SSL", "PLAINTEXT"),
])
def test_the_probe_prefers_the_client_configs_protocol_only_when_it_can_speak_it(
        protocol: str, probed: str) -> None:
    listeners = parse_listeners("SASL_SSL://127.0.0.1:19091,SASL_PLAINTEXT://127.0.0.1:19092,"
                                "SSL://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19094")
    client = {"security.protocol": protocol} if protocol else {}
    assert _probed(listeners, client).security_protocol.name == probed
    # without a plain listener: SASL_PLAINTEXT (ApiVersions before a login), then TLS
    # ones, SSL before SASL_SSL, when the client_config has TLS settings
    no_plain = listeners[:3]
    assert _probed(no_plain, client).security_protocol.name == (
        "SSL" if protocol == "SSL" else "SASL_PLAINTEXT")
    assert _probed(listeners[::2], client).security_protocol.name == (
        "SSL" if protocol.endswith("SSL") else "SASL_SSL")


def test_status_logs_in_on_the_listener_of_the_client_configs_protocol(tmp_path: Path) -> None:
    """The probe asks the PLAINTEXT listener; status's admin client, which logs in with the
    spec's client_config, goes to the SASL_PLAINTEXT one."""
    (tmp_path / "client.properties").write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=alice\nsasl.password=secret\n")
    listeners = "SASL_PLAINTEXT://127.0.0.1:19093,PLAINTEXT://127.0.0.1:19095"
    spec = parse_spec('[cluster]\nclient_config = "client.properties"\n' + GOOD
                      + f'\n[nodes.1.config]\n"listeners" = "{listeners}"\n',
                      tmp_path / "demo.toml")
    plan = NodePlan.of(spec, 1)
    assert (plan.client_address, plan.client_protocol) == ("127.0.0.1:19095", "PLAINTEXT")
    assert plan.login_address == "127.0.0.1:19093"
    assert "secret" not in repr(spec)  # the client_config's password is in its settings


@pytest.mark.parametrize(("text", "expected"), [
    ("127.0.0.1:9092", ("127.0.0.1", 9092)),
    ("PLAINTEXT://10.0.0.1:9093,SSL://10.0.0.1:9094", ("10.0.0.1", 9093)),
    ("[::1]:9092", ("::1", 9092)),
    ("PLAINTEXT://[fd00::2]:19092", ("fd00::2", 19092)),
])
def test_parse_listener(text: str, expected: tuple[str, int]) -> None:
    assert parse_listener(text) == expected


def test_connect_instead_of_servers() -> None:
    text = GOOD.replace('hosts = ["h1"]', 'connect = "10.1.1.1:2181,10.1.1.2:2181/actorlog"')
    assert parse(text).connect_string() == "10.1.1.1:2181,10.1.1.2:2181/actorlog"


# --------------------------------------------------------------- refusals
@pytest.mark.parametrize(("edit", "line"), [
    (('[hosts.h1]\nvia = "netns"', '[hosts.h1]\nvia = "netns"\nadress = "x"'),
     "[hosts.h1] unknown key 'adress' (did you mean 'address'?)"),
    (("[zookeeper]", "[zookeper]\nhosts = []\n[zookeeper]"),
     "unknown key 'zookeper' (did you mean 'zookeeper'?)"),
    (('"num.partitions" = 3', '"num.partition" = 3'),
     "[config] unknown config key 'num.partition' (did you mean 'num.partitions'?)"),
    (('"num.io.threads" = 4', '"num.io.thread" = 4'),
     "[nodes.3.config] unknown config key 'num.io.thread' (did you mean 'num.io.threads'?)"),
    (('[nodes.3]\nhost = "h3"', '[nodes.3]\nhost = "hh3"'),
     "[nodes.3] host 'hh3' is not a host of this spec (did you mean 'h3'?) "
     "(hosts: h1, h2, h3)"),
    (('hosts = ["h1"]', 'hosts = ["hx"]'),
     "[zookeeper] host 'hx' is not a host of this spec"),
    (('address = "198.18.0.13"', 'address = "10.0.0.13"'),
     "[hosts.h3] address 10.0.0.13 is not in 198.18.0.0/24, the range test hosts live in"),
    (('address = "198.18.0.13"', 'address = "198.18.0.1"'),
     "[hosts.h3] address 198.18.0.1 is reserved"),
    (('address = "198.18.0.13"', 'address = "198.18.0.11"'),
     "[hosts.h3] address 198.18.0.11 is also the address of [hosts.h1]"),
    (('address = "198.18.0.13"', 'address = "host3"'),
     "[hosts.h3] address 'host3' is not an IP address"),
    (('[hosts.h3]\nvia = "netns"', '[hosts.h3]\nvia = "nets"'),
     "[hosts.h3] via is 'nets'; it must be one of 'local', 'netns', 'ssh' "
     "(did you mean 'netns'?)"),
    (('[hosts.h3]\nvia = "netns"', '[hosts.h3]\nvia = "netns"\nuser = "me"'),
     "[hosts.h3] user applies to via = \"ssh\" hosts only"),
    (('"num.partitions" = 3', '"num.partitions" = "three"'),
     "[config]: num.partitions must be an integer, got 'three'"),
    (('"num.partitions" = 3', '"node.id" = 7'),
     "[config] 'node.id' cannot be set here: it comes from the table name [nodes.N]"),
    (('"num.partitions" = 3', '"zookeeper.connect" = "x:1"'),
     "[config] 'zookeeper.connect' cannot be set here: it comes from [zookeeper]"),
    (('hosts = ["h1"]', 'hosts = ["h1"]\nconnect = "a:1"'),
     "[zookeeper] give hosts (servers `cluster up` starts) or connect"),
    (('hosts = ["h1"]', ''),
     "[zookeeper] needs hosts = [\"HOST\"]"),
    (('hosts = ["h1"]', 'hosts = ["h1", "h3", "h1"]'),
     "[zookeeper] hosts names h1 more than once (one server per host)"),
    (('hosts = ["h1"]', 'hosts = ["h1"]\nquorum_port = 2999'),
     "[zookeeper] quorum_port applies to an ensemble (two or more hosts)"),
    (('hosts = ["h1"]', 'hosts = ["h1", "h3"]\nelection_port = 2181'),
     "[zookeeper] port 2181, quorum_port 2888 and election_port 2181 must differ"),
    (('hosts = ["h1"]', 'hosts = ["h1", "h3"]\nquorum_port = 9092'),
     "[nodes.1] listener port 9092 on host h1 is also used by ZooKeeper's quorum port"),
    (('hosts = ["h1"]', 'connect = "zk1,zk2:2181"'),
     "[zookeeper] connect 'zk1,zk2:2181': 'zk1' is not host:port"),
    (('[nodes.3]', '[nodes.three]'),
     "[nodes.three] node ids are integers"),
    (('[nodes.3]\nhost = "h3"', '[nodes.03]\nhost = "h3"\n[nodes.3]\nhost = "h3"'),
     "[nodes.3] node id 3 is declared twice"),
    (('[nodes.3]\nhost = "h3"', '[nodes.2]\nhost = "h3"'),
     "node id 2 is declared twice"),
    (('[nodes.1]\nhost = "h1"',
      '[nodes.1]\nhost = "h1"\nconfig = {"listeners" = "198.18.0.11:2181"}'),
     "[nodes.1] listener port 2181 on host h1 is also used by ZooKeeper"),
])
def test_each_mistake_is_one_clear_line(edit: tuple[str, str], line: str) -> None:
    old, new = edit
    assert old in GOOD
    found = problems(GOOD.replace(old, new, 1))
    assert any(line in p for p in found), found
    assert all(p.startswith(str(PATH)) for p in found)
    assert all("\n" not in p for p in found)


def test_an_ensemble_of_servers_the_command_starts() -> None:
    spec = parse(GOOD.replace('hosts = ["h1"]', 'hosts = ["h1", "h2", "h3"]\n'
                              'quorum_port = 2889'))
    assert spec.zookeeper.ensemble and spec.zookeeper.hosts == ("h1", "h2", "h3")
    assert (spec.zookeeper.quorum_port, spec.zookeeper.election_port) == (2889, 3888)
    assert spec.connect_string() == "198.18.0.11:2181,198.18.0.12:2181,198.18.0.13:2181"
    assert NodePlan.of(spec, 2).config["zookeeper.connect"] == spec.connect_string()
    assert not parse(GOOD).zookeeper.ensemble


def test_servers_of_an_ensemble_need_their_own_addresses() -> None:
    text = GOOD.replace('hosts = ["h1"]', 'hosts = ["h1", "h4"]') + (
        '[hosts.h4]\nvia = "local"\naddress = "198.18.0.11"\n')
    assert any("[zookeeper] hosts h1, h4 share the address 198.18.0.11: each server of an "
               "ensemble needs its own" in p for p in problems(text))


def test_two_nodes_on_one_host_need_their_own_ports_and_dirs() -> None:
    text = GOOD.replace('[nodes.3]\nhost = "h3"', '[nodes.3]\nhost = "h1"')
    found = problems(text)
    assert any("[nodes.3] listener port 9092 on host h1 is also used by node 1's listener"
               in p for p in found), found
    assert any("[nodes.3] actor gateway port 9093 on host h1" in p for p in found), found
    # with its own port and the default data dir, node 3 may share the host
    ok = text.replace('"num.io.threads" = 4', '"listeners" = "198.18.0.11:9192"')
    plan = NodePlan.of(parse(ok), 3)
    assert plan.listen_port == 9192 and plan.gateway_port == 9193
    shared_dir = ok.replace('"num.partitions" = 3', '"log.dirs" = "/data/kafka"')
    assert any("log.dirs /data/kafka on host h1 is also node 1's" in p
               for p in problems(shared_dir))


def test_every_listener_port_is_checked_not_only_the_first() -> None:
    """A second listener on the first one's port + 1 is where the gateway goes by default:
    the node's gateway failed to bind and it ran on without one."""
    text = GOOD + ('\n[nodes.1.config]\n"listeners" = "PLAINTEXT://198.18.0.11:19092,'
                   'SSL://198.18.0.11:19093"\n')
    assert any("[nodes.1] actor gateway port 19093 on host h1 is also used by node 1's "
               "listener" in p for p in problems(text)), problems(text)
    moved = text.replace('SSL://198.18.0.11:19093"', 'SSL://198.18.0.11:19095"')
    assert NodePlan.of(parse(moved), 1).listener_ports == (19092, 19095)


def test_zookeeper_on_loopback_cannot_serve_nodes_on_other_hosts() -> None:
    text = GOOD.replace('hosts = ["h1"]', 'hosts = ["h0"]') + '[hosts.h0]\nvia = "local"\n'
    found = problems(text)
    assert any("[zookeeper] the server on h0 (127.0.0.1, a loopback address) cannot be "
               "reached from host(s) h1, h2, h3" in p for p in found), found


def test_every_problem_is_reported_at_once() -> None:
    text = GOOD.replace('address = "198.18.0.13"', 'address = "10.0.0.13"').replace(
        '[nodes.2]\nhost = "h2"', '[nodes.2]\nhost = "h9"').replace("[config]", "[confg]")
    found = problems(text)
    assert len(found) == 3, found


def test_empty_and_broken_files() -> None:
    found = problems("")
    assert any("has no [hosts.NAME] table" in p for p in found)
    assert any("has no [nodes.N] table" in p for p in found)
    assert problems("[hosts\n")[0].startswith(f"{PATH}: not valid TOML:")


def test_ssh_data_dir_must_be_absolute() -> None:
    text = GOOD.replace('user = "root"', 'user = "root"\ndata_dir = "rel/dir"')
    assert any("data_dir 'rel/dir' must be an absolute path on the remote host" in p
               for p in problems(text))


def test_unknown_node_id_in_a_command() -> None:
    spec = parse(GOOD)
    assert spec.node_ids() == [1, 2, 3]
    assert spec.node_ids([2]) == [2]
    with pytest.raises(SpecError, match="no node 7 in this spec"):
        spec.node_ids([7])


_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    _text,
)


@given(st.dictionaries(_text.filter(bool), st.one_of(
    toml_scalars, st.dictionaries(_text.filter(bool), toml_scalars, max_size=3)), max_size=6))
def test_render_toml_reads_back_to_the_same_values(values: dict[str, object]) -> None:
    assert tomllib.loads(render_toml(values)) == values


def test_check_says_what_the_spec_describes(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from actors.cluster_cli import group

    spec = tmp_path / "demo.toml"
    spec.write_text(GOOD.replace('hosts = ["h1"]', 'hosts = ["h1", "h2", "h3"]')
                    .replace('identity_file = "keys/id"\n', ""))
    result = CliRunner().invoke(group, ["check", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert ("ZooKeeper: ensemble of 3 on h1, h2, h3 (ids 1-3 in that order), ports "
            "2181/2888/3888 (client/quorum/election)") in result.output
    assert ("zookeeper.connect of the nodes: 198.18.0.11:2181,198.18.0.12:2181,"
            "198.18.0.13:2181") in result.output
    assert "node 2: host h2, listener 198.18.0.12:9092" in result.output


def test_a_tls_only_node_with_a_plain_client_config_names_its_protocol(tmp_path: Path) -> None:
    """An all-TLS node and a client_config with security.protocol=SASL_PLAINTEXT: the
    problem names that protocol; a key the client_config has but `up` does not use is
    named in a warning by `check`, as topics --command-config names it."""
    from click.testing import CliRunner

    from actors.cluster_cli import group

    (tmp_path / "client.properties").write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=alice\n"
        "sasl.password=secret\n")
    tls_node = '\n[nodes.1.config]\n"listeners" = "SSL://198.18.0.11:19093"\n'
    found = problems_at('[cluster]\nclient_config = "client.properties"\n' + GOOD + tls_node,
                        tmp_path / "demo.toml")
    assert any("every listener is TLS" in p and "security.protocol=SASL_PLAINTEXT" in p
               for p in found), found
    (tmp_path / "client.properties").write_text("security.protocol=SSL\nlinger.ms=5\n")
    spec = tmp_path / "demo.toml"
    spec.write_text('[cluster]\nclient_config = "client.properties"\n'
                    + GOOD.replace('hosts = ["h1"]', 'hosts = ["h1", "h2", "h3"]')
                    .replace('identity_file = "keys/id"\n', "") + tls_node)
    result = CliRunner().invoke(group, ["check", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert "ignoring unknown key linger.ms" in result.output
    assert (f"client config of up and status: {tmp_path / 'client.properties'} (SSL)"
            in result.output)
    (tmp_path / "client.properties").write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nsasl.username=alice\n"
        "sasl.password=hush-secret\n")
    result = CliRunner().invoke(group, ["check", "--spec", str(spec)])
    assert result.exit_code == 0, result.output
    assert (f"client config of up and status: {tmp_path / 'client.properties'} (SASL_SSL)"
            in result.output)
    assert "hush-secret" not in result.output and "alice" not in result.output


def problems_at(text: str, path: Path) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_spec(text, path)
    return info.value.problems
