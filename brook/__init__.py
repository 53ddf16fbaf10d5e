"""Brook: code shared by every Brook process.

The contract stubs (brook.v1), configuration, telemetry, the service runtime, the record-batch
codec, the client SDK and the CLI.
"""
