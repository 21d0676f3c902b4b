"""The AMD judgements of ansible/plugins/filter/gpufleet_verify.py (what the amd_driver and amd_partition roles'
verify tasks, and so verify.yml's amdgpu and partitions columns, conclude): AMD's release numbers in its package
versions, the installed stack against its pins, amd-smi's partition view against the plan."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("gpufleet_verify", REPO / "ansible/plugins/filter/gpufleet_verify.py")
verify = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verify)

PINS = {
    "amdgpu_version": "30.10.1",
    "rocm_version": "7.0.1",
    "driver_packages": ["amdgpu-dkms"],
    "rocm_packages": ["amd-smi-lib", "rocminfo"],
}
AMD = {
    "amdgpu-dkms": "1:6.14.14.30100100-2212064.22.04",
    "amd-smi-lib": "26.0.1.70001-42~22.04",
    "rocminfo": "1.0.0.70001-42~22.04",
}


@pytest.mark.parametrize(
    ("version", "kind", "field"),
    [
        ("30.10.1", "amdgpu", "30100100"),  # AMD's Instinct driver scheme: 30.10.2 -> 30100200
        ("30.10.2", "amdgpu", "30100200"),
        ("30.20", "amdgpu", "30200000"),
        ("6.4.1", "amdgpu", "60401"),  # driver releases numbered like ROCm's (before 30.10)
        ("7.0.1", "rocm", "70001"),
        ("6.4", "rocm", "60400"),
    ],
)
def test_amds_release_field(version: str, kind: str, field: str):
    assert verify.amd_release_field(version, kind) == field


def test_candidates_of_the_pinned_releases_pass_and_debians_or_none_are_named():
    assert verify.gpufleet_amd_release_mismatches(AMD, PINS) == []
    assert verify.gpufleet_amd_release_mismatches(AMD | {"rocminfo": "5.2.3-2", "amdgpu-dkms": "(none)"}, PINS) == [
        "amdgpu-dkms has no candidate",
        "rocminfo 5.2.3-2 is not ROCm 7.0.1's (AMD's versions of it carry .70001-)",
    ]
    # another release's packages (ROCm 6.4.1) are not 7.0.1's
    assert verify.gpufleet_amd_release_mismatches(AMD | {"amd-smi-lib": "25.4.2.60401-120~22.04"}, PINS) == [
        "amd-smi-lib 25.4.2.60401-120~22.04 is not ROCm 7.0.1's (AMD's versions of it carry .70001-)"
    ]


def state(**changes) -> dict:
    return {"packages": dict(AMD), "module": "6.14.14", "loaded": True, "loaded_version": "6.14.14"} | changes


@pytest.mark.parametrize(
    ("changes", "must_be_loaded", "problems"),
    [
        ({}, True, []),
        ({"module": "", "loaded": False, "loaded_version": ""}, False, []),  # no AMD GPU: packages only
        ({"packages": {k: v for k, v in AMD.items() if k != "amd-smi-lib"}}, True, ["amd-smi-lib is not installed"]),
        (
            {"packages": AMD | {"rocminfo": "5.2.3-2"}},
            False,
            [
                "rocminfo 5.2.3-2 is not ROCm 7.0.1's (AMD's versions of it carry .70001-): is AMD's repository pinned"
                " above the distribution's packages?"
            ],
        ),
        ({"module": ""}, True, ["no amdgpu module of amdgpu-dkms for 6.1.0-28-amd64 (dkms status says why)"]),
        ({"loaded": False, "loaded_version": ""}, True, ["amdgpu 6.14.14 is installed but not loaded"]),
        (
            {"loaded_version": ""},
            True,
            ["the kernel's own amdgpu is loaded, not amdgpu-dkms's 6.14.14: reboot into it"],
        ),
        ({"loaded_version": "6.12.12"}, True, ["amdgpu 6.12.12 is loaded, not amdgpu-dkms's 6.14.14: reboot into it"]),
    ],
)
def test_the_installed_driver_stack_against_its_pins(changes: dict, must_be_loaded: bool, problems: list[str]):
    options = PINS | {"must_be_loaded": must_be_loaded, "kernel": "6.1.0-28-amd64"}
    assert verify.gpufleet_amdgpu_problems(state(**changes), options) == problems


def gpus(compute: list[str], memory: str, want_compute: list[str | None], want_memory: str | None) -> list[dict]:
    """The amd_gpu_partition module's gpus: sysfs's modes and the plan's (None: skipped)."""
    return [
        {"index": i, "pci": f"0000:{0x05 + 0x20 * i:02x}:00.0", "compute": c, "memory": memory,
         "want_compute": w, "want_memory": want_memory if w else None, "skipped": w is None}
        for i, (c, w) in enumerate(zip(compute, want_compute, strict=True))
    ]  # fmt: skip


