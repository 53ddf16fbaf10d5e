"""Brook's RPC plumbing, one home per concept: every process (the SDK, Admin, the gateway and the
services) reaches another Brook process through these modules rather than a copy of its own.

- ``addresses``: writing, picking and reading ``host:port`` (IPv6-correct).
- ``backoff``: Kafka's exponential retry back-off with jitter (``RetryBackoff``, ``backoff_s``).
- ``errors``: a failed gRPC call as a Kafka error code and a message (``rpc_error``).
- ``channels``: the one options builder (``channel_options``: keepalive, message sizes,
  reconnect back-off, user agent) and the one pool (``ChannelPool``; ``SyncChannelPool`` for
  the blocking Admin); nothing else opens a channel.
- ``quorum``: the active controller look-up (NOT_CONTROLLER hints, back-off, deadline).
- ``coordinators``: a group's coordinator look-up (FindCoordinator, NOT_COORDINATOR hints).
- ``server_telemetry``: the server side's span and latency per call (a grpc.aio interceptor the
  service runtime installs for the services a ``ServiceSpec`` names).

The services import these, never the client SDK (``tests/static/test_import_graph.py``).
"""
