"""The VM planner (gpufleet.host.virt), its libvirt domains (gpufleet.host.virt_xml, checked by the real
virt-xml-validate) and ``gpufleet virt plan`` (in process: the suite's time is short)."""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.host.virt import VirtError, plan
from gpufleet.host.virt_xml import domain_xml
from gpufleet.spec.models import TuningProfile, Virtualization
from tests.conftest import FIXTURES
from tests.unit.conftest import DGX


def test_eight_vms_of_one_gpu_each_are_pinned_to_their_gpus_node(dgx):
    p = plan(dgx, Virtualization(vcpus=24, memory_gib=200, emulator_cpus=2), host="dgx")
    node_cpus = {n["id"]: set(n["cpus"]) for n in dgx["numa_nodes"]}
    gpu_node = {g["pci"]: g["numa_node"] for g in dgx["gpus"]}
    core_of = {c: tuple(core["cpus"]) for core in dgx["cores"] for c in core["cpus"]}
    assert [vm.hostdevs for vm in p.vms] == [(pci,) for pci in sorted(gpu_node)]
    seen: list[int] = []
    for vm in p.vms:
        node = gpu_node[vm.gpu.pci]
        assert vm.gpu.numa_node == vm.numa_node == vm.hugepages.numa_node == node
        assert len(vm.cpus) == 24 and len(vm.emulator_cpus) == 2
        assert set(vm.cpus) | set(vm.emulator_cpus) <= node_cpus[node]
        # whole cores: vCPUs 2k and 2k+1 are one core's two threads, and the guest is told so
        assert all(core_of[a] == (a, b) for a, b in zip(vm.cpus[0::2], vm.cpus[1::2], strict=True))
        assert vm.threads_per_core == 2
        assert (vm.hugepages.size_kib, vm.hugepages.count) == (1048576, 200)
        seen += [*vm.cpus, *vm.emulator_cpus]
    assert len(seen) == len(set(seen)), "a CPU is given twice"
    assert not set(seen) & set(p.reserved_cpus) and p.reserved_cpus == (0, 56, 112, 168)
    for n in dgx["numa_nodes"]:
        pages_kib = sum(vm.hugepages.size_kib * vm.hugepages.count for vm in p.vms if vm.numa_node == n["id"])
        assert pages_kib <= n["memory_kib"] * 0.9
    assert p.to_dict()["vms"][0] == {
        "name": "vm-gpu0",
        "gpu": {"pci": "0000:1b:00.0", "numa_node": 0},
        "cpus": [x for c in range(1, 13) for x in (c, c + 112)],
        "emulator_cpus": [49, 161],  # after the node's vCPUs (4 x 12 cores from core 1): a whole core of its own
        "hugepages": {"numa_node": 0, "size_kib": 1048576, "count": 200},
        "hostdevs": ["0000:1b:00.0"],
    }


def test_an_oversubscribed_request_is_refused_with_the_numbers(dgx):
    with pytest.raises(VirtError) as cpus:
        plan(dgx, Virtualization(vcpus=32, emulator_cpus=2), host="dgx")
    assert cpus.value.reason == (
        "NUMA node 0 has 110 free CPUs (112 less 2 reserved for the system), the 4 VM(s) on it need 136"
        " (4 x (32 vCPUs + 2 emulator CPUs)); lower --vcpus or the VMs per device"
    )
    with pytest.raises(VirtError) as memory:
        plan(dgx, Virtualization(memory_gib=256), host="dgx")
    assert memory.value.reason == (
        "NUMA node 0 can back VMs with 943719 MiB of hugepages (1048576 MiB less 104857 MiB kept as ordinary memory"
        " and 0 MiB of the tuning profile's hugepages), the 4 VM(s) on it need 1048576 MiB (4 x 256 GiB);"
        " lower --memory-gib"
    )
    # the tuning profile's own hugepages are not the VMs' to take: 230 GiB fits, not beside 64 x 1G per GPU
    plan(dgx, Virtualization(memory_gib=230), host="dgx")
    with pytest.raises(VirtError, match="and 262144 MiB of the tuning profile's hugepages"):
        plan(dgx, Virtualization(memory_gib=230), TuningProfile(hugepages_1g_per_gpu=64), host="dgx")


