"""Where the lab keeps its files, and the shape of a lab host (see docs/lab.md)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from gpufleet.common.atomic import write_atomic
from gpufleet.common.paths import cache_dir


def lab_dir() -> Path:
    path = cache_dir() / "lab"
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_private(path: Path, text: str) -> None:
    """Write a secret (credentials, a password hash) readable by its owner only: the file is created with mode 0600,
    never world-readable for a moment (the new file replaces the old one crash-safely: it is owner-only from the
    moment it exists)."""
    if path.is_symlink():  # a secret goes where it is asked to, never where a link points
        raise OSError(errno.ELOOP, f"{path} is a symbolic link: not written")
    write_atomic(path, text, mode=0o600, follow_symlinks=False)


@contextlib.contextmanager
def lab_lock(progress: Callable[[str], None] | None = None) -> Iterator[None]:
    """Serialize what labs on this machine share (the image build, libvirt's daemons, the Redfish emulator, SSH
    ports, state files) so that several ``gpufleet lab`` commands (e.g. Molecule scenarios) can run at once."""
    with _flock(lab_dir() / "lab.lock", "waiting for another gpufleet lab command on this machine", progress):
        yield


@contextlib.contextmanager
def prefix_lock(prefix: str, progress: Callable[[str], None] | None = None) -> Iterator[None]:
    """One lab's own turn (the lab of hosts ``prefix``-N): held for a whole ``lab up`` or ``lab down`` of it, so
    that two of them on one lab take turns (the second finds the first's hosts running, restored and renamed)
    while labs of other prefixes go on. Taken before :func:`lab_lock`, never inside it."""
    message = f"waiting for another gpufleet lab command on lab {prefix!r} to finish"
    with _flock(lab_dir() / f"lab-{prefix}.lock", message, progress):
        yield


@contextlib.contextmanager
def _flock(path: Path, waiting: str, progress: Callable[[str], None] | None) -> Iterator[None]:
    with path.open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if progress is not None:
                progress(waiting)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class HostShape:
    """A lab host: two sockets of two cores, one NUMA node each.

    Node 0 holds the memory below 4 GiB (kernel, initrd) and needs whole aligned GiBs above it for a 1 GiB
    hugepage; node 1 gets three GiBs because its own page structures take its top one. With two, a boot-time
    1 GiB page on node 1 was missing on some boots (the image also boots with ``nokaslr``: see image.py)."""

    sockets: int = 2
    cores_per_socket: int = 2
    node_mib: tuple[int, ...] = (4096, 3072)
    disk_gib: int = 8
    sriov_vfs: int = 4  # the NVMe controller's sriov_max_vfs
    sriov_node: int = 1

    @property
    def vcpus(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def memory_mib(self) -> int:
        return sum(self.node_mib)


SHAPE = HostShape()
SSH_PORT_BASE = 22220  # lab host N listens on 127.0.0.1:(base + N)
REDFISH_PORT = 8000
DOMAIN_PREFIX = "gpufleet-"


def host_uuid(name: str) -> str:
    """A fixed UUID per host name (the BMC addresses hosts by it)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpufleet-lab:{name}"))


LAB_STACK = "lab-local"  # the stack whose bare-metal group the lab is (Pulumi.lab-local.yaml)
