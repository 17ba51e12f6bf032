from tests.fixtures.zookeeper import zk_connect, zookeeper_server

__all__ = ["zk_connect", "zookeeper_server"]
