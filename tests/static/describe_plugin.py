"""A protoc plugin that generates no code: it writes what it was asked to generate as JSON.

tests/static/test_buf_generate.py puts it in place of a buf.gen.*.yaml template's remote
plugin, so buf runs the template offline and the test sees exactly what that plugin would be
given: its parameter and, for each file to generate, the file options managed mode set.

    python describe_plugin.py NAME    writes NAME.json (NAME: the plugin it stands in for)
"""

from __future__ import annotations

import json
import sys

from google.protobuf.compiler import plugin_pb2


def main() -> None:
    (name,) = sys.argv[1:]
    request = plugin_pb2.CodeGeneratorRequest.FromString(sys.stdin.buffer.read())
    files = {
        proto.name: {
            "go_package": proto.options.go_package,
            "java_package": proto.options.java_package,
            "java_multiple_files": proto.options.java_multiple_files,
        }
        for proto in request.proto_file
        if proto.name in request.file_to_generate
    }
    response = plugin_pb2.CodeGeneratorResponse(
        supported_features=plugin_pb2.CodeGeneratorResponse.FEATURE_PROTO3_OPTIONAL
    )
    response.file.add(
        name=f"{name}.json", content=json.dumps({"parameter": request.parameter, "files": files})
    )
    sys.stdout.buffer.write(response.SerializeToString())


if __name__ == "__main__":
    main()
