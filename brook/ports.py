"""TCP port helpers for processes started on loopback (the local launcher and the tests).

Free ports are drawn at random from a band below the kernel's ephemeral range rather than
asked of the kernel with port 0: the kernel hands port-0 binds *and* outgoing connections
out of the ephemeral range, so a port it gave us could be taken by some process's client
socket (a controller dialling its peers, say) before the service meant for it binds it.
"""

from __future__ import annotations

import errno
import random
import socket
from collections.abc import Collection
from pathlib import Path

# The band we draw from when the ephemeral range leaves room below it; ports under 10000 are
# where well-known services (and Brook's own fixed ports, 9092-9599) live.
FREE_PORT_BAND_LOW = 20000
FREE_PORT_ATTEMPTS_MAX = 2000
_EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Linux's default, used where the kernel does not tell us (macOS and others differ, but a
# wrong guess only makes a collision with a client socket a little more likely).
_EPHEMERAL_RANGE_DEFAULT = (32768, 60999)


class PortAllocationError(RuntimeError):
    """No set of free ports could be found within the attempt bound."""


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range for ephemeral ports, inclusive."""
    try:
        low_text, high_text = _EPHEMERAL_RANGE_FILE.read_text().split()
        return int(low_text), int(high_text)
    except (OSError, ValueError):
        return _EPHEMERAL_RANGE_DEFAULT


def port_is_free(host: str, port: int) -> bool:
    """Whether a listening socket could bind ``host:port`` now.

    SO_REUSEADDR is set as every server does, so connections lingering in TIME_WAIT from a
    previous run of the same service do not count as taking the port.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def _candidate_band() -> range:
    ephemeral_low, ephemeral_high = ephemeral_port_range()
    if ephemeral_low - FREE_PORT_BAND_LOW >= 1000:
        return range(FREE_PORT_BAND_LOW, ephemeral_low)
    if 65535 - ephemeral_high >= 1000:
        return range(ephemeral_high + 1, 65536)
    return range(FREE_PORT_BAND_LOW, 65536)


def allocate_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports on ``host`` that are free right now.

    Nothing reserves them: a port can still be taken between this call and the bind of the
    process it is meant for. Drawing at random from a band of thousands of ports keeps that
    unlikely even with several test sessions on one machine.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    band = _candidate_band()
    if count > len(band):
        raise PortAllocationError(f"cannot allocate {count} ports from a band of {len(band)}")
    chosen: list[int] = []
    taken: set[int] = set()
    for _ in range(FREE_PORT_ATTEMPTS_MAX):
        if len(chosen) == count:
            return chosen
        port = random.choice(band)
        if port in taken:
            continue
        taken.add(port)
        if port_is_free(host, port):
            chosen.append(port)
    if len(chosen) == count:
        return chosen
    raise PortAllocationError(
        f"found only {len(chosen)} of {count} free ports on {host} "
        f"in {FREE_PORT_ATTEMPTS_MAX} attempts (band {band.start}-{band.stop - 1})"
    )


def allocate_free_port_block(
    count: int, host: str = "127.0.0.1", avoid: Collection[int] = ()
) -> int:
    """The first of ``count`` consecutive ports on ``host`` that are free right now and not in
    ``avoid`` (ports already handed out, not yet bound): for a process that listens on a
    range of ports, such as a gateway's per-broker Kafka ports. Nothing reserves them, as with
    ``allocate_free_ports``."""
    if count < 1:
        raise ValueError(f"count must be >= 1, got {count}")
    band = _candidate_band()
    if count > len(band):
        raise PortAllocationError(f"cannot allocate {count} ports from a band of {len(band)}")
    starts = range(band.start, band.stop - count + 1)
    for _ in range(FREE_PORT_ATTEMPTS_MAX // count + 1):
        start = random.choice(starts)
        block = range(start, start + count)
        if not any(port in avoid for port in block) and all(
            port_is_free(host, port) for port in block
        ):
            return start
    raise PortAllocationError(
        f"found no {count} consecutive free ports on {host} "
        f"in {FREE_PORT_ATTEMPTS_MAX // count + 1} attempts (band {band.start}-{band.stop - 1})"
    )
