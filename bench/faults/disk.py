"""A disk that fills up: a small tmpfs, mounted for a fault and unmounted after.

The fault bench's ``full-disk`` row and the journal's failure tests put the
scheduler's journal on one (:func:`small_tmpfs`, which needs root: skip or
refuse otherwise), fill it to the last byte (:func:`fill`) while jobs run, and
free it again (:func:`free`). A tmpfs is memory: nothing here touches a real
disk, and unmounting it removes everything it held.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

FILLER = "filler"


class DiskError(RuntimeError):
    """A tmpfs could not be mounted here (not root, or no mount)."""


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (made if missing), unmounted on exit."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise DiskError("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise DiskError(f"cannot mount a tmpfs at {path}: {done.stderr.strip()}")
    try:
        yield path
    finally:
        # Lazy: a process that still has a file open there (a scheduler being stopped)
        # keeps its mount until it closes it, and nothing waits for that here.
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path) -> Path:
    """Fill the filesystem of ``path`` to its last byte with one file; that file."""
    filler = path / FILLER
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1):  # big first, then the last partial pages
            block = b"\0" * chunk
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
    finally:
        os.close(fd)
    probe = path / ".probe"
    try:
        probe.write_bytes(b"x")
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    else:
        raise DiskError(f"{path} still takes writes after it was filled")
    finally:
        with contextlib.suppress(FileNotFoundError):
            probe.unlink()
    return filler


def free(path: Path) -> None:
    """Remove what :func:`fill` wrote."""
    with contextlib.suppress(FileNotFoundError):
        (path / FILLER).unlink()


def read_only(path: Path) -> None:
    """Remount the tmpfs at ``path`` read-only."""
    subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True, check=True)
