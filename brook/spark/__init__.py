"""Spark integration: Brook topics as DataFrames, batch and streaming, through PySpark's Python
Data Source API (PySpark 4.0+), mirroring the options and schema of Spark's Kafka connector so
a job ports by changing ``format("kafka")`` to ``format("brook")``.

    from brook.spark import register
    register(spark)                                   # once per SparkSession
    df = (spark.read.format("brook")
          .option("kafka.bootstrap.servers", "127.0.0.1:9101")
          .option("subscribe", "orders")
          .load())

Reading yields Arrow record batches; writing takes them (``DataSourceArrowWriter``). The
streaming sink is exactly-once (docs/spark.md); ``produce`` and ``produce_udf`` are the UDF
producers. Needs the ``[spark]`` extra.
"""

from brook.spark.produce import produce, produce_udf
from brook.spark.source import BrookDataSource, register

__all__ = ["BrookDataSource", "produce", "produce_udf", "register"]
