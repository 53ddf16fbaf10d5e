"""Brook's RPC plumbing, one home per concept: every process (the SDK, Admin, the gateway and the
services) reaches another Brook process through these modules rather than a copy of its own.

- ``addresses``: writing, picking and reading ``host:port`` (IPv6-correct).
- ``backoff``: Kafka's exponential retry back-off with jitter (``RetryBackoff``, ``backoff_s``).
- ``errors``: a failed gRPC call as a Kafka error code and a message (``rpc_error``).
- ``channels``: the keepalive settings of every channel, and ``Network``, a client's reused
  channels to storage nodes and group coordinators.

The services import these, never the client SDK (``tests/static/test_import_graph.py``).
"""
