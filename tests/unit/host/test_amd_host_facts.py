"""AMD Instinct GPUs in a host's facts and its NUMA plan: the partition files and the render node each GPU's PCI
directory holds (gpufleet.host.hostfacts), and CPUs, NICs and device nodes planned for AMD GPUs as for NVIDIA ones
(gpufleet.host.topology). The host is ``tests/fixtures/hosts/mi300x-epyc``, a TEST DOUBLE: a tree in the shape of an
8 x MI300X platform written by generate.py, not recorded from a real host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.host.hostfacts import FactsError, amd_gpu_partitions, read_host, read_partition
from gpufleet.host.topology import plan
from gpufleet.spec.models import TuningProfile
from tests.conftest import FIXTURES, REPO

MI300X = FIXTURES / "hosts" / "mi300x-epyc"
CATALOG = load_catalog().gpus_by_pci_id
GPUS = ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0",
        "0000:85:00.0", "0000:a6:00.0", "0000:c6:00.0", "0000:e5:00.0"]  # fmt: skip
NICS = ["0000:06:00.0", "0000:27:00.0", "0000:47:00.0", "0000:66:00.0",
        "0000:86:00.0", "0000:a7:00.0", "0000:c7:00.0", "0000:e6:00.0"]  # fmt: skip
SPX_NPS1 = {
    "compute": "SPX",
    "memory": "NPS1",
    "available_compute": ["SPX", "DPX", "QPX", "CPX"],
    "available_memory": ["NPS1", "NPS4"],
}


def copy(tmp_path: Path) -> Path:
    host = tmp_path / "mi300x"
    shutil.copytree(MI300X, host)
    return host


def device_dir(host: Path, pci: str) -> Path:
    return host / "sys/bus/pci/devices" / pci


# -- facts -------------------------------------------------------------------------------------------------------


def test_the_mi300x_host_facts_name_each_gpu_with_its_partitions_and_render_node():
    facts = read_host(str(MI300X), CATALOG)
    gpus = facts["gpus"]
    assert [g["pci"] for g in gpus] == GPUS
    assert {(g["vendor"], g["device"], g["class"], g["model"], g["mig_capable"]) for g in gpus} == {
        ("1002", "74a1", "1200", "MI300X", False)
    }
    assert [g["numa_node"] for g in gpus] == [0] * 4 + [1] * 4
    assert all(g["partition"] == SPX_NPS1 for g in gpus)
    # eight render nodes per MI300X: each GPU's own is the first of its eight
    assert [g["render_node"] for g in gpus] == [f"renderD{128 + 8 * i}" for i in range(8)]
    assert sum(n["kind"] == "infiniband" for n in facts["nics"]) == 8


def test_nvidia_gpus_have_no_partition_and_their_facts_keep_their_shape():
    facts = read_host(str(FIXTURES / "hosts" / "dgx-h100"), CATALOG)
    assert {(g["partition"], g["render_node"]) for g in facts["gpus"]} == {(None, None)}


def test_partition_files_absent_read_none(tmp_path: Path):
    host = copy(tmp_path)
    d = device_dir(host, GPUS[0])
    for name in ("current_compute_partition", "available_compute_partition", "current_memory_partition",
                 "available_memory_partition"):  # fmt: skip
        (d / name).unlink()
    assert read_partition(str(d)) is None
    assert read_host(str(host), CATALOG)["gpus"][0]["partition"] is None


def test_one_nps_mode_has_no_available_memory_file_and_reads_as_the_current_one(tmp_path: Path):
    """The kernel writes available_memory_partition only when the GPU supports more than one NPS mode."""
    d = device_dir(copy(tmp_path), GPUS[0])
    (d / "available_memory_partition").unlink()
    (d / "current_compute_partition").write_text("CPX\n")
    assert read_partition(str(d)) == SPX_NPS1 | {"compute": "CPX", "available_memory": ["NPS1"]}


def test_a_kernel_without_memory_partition_files_reads_compute_alone(tmp_path: Path):
    d = device_dir(copy(tmp_path), GPUS[0])
    (d / "available_memory_partition").unlink()
    (d / "current_memory_partition").unlink()
    assert read_partition(str(d)) == {
        "compute": "SPX",
        "memory": None,
        "available_compute": ["SPX", "DPX", "QPX", "CPX"],
        "available_memory": [],
    }


@pytest.mark.parametrize(
    ("name", "text", "reason"),
    [
        ("current_compute_partition", "SPX;rm\n", "holds 'SPX;RM', not a partition mode like SPX or NPS1"),
        ("available_memory_partition", "NPS1, N PS4\n", "holds 'N PS4', not a partition mode like SPX or NPS1"),
        ("current_memory_partition", "NPS1, NPS4\n", "names 2 modes, not one"),
    ],
)
def test_garbage_in_a_partition_file_is_refused_naming_it(tmp_path: Path, name: str, text: str, reason: str):
    host = copy(tmp_path)
    (device_dir(host, GPUS[2]) / name).write_text(text)
    with pytest.raises(FactsError) as refused:
        read_host(str(host), CATALOG)
    assert (refused.value.path, refused.value.reason) == (str(device_dir(host, GPUS[2]) / name), reason)


def test_a_fifo_partition_file_or_a_drm_file_is_refused_without_blocking(tmp_path: Path):
    host = copy(tmp_path)
    fifo = device_dir(host, GPUS[3]) / "available_compute_partition"
    fifo.unlink()
    os.mkfifo(fifo)
    with pytest.raises(FactsError, match="is a named pipe \\(FIFO\\), not a regular file"):
        read_host(str(host), CATALOG)
    fifo.unlink()
    fifo.write_text("SPX, DPX, QPX, CPX\n")
    drm = device_dir(host, GPUS[3]) / "drm"
    shutil.rmtree(drm)
    drm.write_text("not a directory\n")
    with pytest.raises(FactsError, match="cannot be listed"):
        read_host(str(host), CATALOG)


def test_amd_gpu_partitions_reads_below_a_sysfs_root_in_pci_order_without_vfs_or_other_devices(tmp_path: Path):
    host = copy(tmp_path)
    vf = device_dir(host, "0000:05:02.0")  # an SR-IOV VF of the first GPU: the kernel refuses partitions there
    shutil.copytree(device_dir(host, GPUS[0]), vf)
    (vf / "physfn").write_text(GPUS[0] + "\n")
    (vf / "device").write_text("0x74b5\n")
    found = amd_gpu_partitions(str(host / "sys"))
    assert [g["pci"] for g in found] == GPUS
    assert all(g == {"pci": g["pci"], "device": "74a1", "partition": SPX_NPS1} for g in found)
    assert amd_gpu_partitions(str(FIXTURES / "hosts/dgx-h100/sys")) == []
    assert amd_gpu_partitions(str(tmp_path / "nowhere")) == []


# -- the plan ----------------------------------------------------------------------------------------------------


def as_nvidia(host: Path) -> None:
    """The same tree with H100s (10de:2330, class 0x0302) where the MI300Xs are, and no AMD files."""
    for pci in GPUS:
        d = device_dir(host, pci)
        (d / "vendor").write_text("0x10de\n")
        (d / "device").write_text("0x2330\n")
        (d / "class").write_text("0x030200\n")
        for f in d.glob("*_partition"):
            f.unlink()
        shutil.rmtree(d / "drm")


@pytest.mark.parametrize(
    "profile",
    [
        TuningProfile(),
        TuningProfile(cores_per_gpu=12, hugepages_1g_per_gpu=16, vfs_per_nic=8, isolation=True),
        TuningProfile(cores_per_gpu={"min": 4, "max": 40}, reserved_cores=6),
    ],
)
def test_amd_gpus_get_the_cpus_nics_and_hugepages_nvidia_gpus_get_in_their_place(tmp_path: Path, profile):
    """The planner treats an MI300X as it treats an H100 at the same PCI address and NUMA node: only the model and
    the device node differ."""
    amd = plan(read_host(str(MI300X), CATALOG), profile, "mi300x")
    host = copy(tmp_path)
    as_nvidia(host)
    nvidia = plan(read_host(str(host), CATALOG), profile, "mi300x")

    def placed(p):
        return [(g.index, g.pci, g.numa_node, g.cpus, g.nics, g.hugepages_1g) for g in p.gpus]

    assert placed(amd) == placed(nvidia)
    assert amd.numa_nodes == nvidia.numa_nodes and amd.hugepages == nvidia.hugepages
    assert amd.kubelet == nvidia.kubelet and amd.isolated_cpus == nvidia.isolated_cpus
    assert [len(g.cpus) for g in amd.gpus] == [2 * min(profile.cores_per_gpu.max, (96 - 1) // 4)] * 8
    assert [g.device for g in nvidia.gpus] == [f"/dev/nvidia{i}" for i in range(8)]
    assert [g.device for g in amd.gpus] == [f"/dev/dri/renderD{128 + 8 * i}" for i in range(8)]
    assert [g.model for g in amd.gpus] == ["MI300X"] * 8


def test_gres_conf_names_each_mi300xs_own_render_node_not_the_next_number():
    """An MI300X has eight render nodes (one per possible partition): the second GPU's is renderD136, not 129."""
    p = plan(read_host(str(MI300X), CATALOG), TuningProfile(), "mi300x")
    assert p.gres_conf[:2] == [
        "Name=gpu Type=mi300x File=/dev/dri/renderD128 Cores=0-95",
        "Name=gpu Type=mi300x File=/dev/dri/renderD136 Cores=0-95",
    ]
    assert p.gres_conf[7] == "Name=gpu Type=mi300x File=/dev/dri/renderD184 Cores=96-191"
    assert p.notes == []


