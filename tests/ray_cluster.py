"""A local multi-node Ray cluster for tests: one head and several raylets on this machine,
all on 127.0.0.1 (nothing listens beyond loopback), each node a separate set of Ray
processes with its own resources, as on separate machines. Built on Ray's own
`ray.cluster_utils.Cluster`, the helper Ray tests itself with."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

OBJECT_STORE_BYTES = 80 * 1024 * 1024
"""Small object stores: the records are small, and the test box has little memory to spare."""


LOOPBACK_ENV = {
    # Ray replaces 127.0.0.1 in an address with the machine's outward IP unless it runs in
    # its single-machine mode (what it uses on macOS): then every node and driver stays on
    # loopback. A driver started as a subprocess needs the same environment.
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
}
# Ray reads it once, when it is first imported: import this module before ray.
os.environ.update(LOOPBACK_ENV)


@dataclass
class LocalCluster:
    address: str
    cluster: Any
    nodes: list[Any]


@contextlib.contextmanager
def local_ray_cluster(workers: int = 2, cpus_per_node: int = 2) -> Iterator[LocalCluster]:
    """A head with no CPU (nothing is placed on it) and `workers` raylets, each with
    `cpus_per_node` CPUs; torn down afterwards, whatever happened."""
    from ray._private import ray_constants
    from ray.cluster_utils import Cluster

    if ray_constants.ENABLE_RAY_CLUSTER:
        raise RuntimeError("ray was imported before tests/ray_cluster.py: it would leave loopback")

    node = {
        "node_ip_address": "127.0.0.1",
        "object_store_memory": OBJECT_STORE_BYTES,
    }
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**node, "num_cpus": 0, "include_dashboard": False},
    )
    try:
        nodes = [cluster.add_node(**node, num_cpus=cpus_per_node) for _ in range(workers)]
        cluster.wait_for_nodes()
        yield LocalCluster(cluster.address, cluster, nodes)
    finally:
        cluster.shutdown()