def test_several_vms_per_gpu_need_the_gpus_virtual_functions(dgx):
    with pytest.raises(VirtError, match=r"GPU 0000:1b:00\.0 has 0 SR-IOV VFs, the 2 VMs per GPU need 2"):
        plan(dgx, Virtualization(vms_per_gpu=2), host="dgx")
    # a GPU whose vGPU host driver enabled its VFs (hostfacts lists them under the GPU's sriov_devices entry)
    gpu = dgx["gpus"][0]
    vfs = {**gpu, "sriov_totalvfs": 16, "sriov_numvfs": 2, "interfaces": [], "vfs": ["0000:1b:00.4", "0000:1b:00.5"]}
    p = plan({**dgx, "sriov_devices": [*dgx["sriov_devices"], vfs]}, Virtualization(vms_per_gpu=2, max_vms=2))
    assert [(vm.name, vm.hostdevs, vm.gpu.pci) for vm in p.vms] == [
        ("vm-gpu0-0", ("0000:1b:00.4",), "0000:1b:00.0"),
        ("vm-gpu0-1", ("0000:1b:00.5",), "0000:1b:00.0"),
    ]


def test_vf_vms_on_the_lab_host_share_the_reserved_cpus_for_emulation(lab):
    p = plan(lab, Virtualization(device="vf", vcpus=1, memory_gib=0.5, emulator_cpus=0, max_vms=1), host="lab")
    assert p.to_dict() == {
        "vms": [
            {
                "name": "vm-vf0",
                "gpu": None,
                "cpus": [3],
                "emulator_cpus": [2],  # node 1's reserved CPU, shared with the host's services
                "hugepages": {"numa_node": 1, "size_kib": 2048, "count": 256},
                "hostdevs": ["0000:81:00.1"],  # the NVMe controller's first VF
            }
        ]
    }
    with pytest.raises(VirtError, match=r"NUMA node 1 has 1 free CPUs .* the 4 VM"):
        plan(lab, Virtualization(device="vf", vcpus=1, memory_gib=0.5, emulator_cpus=0), host="lab")


def test_vcpus_take_whole_cores_first_and_split_cores_before_whole_ones(dgx):
    p = plan(dgx, Virtualization(vcpus=3, memory_gib=2.5, emulator_cpus=1, max_vms=2), host="dgx")
    first, second = p.vms  # both on node 0: cores (1,113), (2,114), (3,115)...
    assert first.cpus == (1, 113, 2)  # a whole core, then one thread of the next
    assert second.cpus == (3, 115, 114)  # a whole core, then the split core's other thread before a whole one
    assert first.threads_per_core == 1
    assert (first.hugepages.size_kib, first.hugepages.count) == (2048, 1280)  # 2.5 GiB: 2 MiB pages
    assert Virtualization(memory_gib=16, hugepage_size="2M").page_kib == 2048


def _domains(dgx, lab) -> dict[str, str]:
    small = plan(dgx, Virtualization(vcpus=4, memory_gib=16), host="dgx").vms[0]
    huge = dataclasses.replace(small, name="wide", cpus=tuple(range(1, 301)), threads_per_core=1)
    vf = plan(lab, Virtualization(device="vf", vcpus=1, memory_gib=0.5, emulator_cpus=0, max_vms=1)).vms[0]
    return {"gpu": domain_xml(small), "wide": domain_xml(huge), "vf": domain_xml(vf)}


def test_domain_xml_pins_binds_and_passes_through(dgx, lab):
    docs = _domains(dgx, lab)
    dom = ET.fromstring(docs["gpu"])
    assert [(p.get("vcpu"), p.get("cpuset")) for p in dom.iter("vcpupin")] == [
        ("0", "1"),
        ("1", "113"),
        ("2", "2"),
        ("3", "114"),
    ]
    assert dom.find("cputune/emulatorpin").get("cpuset") == "9"
    assert dom.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "0"}
    assert dom.find("memoryBacking/hugepages/page").attrib == {"size": "1048576", "unit": "KiB"}
    assert dom.find("memory").text == str(16 * 1024 * 1024)
    assert dom.find("os/type").get("machine") == "q35"
    assert dom.find("cpu/topology").get("threads") == "2"
    hostdev = dom.find("devices/hostdev")
    assert hostdev.attrib == {"mode": "subsystem", "type": "pci", "managed": "yes"}
    assert hostdev.find("source/address").attrib == {
        "domain": "0x0000",
        "bus": "0x1b",
        "slot": "0x00",
        "function": "0x0",
    }
    assert dom.find("devices/iommu") is None
    wide = ET.fromstring(docs["wide"])  # beyond 255 vCPUs: x2APIC needs interrupt remapping, a virtual IOMMU
    assert wide.find("devices/iommu").get("model") == "intel" and wide.find("features/ioapic").get("driver") == "qemu"
    vf = ET.fromstring(docs["vf"]).find("devices/hostdev/source/address")
    assert (vf.get("bus"), vf.get("function")) == ("0x81", "0x1")


