"""A local Ray cluster (a head and two worker nodes on 127.0.0.1) for the cluster tests, once per
session; the tests skip where Ray (the `cluster` extra) is not installed."""

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    pytest.importorskip("ray")
    from tests.helpers.ray_cluster import LocalRayCluster

    with LocalRayCluster(workers=2) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def cluster_model(tmp_path_factory):
    """The Nano Q4_0 test model, linked into a folder of this session: the shared cache may
    replace its file (another converter's fingerprint) while the workers still read it."""
    import os

    from tests.helpers.models import model_path

    source = model_path("nano", "q4_0")
    kept = tmp_path_factory.mktemp("model") / source.name
    try:
        os.link(source, kept)
    except OSError:  # another file system: a copy
        import shutil

        shutil.copyfile(source, kept)
    return str(kept)
