"""Small file-system primitives the log needs to be crash-safe: whole writes and directory fsync."""

from __future__ import annotations

import os
from pathlib import Path

Buffer = bytes | bytearray | memoryview


def pwrite_all(fd: int, data: Buffer, position: int) -> None:
    """Write all of ``data`` at ``position``; a regular file may still accept a short write."""
    view = memoryview(data)
    written = 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], position + written)


def fsync_dir(path: Path) -> None:
    """Make creations, renames and deletions inside ``path`` durable: they live in the directory."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """fsync a file we hold no descriptor for (memory-mapped indexes; their map owns a dup)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