def test_every_generated_domain_passes_virt_xml_validate(dgx, lab, tmp_path: Path):
    validate = shutil.which("virt-xml-validate")
    assert validate and shutil.which("xmllint"), "needs virt-xml-validate (libvirt-clients) and xmllint (libxml2-utils)"
    docs = _domains(dgx, lab)
    # a domain the schema refuses, so a validator that passes everything fails this test
    docs["broken"] = docs["gpu"].replace('mode="strict"', 'mode="everywhere"')
    for name, text in docs.items():
        (tmp_path / f"{name}.xml").write_text(text)
    files = [str(tmp_path / f"{name}.xml") for name in docs]
    script = 'for f; do if "$0" "$f" domain >/dev/null 2>&1; then echo "valid $f"; else echo "invalid $f"; fi; done'
    proc = subprocess.run(
        ["sh", "-c", script, validate, *files],
        capture_output=True,
        text=True,
        check=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    verdict = {Path(line.split()[1]).stem: line.split()[0] for line in proc.stdout.splitlines()}
    assert verdict == {"gpu": "valid", "wide": "valid", "vf": "valid", "broken": "invalid"}


def _cli(*args: str):
    return CliRunner().invoke(app, ["virt", "plan", *args])


def test_cli_json_contract_and_xml_files(tmp_path: Path):
    result = _cli("--host-root", str(DGX), "--vcpus", "8", "--memory-gib", "64", "--json", "--xml-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == ["vms"] and len(data["vms"]) == 8
    assert list(data["vms"][0]) == ["name", "gpu", "cpus", "emulator_cpus", "hugepages", "hostdevs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"vm-gpu{i}.xml" for i in range(8)]
    human = _cli("--host-root", str(DGX), "--vcpus", "8", "--memory-gib", "64")
    assert "vm-gpu4 │ 0000:9d:00.0 │ 1" in human.stdout
    assert "NUMA node 1: VMs take 36 of 110 free CPUs and 262144 of 943719 MiB of hugepage memory" in human.stdout


def test_cli_refusals_are_one_line_exit_1_and_usage_errors_exit_2():
    over = _cli("--host-root", str(DGX), "--vcpus", "40")
    assert over.exit_code == 1
    assert over.stderr.strip().splitlines() == [
        "error: host dgx-h100: NUMA node 0 has 110 free CPUs (112 less 2 reserved for the system), the 4 VM(s) on it"
        " need 164 (4 x (40 vCPUs + 1 emulator CPUs)); lower --vcpus or the VMs per device"
    ]
    assert over.stdout == ""
    assert _cli("--vcpus", "4").exit_code == 2  # no --host-root
    bad = _cli("--host-root", str(DGX), "--vcpus", "0")
    assert bad.exit_code == 2 and "--vcpus" in bad.stderr
    assert _cli("--host-root", str(DGX), "--memory-gib", "1.001").exit_code == 2


def test_cli_takes_the_request_from_a_stacks_host_group(tmp_path: Path):
    stack = (
        (FIXTURES / "invalid" / "virtualization_memory_not_hugepages.yaml").read_text().split("  gpufleet:baremetal")[0]
    )
    stack += (
        "  gpufleet:baremetal:\n    inventory: inventories/x\n    host_groups:\n"
        "      - {name: plain, gpu_model: H100-SXM5-80GB}\n"
        "      - name: vms\n        gpu_model: H100-SXM5-80GB\n        tuning_profile: vm\n"
        "        virtualization: {vcpus: 6, memory_gib: 48, emulator_cpus: 2}\n"
        "  gpufleet:tuning_profiles:\n    vm: {reserved_cores: 4}\n"
    )
    (tmp_path / "Pulumi.yaml").write_text("name: x\nruntime: python\n")
    (tmp_path / "Pulumi.prod-onprem.yaml").write_text(stack)
    result = _cli("prod-onprem", "--root", str(tmp_path), "--host-root", str(DGX), "--json")
    assert result.exit_code == 0, result.output
    vm = json.loads(result.stdout)["vms"][0]
    assert len(vm["cpus"]) == 6 and len(vm["emulator_cpus"]) == 2 and vm["hugepages"]["count"] == 48
    assert vm["cpus"][0] == 2  # reserved_cores 4: two on each node, so node 0's first free core is the third
