"""Fixtures of the Spark integration's tests: one real SparkSession for all of them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from spark_session import spark_session


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    with spark_session(tmp_path_factory.mktemp("spark")) as session:
        yield session
