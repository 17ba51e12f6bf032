"""Hosts for a cluster: the spec, test hosts (network namespaces), ssh, launchers, faults.

``spec`` parses and checks a cluster spec; ``node_config`` derives each node's
config; ``runner`` runs commands on a host (here, in a namespace, over ssh);
``netns`` makes and removes test hosts; ``launch`` starts and stops nodes and
ZooKeeper by pid file; ``faults`` kills, pauses, isolates and shapes hosts;
``units`` writes systemd units; ``cluster`` ties them into `actorlog cluster`.
"""