def smi(entries: list[tuple[str, str, int]]) -> str:
    """``amd-smi static --partition`` of (compute, memory, partition id) entries."""
    return "\n".join(
        f"GPU: {i}\n    PARTITION:\n        COMPUTE_PARTITION: {c}\n        MEMORY_PARTITION: {m}\n"
        f"        PARTITION_ID: {p}\n"
        for i, (c, m, p) in enumerate(entries)
    )


def test_amd_smis_primary_partitions_are_matched_to_the_gpus_in_order():
    planned = gpus(["QPX", "CPX"], "NPS4", ["QPX", "CPX"], "NPS4")
    view = smi([("QPX", "NPS4", p) for p in range(4)] + [("CPX", "NPS4", p) for p in range(8)])
    assert verify.gpufleet_amd_partition_problems(planned, view) == []
    # sysfs's view alone (no amd-smi) says the same
    assert verify.gpufleet_amd_partition_problems(planned) == []


def test_what_amd_smi_reports_wins_over_sysfs_and_each_mismatch_names_its_gpus():
    planned = gpus(["CPX"] * 4, "NPS4", ["CPX"] * 4, "NPS4")  # sysfs says as planned
    view = smi([("CPX", "NPS4", p) for p in range(8)] * 2 + [("SPX", "NPS4", 0), ("SPX", "NPS4", 0)])
    assert verify.gpufleet_amd_partition_problems(planned, view) == [
        "GPUs 2-3: compute partition SPX, planned CPX (amd-smi)"
    ]
    assert verify.gpufleet_amd_partition_problems(planned, smi([("CPX", "NPS4", 0)])) == [
        "amd-smi lists 1 GPU(s) (primary partitions), sysfs 4 AMD GPU(s)"
    ]


def test_a_memory_partition_waiting_for_a_reload_says_the_reload_was_not_allowed():
    planned = gpus(["SPX"] * 3, "NPS1", ["CPX", "CPX", None], "NPS4")  # GPU 2 skipped
    assert verify.gpufleet_amd_partition_problems(planned, None, False) == [
        "GPUs 0-1: memory partition NPS1, planned NPS4 (sysfs): it takes a driver reload (modprobe -r amdgpu &&"
        " modprobe amdgpu), which amd_partition_reload_ok does not allow",
        "GPUs 0-1: compute partition SPX, planned CPX (sysfs): left for after that reload",
    ]
    # allowed but not (yet) applied: the mismatch alone
    assert verify.gpufleet_amd_partition_problems(planned, None, True) == [
        "GPUs 0-1: memory partition NPS1, planned NPS4 (sysfs)",
        "GPUs 0-1: compute partition SPX, planned CPX (sysfs)",
    ]
    one = gpus(["SPX", "DPX"], "NPS1", ["SPX", "CPX"], "NPS1")
    assert verify.gpufleet_amd_partition_problems(one) == [
        "GPU 1 (0000:25:00.0): compute partition DPX, planned CPX (sysfs)"
    ]
