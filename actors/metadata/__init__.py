"""Cluster metadata: the store the Controller and the nodes share (ZooKeeper, or a model of it)."""
