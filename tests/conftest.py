"""Fixtures shared by every test. The cluster fixture lives in cluster_fixture.py."""

from cluster_fixture import cluster_factory, pytest_runtest_makereport

# pytester runs an inner pytest session: how the cluster fixture's failure reports are tested.
pytest_plugins = ["pytester"]

__all__ = ["cluster_factory", "pytest_runtest_makereport"]
