"""A real Spark for the tests: local mode, two cores, its Python workers on this venv.

One session serves every Spark test of a pytest run (Spark takes seconds to start). Its
master is ``local[2,4]``: two cores, and a failed task retried up to four times
(``spark.task.maxFailures``; plain ``local[2]`` never retries, and the exactly-once sink's
tests need a task that fails on its first attempt to be retried). The JVM is stopped on the
way out, and its scratch space lives under the test run's temporary directory.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark import SparkContext
from pyspark.sql import SparkSession

from brook.spark import register

__all__ = ["JVM_STOP_TIMEOUT_S", "SPARK_MASTER", "spark_session"]

SPARK_MASTER = "local[2,4]"
JVM_STOP_TIMEOUT_S = 30.0


@contextmanager
def spark_session(scratch: Path, master: str = SPARK_MASTER) -> Iterator[SparkSession]:
    """A started SparkSession with ``format("brook")`` registered; stopped, its JVM with it,
    on the way out. ``scratch``: a directory for Spark's local files and warehouse;
    ``master``: the tests' unless a benchmark wants plain ``local[2]``."""
    # Spark starts its Python workers with PYSPARK_PYTHON: this interpreter, so they import
    # the same brook and pyarrow.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(master)
        .appName("brook-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={scratch / 'derby'}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        register(session)
        yield session
    finally:
        session.stop()
        gateway = SparkContext._gateway
        if gateway is not None:
            gateway.shutdown()
            process = getattr(gateway, "proc", None)
            if process is not None:
                process.stdin.close()
                process.wait(timeout=JVM_STOP_TIMEOUT_S)
            SparkContext._gateway = None
            SparkContext._jvm = None
