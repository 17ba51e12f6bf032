from tests.fixtures.netns import make_test_hosts
from tests.fixtures.sshd import ssh_host
from tests.fixtures.zookeeper import zk_connect, zookeeper_server

__all__ = ["make_test_hosts", "ssh_host", "zk_connect", "zookeeper_server"]
