from tests.fixtures.cluster import cluster_factory
from tests.fixtures.zookeeper import zk_connect, zk_ensemble, zookeeper_server

__all__ = ["cluster_factory", "zk_connect", "zk_ensemble", "zookeeper_server"]
