"""Generated protobuf and gRPC stubs of the brook.v1 contract (proto/brook/v1).

Do not edit the *_pb2* modules: change the .proto files and run tools/gen_protos.py.
"""
