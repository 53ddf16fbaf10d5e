#!/bin/sh
# The image's entrypoint: one image runs every Brook service, the first argument says which.
#   <controller|storage-node|group-coordinator|gateway> [--override key=value]...
# runs that service with its config file from /etc/brook (settings also come from BROOK_*
# environment variables, which win over the file). Any other command that exists in the
# image (brook, sh, ...) runs as given, so `docker run IMAGE brook health HOST:PORT` works.
set -eu

usage="usage: <controller|storage-node|group-coordinator|gateway> [--override key=value]... | <command> [args]..."

if [ "$#" -eq 0 ]; then
    echo "$usage" >&2
    exit 2
fi

case "$1" in
    controller | storage-node | group-coordinator | gateway)
        service="$1"
        shift
        # exec: the service becomes the container's main process and receives its SIGTERM.
        exec python -m "brook_$(echo "$service" | tr - _)" \
            --config "/etc/brook/$service.properties" "$@"
        ;;
esac

if command -v "$1" >/dev/null 2>&1; then
    exec "$@"
fi
echo "unknown service or command: $1" >&2
echo "$usage" >&2
exit 2
