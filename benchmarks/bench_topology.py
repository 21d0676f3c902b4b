"""NUMA planning for 10,000 hosts, facts in memory (target: under 5 s).

The fleet cycles through the recorded machines (DGX H100 and A100, HGX H200, workstation, CPU-only, no-locality)
with a profile each, so the big 8-GPU hosts are a third of it.
"""

from __future__ import annotations

import time

from benchmarks.common import REPO, Figure

HOSTS = 10_000


def run() -> list[Figure]:
    from gpufleet.catalog import load_catalog
    from gpufleet.host.hostfacts import read_host
    from gpufleet.host.topology import plan
    from gpufleet.spec.models import TuningProfile

    catalog = load_catalog().gpus_by_pci_id
    profiles = {
        "dgx-h100": TuningProfile(hugepages_1g_per_gpu=8, vfs_per_nic=8, isolation=True),
        "dgx-a100": TuningProfile(cores_per_gpu=7, hugepages_1g_per_node=4, vfs_per_nic=8),
        "hgx-h200": TuningProfile(hugepages_2m_per_node=4096),
        "workstation-l40s": TuningProfile(cores_per_gpu=6, vfs_per_nic=32),
        "no-gpu": TuningProfile(hugepages_1g_per_node=64, vfs_per_nic=64),
        "numa-unknown": TuningProfile(cores_per_gpu=6),
    }
    fleet = [(name, read_host(str(REPO / "tests/fixtures/hosts" / name), catalog), p) for name, p in profiles.items()]
    start = time.perf_counter()
    gpus = 0
    for i in range(HOSTS):
        name, facts, profile = fleet[i % len(fleet)]
        gpus += len(plan(facts, profile, f"{name}-{i}").gpus)
    seconds = time.perf_counter() - start
    print(f"   {HOSTS} hosts ({gpus} GPUs) planned")
    return [
        Figure("topology plan, 10,000 hosts (facts in memory)", seconds, "s", 5.0),
        Figure("topology plan, per host", seconds / HOSTS * 1000, "ms"),
    ]
