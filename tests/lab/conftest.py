"""The lab tests boot real VMs (QEMU, KVM where it works, software emulation otherwise).

They never skip: on a machine without what the lab needs they fail, saying what is missing. Every VM a test
starts is removed when the test ends (Lab.down), also when it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

NEEDED = ["qemu-system-x86_64", "qemu-img", "debootstrap", "sfdisk", "mkfs.ext4", "virsh", "libvirtd", "ssh"]


def require_virtualization() -> None:
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    problems = []
    if missing:
        problems.append(f"missing tools: {', '.join(missing)} (make setup installs them on Debian/Ubuntu)")
    if os.geteuid() != 0:
        problems.append("the lab needs root (debootstrap, chroot, libvirt's system instance)")
    if problems:
        pytest.fail("the lab cannot run here: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="class")
def lab_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two fresh lab hosts (prefix `test`), their inventory, torn down afterwards."""
    from gpufleet.lab import Lab, LabError

    require_virtualization()
    lines: list[str] = []
    lab = Lab("test", 2, progress=lambda m: (lines.append(m), print(m, flush=True)))
    inventory = tmp_path_factory.mktemp("lab") / "hosts.yml"
    try:
        result = lab.up(inventory=inventory, fresh=True)
    except LabError as exc:
        lab.down()
        pytest.fail(f"the lab did not come up: {exc}", pytrace=False)
    try:
        yield {"lab": lab, "result": result, "inventory": inventory, "log": lines}
    finally:
        lab.down()
