"""A Spark driver for test_spark_exactly_once.py's driver-kill test, run as its own process:
text files of DIRECTORY (one file a micro-batch) streamed to TOPIC through the exactly-once
sink with CHECKPOINT, until every file is written (Trigger.AvailableNow).

    python eos_driver.py CONTROLLERS TOPIC DIRECTORY CHECKPOINT SCRATCH
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spark_session import spark_session

QUERY_TIMEOUT_S = 300


def main(bootstrap: str, topic: str, directory: str, checkpoint: str, scratch: str) -> int:
    with spark_session(Path(scratch)) as spark:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(directory)
            .writeStream.format("brook")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", topic)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            if not query.awaitTermination(QUERY_TIMEOUT_S):
                return 2
        finally:
            query.stop()
        return 0 if query.exception() is None else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
