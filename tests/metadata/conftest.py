from tests.fixtures.zookeeper import zk_connect, zk_ensemble, zookeeper_server

__all__ = ["zk_connect", "zk_ensemble", "zookeeper_server"]
