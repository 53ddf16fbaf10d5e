"""Brook: shared code for every Brook process (contract stubs, config, telemetry, codec, SDK, CLI)."""
