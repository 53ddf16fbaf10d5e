"""Generated protobuf and gRPC stubs for the brook.v1 contract (proto/brook/v1). Do not edit: run tools/gen_protos.py."""