def test_an_amd_gpu_without_a_render_node_yet_gets_no_device_file_and_a_note(tmp_path: Path):
    """Before amdgpu-dkms is installed (the play plans first), the GPU has no render node: nothing is guessed."""
    host = copy(tmp_path)
    shutil.rmtree(device_dir(host, GPUS[1]) / "drm")
    p = plan(read_host(str(host), CATALOG), TuningProfile(), "mi300x")
    assert p.gpus[1].device is None and p.gpus[1].cpus  # still pinned
    assert p.gres_conf[1] == "Name=gpu Type=mi300x Count=1 Cores=0-95"
    assert p.notes == [
        f"GPU {GPUS[1]} has no DRM render node yet (no driver bound): its gres.conf line names no device file;"
        " plan again once its driver is loaded"
    ]


def test_nvidia_device_numbers_count_nvidia_gpus_only_on_a_mixed_host(tmp_path: Path):
    host = copy(tmp_path)
    for pci in GPUS[4:]:  # the second socket's GPUs become H100s
        d = device_dir(host, pci)
        (d / "vendor").write_text("0x10de\n")
        (d / "device").write_text("0x2330\n")
        (d / "class").write_text("0x030200\n")
    p = plan(read_host(str(host), CATALOG), TuningProfile(), "mixed")
    assert [g.index for g in p.gpus] == list(range(8))
    assert [g.device for g in p.gpus] == [
        *(f"/dev/dri/renderD{128 + 8 * i}" for i in range(4)),
        *(f"/dev/nvidia{i}" for i in range(4)),
    ]


