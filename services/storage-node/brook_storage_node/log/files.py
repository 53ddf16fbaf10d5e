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


def write_atomically(path: Path, data: Buffer, temp_suffix: str) -> None:
    """Replace ``path`` by ``data`` so that a crash or power loss leaves the old file or the
    new one, never a mix: written to ``path + temp_suffix``, fsynced, renamed, and the
    directory fsynced. OSError propagates."""
    temp = path.with_name(path.name + temp_suffix)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_dir(path.parent)


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


def may_exist(path: Path) -> bool:
    """Whether ``path`` may exist: False only when the file system says it does not. A look-up
    that fails otherwise (a failing disk) counts as "may": a caller deciding whether a commit
    file was written must not take an error for "no"."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True
