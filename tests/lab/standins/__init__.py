"""Test doubles installed inside lab VMs (never on real hosts); see fake_nvidia.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.catalog import Catalog

FAKE_NVIDIA = Path(__file__).with_name("fake_nvidia.py")


def fake_gpu_state(catalog: Catalog, model: str, count: int) -> dict[str, Any]:
    """The double's initial state: ``count`` GPUs of a catalog model, MIG off, with the catalog's MIG rules."""
    gpu = catalog.gpu(model)
    if gpu.mig is None:
        raise ValueError(f"{gpu.name} has no MIG")
    profiles = {
        p.name: {
            "compute": p.compute_slices,
            "memory": p.memory_slices,
            "starts": list(p.starts),
            "max": p.max_count,
            "media_extensions": p.media_extensions,
        }
        for p in gpu.mig.profiles
    }
    return {
        "gpus": [
            {
                "index": i,
                "name": gpu.aliases[0] if gpu.aliases else gpu.name,
                "pci": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                "model": gpu.name,
                "mig_enabled": False,
                "instances": [],
            }
            for i in range(count)
        ],
        "profiles": {gpu.name: profiles},
        "slices": {gpu.name: [gpu.mig.compute_slices, gpu.mig.memory_slices]},
        "media_extension_instances": {gpu.name: gpu.mig.media_extension_instances},
    }
