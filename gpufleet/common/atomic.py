"""Crash-safe writes of a user's files: after a crash or a power loss a reader finds the old file or the new one,
never part of one, and never an empty file where the new one was renamed in.

:func:`write_atomic` writes a temporary file in the target's directory, ``fsync`` s it, renames it over the target
(``os.replace``: atomic on POSIX file systems) and ``fsync`` s the directory, so the rename itself is durable
(rename(2) and fsync(2); the sequence the ext4 and XFS documentation give for replacing a file durably).
:func:`replace_dir` does the same for a directory of files (``gpufleet render -o``). Every writer of a file a user
keeps (stack files, the mig-parted config, the inventory, the lab's state and credentials) goes through them.

The kill tests (tests/unit/fleet/test_promote_kill.py) stop a process at each of these steps in turn: every step
calls :func:`step`, which counts it, names it in the file ``$GPUFLEET_TEST_STEPS`` when that is set, and sends the
process SIGKILL at step number ``$GPUFLEET_TEST_KILL_AT``. Both variables are for tests only.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

KILL_AT = "GPUFLEET_TEST_KILL_AT"
STEPS_LOG = "GPUFLEET_TEST_STEPS"
_count = 0


def step(what: str) -> None:
    """A file-system step of a crash-safe write (or of the ledger's append) is about to happen: the kill tests' hook.
    Does nothing unless one of the test variables is set."""
    global _count
    _count += 1
    log = os.environ.get(STEPS_LOG)
    if log:
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{_count} {what}\n")
    if os.environ.get(KILL_AT) == str(_count):
        os.kill(os.getpid(), signal.SIGKILL)


def fsync_dir(path: Path) -> None:
    """Make the entries of directory ``path`` (a file renamed in or created) durable."""
    step(f"fsync dir {path}")
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: str | bytes, *, mode: int | None = None, follow_symlinks: bool = True) -> None:
    """Replace (or create) ``path`` with ``data`` crash-safely. The file gets ``mode`` (e.g. 0o600 for a secret: the
    temporary file is created owner-only and keeps that mode), else the mode of the file it replaces, else 0o666
    less the umask (what open() gives a new file). Text is written as UTF-8. A symlink at ``path`` has its target
    replaced (``follow_symlinks``, the default) or is itself replaced by the file. Something at ``path`` that is no
    regular file (``/dev/stdout``, a FIFO) is written to as it is: there is nothing to rename over."""
    path = Path(os.path.realpath(path)) if follow_symlinks else Path(path)
    body = data.encode("utf-8") if isinstance(data, str) else data
    if path.exists() and not path.is_file():
        with open(path, "wb") as f:
            f.write(body)
        return
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask  # what open() gives a new file
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".gpufleet-tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        step(f"write {path}")
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
        step(f"fsync {path}")
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    try:
        step(f"rename {path}")
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def replace_dir(staging: Path, out: Path, earlier: Callable[[Path], Iterable[str]] | None = None) -> None:
    """Move the files of directory ``staging`` into ``out`` crash-safely: each file made durable, then ``staging``
    renamed to ``out`` when ``out`` does not exist (one atomic step), else each file renamed over its namesake in
    ``out`` (files of ``out`` that ``staging`` lacks are kept, but those ``earlier(out)`` names: what an earlier
    move of the same kind put there); the directories' entries made durable. Two moves into the same ``out`` at once
    take turns (an exclusive lock on ``out``'s parent directory), so ``out`` ends with one move's files, never a mix
    of both."""
    for f in sorted(p for p in staging.iterdir() if p.is_file()):
        fd = os.open(f, os.O_RDONLY)
        try:
            step(f"fsync {f}")
            os.fsync(fd)
        finally:
            os.close(fd)
    fsync_dir(staging)
    lock = os.open(out.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            step(f"rename {staging} {out}")
            staging.rename(out)
            fsync_dir(out.parent)
            return
        new = sorted(p for p in staging.iterdir() if p.is_file())
        for name in sorted(set(earlier(out) if earlier is not None else ()) - {f.name for f in new}):
            if "/" not in name and name not in ("", ".", ".."):
                step(f"unlink {out / name}")
                with contextlib.suppress(FileNotFoundError):
                    (out / name).unlink()
        for f in new:
            step(f"rename {out / f.name}")
            os.replace(f, out / f.name)
        fsync_dir(out)
    finally:
        os.close(lock)  # closing releases the lock
