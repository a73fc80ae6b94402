"""A local Ray cluster (a head and two worker nodes on 127.0.0.1) for the cluster tests, once per
session; the tests skip where Ray (the `cluster` extra) is not installed."""

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    pytest.importorskip("ray")
    from tests.helpers.ray_cluster import LocalRayCluster

    with LocalRayCluster(workers=2) as cluster:
        yield cluster
