"""Fixtures the VM tests share (test_virt, test_kubevirt): the recorded hosts' facts, read once per session."""

from __future__ import annotations

from typing import Any

import pytest

from gpufleet.host.hostfacts import read_host
from tests.conftest import FIXTURES

DGX = FIXTURES / "hosts" / "dgx-h100"  # 8 H100 SXM5 on two NUMA nodes, recorded
LAB = FIXTURES / "hosts" / "lab-vm-tuned"  # a converged lab VM: NVMe PF with 4 VFs on node 1, recorded


@pytest.fixture(scope="session")
def dgx(catalog) -> dict[str, Any]:
    return read_host(str(DGX), catalog.gpus_by_pci_id)


@pytest.fixture(scope="session")
def lab(catalog) -> dict[str, Any]:
    return read_host(str(LAB), catalog.gpus_by_pci_id)
