"""Brook's RPC plumbing, one home per concept: every process (the SDK, Admin, the gateway and the
services) reaches another Brook process through these modules rather than a copy of its own.

- ``addresses``: writing, picking and reading ``host:port`` (IPv6-correct).
"""
