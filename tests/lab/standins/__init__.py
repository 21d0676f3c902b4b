"""Test doubles installed inside lab VMs and containers (never on real hosts); see fake_nvidia.py, fake_amd.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpufleet.catalog import Catalog
from gpufleet.mig.outputs import NamedLayout, mig_parted_config
from gpufleet.spec.models import MigLayout

FAKE_NVIDIA = Path(__file__).with_name("fake_nvidia.py")
FAKE_AMD = Path(__file__).with_name("fake_amd.py")  # the amdgpu driver's partition files and amd-smi (a TEST DOUBLE)


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
                "name": gpu.product_names[0] if gpu.product_names else gpu.name,
                "pci": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                "model": gpu.name,
                "device_id": gpu.mig_device_filters[0],  # what mig-parted's device-filter matches
                "mig_enabled": False,
                "instances": [],
            }
            for i in range(count)
        ],
        "profiles": {gpu.name: profiles},
        "slices": {gpu.name: [gpu.mig.compute_slices, gpu.mig.memory_slices]},
        "media_extension_instances": {gpu.name: gpu.mig.media_extension_instances},
    }


LAB_GPU = "H100-SXM5-80GB"
LAB_LAYOUTS = {
    # GPU 0 mixed, GPU 1 two halves (what the mig role's scenario applies)
    "h100-balanced": [{"gpus": [0], "profiles": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
                      {"gpus": [1], "profiles": {"3g.40gb": 2}}],
    # every GPU as seven 1g slices (the layout the rollback test fails to apply)
    "h100-7x1g": [{"gpus": "all", "profiles": {"1g.10gb": 7}}],
}  # fmt: skip


def lab_mig_config(catalog: Catalog) -> dict[str, Any]:
    """The mig-parted config the lab's ``mig`` scenario uses, written by gpufleet's own MIG outputs."""
    gpu = catalog.gpu(LAB_GPU)
    return mig_parted_config(
        NamedLayout(name, gpu, MigLayout(config_name=name, devices=devices)) for name, devices in LAB_LAYOUTS.items()
    )