def test_hosts_with_amd_gpus_get_amds_iommu_pass_through_in_their_own_group():
    facts = read_host(str(MI300X), CATALOG)
    p = plan(facts, TuningProfile(), "mi300x")
    assert p.kernel_arg_groups == {"hugepages": [], "iommu": [], "isolation": [], "amdgpu": ["iommu=pt"]}
    assert p.kernel_args == ["iommu=pt"]
    # the firmware's table names the IOMMU: VT-d needs intel_iommu=on (gpufleet.host.topology.iommu_args)
    intel = plan(facts | {"iommu": "intel"}, TuningProfile(), "mi300x")
    assert intel.kernel_arg_groups["amdgpu"] == ["intel_iommu=on", "iommu=pt"]
    # with SR-IOV the iommu group has the same arguments: each appears once on the command line
    both = plan(facts | {"iommu": "intel"}, TuningProfile(vfs_per_nic=8), "mi300x")
    assert both.kernel_arg_groups["iommu"] == both.kernel_arg_groups["amdgpu"] == ["intel_iommu=on", "iommu=pt"]
    assert both.kernel_args == ["intel_iommu=on", "iommu=pt"]
    # hosts without AMD GPUs: no amdgpu arguments
    nvidia = plan(read_host(str(FIXTURES / "hosts/dgx-h100"), CATALOG), TuningProfile(), "dgx")
    assert nvidia.kernel_arg_groups["amdgpu"] == [] and nvidia.kernel_args == []


def test_topology_plan_json_of_the_mi300x_host():
    proc = subprocess.run(
        [sys.executable, "-m", "gpufleet", "topology", "plan", "--host-root", str(MI300X), "--json"],
        cwd=REPO, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [(g["pci"], g["model"], g["numa_node"], g["device"]) for g in data["gpus"]] == [
        (pci, "MI300X", i // 4, f"/dev/dri/renderD{128 + 8 * i}") for i, pci in enumerate(GPUS)
    ]
    assert [len(g["cpus"]) for g in data["gpus"]] == [32] * 8  # 16 whole cores each (cores_per_gpu max 16), SMT
    assert [g["nics"] for g in data["gpus"]] == [[n] for n in NICS]  # the InfiniBand adapter beside each
    assert data["kernel_arg_groups"]["amdgpu"] == ["iommu=pt"]
    assert data["gres_conf"][1] == "Name=gpu Type=mi300x File=/dev/dri/renderD136 Cores=0-95"
