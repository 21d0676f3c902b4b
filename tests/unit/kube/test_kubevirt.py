"""gpufleet.kube.kubevirt: a host's VM plan as KubeVirt VirtualMachines and the KubeVirt CR settings they need, checked
against KubeVirt v1.6.6's CRD schemas (vendored in tests/fixtures/crds/kubevirt), the sandbox device plugin's
resource names, and ``gpufleet virt plan --kubevirt-dir``."""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.catalog import Gpu
from gpufleet.cli import app
from gpufleet.host.hostfacts import format_cpulist
from gpufleet.host.topology import plan as topology_plan
from gpufleet.host.virt import plan
from gpufleet.kube.kubevirt import KubeVirtError, manifests, sandbox_resource
from gpufleet.spec.models import TuningProfile, Virtualization
from tests.charts import crd_errors, crd_validator
from tests.conftest import FIXTURES
from tests.unit.conftest import DGX

CRDS = FIXTURES / "crds" / "kubevirt"
H100_RESOURCE = "nvidia.com/GH100_H100_SXM5_80GB"  # the GPU Operator's sandbox device plugin's name for 10de:2330


@functools.cache
def _validator(kind: str) -> Any:
    name = {"VirtualMachine": "virtualmachines", "KubeVirt": "kubevirts"}[kind]
    text = (CRDS / f"{name}.kubevirt.io.openapiv3.yaml").read_text()
    return crd_validator(yaml.load(text, Loader=yaml.CSafeLoader)["openAPIV3Schema"])


def schema_errors(obj: dict[str, Any]) -> list[str]:
    assert obj["apiVersion"] == "kubevirt.io/v1"  # the CRDs serve v1 (and v1alpha3) with this one schema
    return crd_errors(_validator(obj["kind"]), obj)


def _domain(vm: dict[str, Any]) -> dict[str, Any]:
    return vm["spec"]["template"]["spec"]["domain"]


def test_eight_gpu_vms_pass_the_crd_schema_with_dedicated_cpus_hugepages_and_their_gpu(dgx, catalog):
    request = Virtualization(vcpus=16, memory_gib=128, emulator_cpus=2)
    p = plan(dgx, request, host="dgx-h100")
    kv = manifests(p, request, catalog)
    assert [vm["metadata"]["name"] for vm in kv.virtual_machines] == [f"vm-gpu{i}" for i in range(8)]
    permitted = kv.kubevirt["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]
    assert permitted == [
        {"pciVendorSelector": "10DE:2330", "resourceName": H100_RESOURCE, "externalResourceProvider": True}
    ]
    assert schema_errors(kv.kubevirt) == []
    for vm, planned in zip(kv.virtual_machines, p.vms, strict=True):
        assert schema_errors(vm) == [], vm["metadata"]["name"]
        domain = _domain(vm)
        cpu = domain["cpu"]
        assert cpu["dedicatedCpuPlacement"] is True and cpu["isolateEmulatorThread"] is True
        assert cpu["numa"] == {"guestMappingPassthrough": {}}
        assert (cpu["sockets"], cpu["cores"], cpu["threads"]) == (1, 8, 2) and planned.threads_per_core == 2
        # the kubelet gives the pod what the plan takes of the GPU's node: 16 vCPUs and, even parity, 2 emulator CPUs
        assert cpu["cores"] * cpu["threads"] + 2 == len(planned.cpus) + len(planned.emulator_cpus)
        assert (planned.hugepages.size_kib, domain["memory"]["hugepages"]["pageSize"]) == (1048576, "1Gi")
        assert domain["resources"]["requests"] == {"memory": "128Gi"}
        assert domain["devices"]["gpus"] == [{"name": "gpu0", "deviceName": H100_RESOURCE}]
        assert "hostDevices" not in domain["devices"] and domain["devices"]["autoattachMemBalloon"] is False
        assert vm["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "dgx-h100"}
        assert vm["spec"]["runStrategy"] == "Halted"
    configuration = kv.kubevirt["spec"]["configuration"]
    assert configuration["developerConfiguration"]["featureGates"] == ["CPUManager", "AlignCPUs"]
    assert kv.kubevirt["metadata"]["annotations"] == {"alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity": ""}
    assert kv.notes == ()


def test_the_gpus_node_comes_from_the_kubelet_gpufleet_configures(dgx, catalog):
    """KubeVirt cannot name a NUMA node: the VM gets its GPU's node because the kubelet's topology manager takes the
    CPUs, the device and the hugepages from one node, and the CPUs outside the system's reserved ones."""
    request = Virtualization(vcpus=16, memory_gib=128)
    p = plan(dgx, request, host="dgx-h100")
    kubelet = topology_plan(dgx, TuningProfile(), "dgx-h100").kubelet
    assert kubelet["cpuManagerPolicy"] == "static" and kubelet["memoryManagerPolicy"] == "Static"
    assert kubelet["topologyManagerPolicy"] == "single-numa-node"
    assert kubelet["reservedSystemCPUs"] == format_cpulist(p.reserved_cpus)
    vm = manifests(p, request, catalog).virtual_machines[4]
    assert p.vms[4].numa_node == 1 and _domain(vm)["devices"]["gpus"][0]["deviceName"] == H100_RESOURCE
    assert _domain(vm)["cpu"]["dedicatedCpuPlacement"] and _domain(vm)["memory"]["hugepages"]


def test_the_schema_check_refuses_what_the_api_server_would(dgx, catalog):
    request = Virtualization(vcpus=8, memory_gib=64)
    kv = manifests(plan(dgx, request, host="dgx-h100"), request, catalog)
    typo = copy.deepcopy(kv.virtual_machines[0])
    _domain(typo)["cpu"]["dedicatedCpuPlacment"] = True
    assert any("dedicatedCpuPlacment" in e for e in schema_errors(typo))
    unnamed = copy.deepcopy(kv.virtual_machines[0])
    del _domain(unnamed)["devices"]["gpus"][0]["name"]
    assert any("'name' is a required property" in e for e in schema_errors(unnamed))
    cr = copy.deepcopy(kv.kubevirt)
    del cr["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"][0]["resourceName"]
    assert any("resourceName" in e for e in schema_errors(cr))


def test_sandbox_resource_names_follow_the_device_plugins_rule(catalog):
    # kubevirt-gpu-device-plugin v1.6.0 getDeviceName's own test cases, and the GPU Operator's KubeVirt page (A10)
    assert sandbox_resource("10de:118a", "GK104GL [GRID K520]") == "nvidia.com/GK104GL_GRID_K520"
    assert sandbox_resource("10de:118e", "gk104.gl [grid/k./520]") == "nvidia.com/GK104_GL_GRID_K__520"
    assert sandbox_resource("10de:2331", "GH100 [H100 PCIe]") == "nvidia.com/GH100_H100_PCIE"
    assert sandbox_resource("10de:2236", "GA102GL [A10]") == "nvidia.com/GA102GL_A10"
    assert sandbox_resource("10de:31C2", None) == "nvidia.com/31c2"  # not in its pci.ids: the device id
    gh200 = catalog.gpu("GH200-96GB")
    assert sandbox_resource("10de:2342", gh200.pci_name_of["10de:2342"]) == "nvidia.com/GH100_GH200_120GB___480GB"
    for gpu in catalog.gpus:  # every NVIDIA GPU of the catalog can be a KubeVirt VM's
        if gpu.vendor == "nvidia":
            assert set(gpu.pci_name_of) == set(gpu.pci_ids), gpu.name
    h100 = catalog.gpu("H100-SXM5-80GB")
    with pytest.raises(ValueError, match="H100-SXM5-80GB: pci_names names 10de:2331, not one of its pci_ids"):
        Gpu.model_validate({**h100.model_dump(), "pci_names": {"10de:2331": "GH100 [H100 PCIe]"}})


def test_lab_vf_vms_use_kubevirts_own_device_plugin(lab, catalog):
    assert lab["sriov_devices"][0]["vf_device"] == "0010"  # the VFs' own sysfs device id
    request = Virtualization(device="vf", vcpus=1, memory_gib=0.5, emulator_cpus=0, max_vms=1)
    kv = manifests(plan(lab, request, host="lab-vm"), request, catalog)
    (vm,) = kv.virtual_machines
    assert schema_errors(vm) == [] and schema_errors(kv.kubevirt) == []
    devices = _domain(vm)["devices"]
    assert devices["hostDevices"] == [{"name": "hostdev0", "deviceName": "gpufleet.io/pci-1b36-0010"}]
    assert "gpus" not in devices
    configuration = kv.kubevirt["spec"]["configuration"]
    assert configuration["permittedHostDevices"]["pciHostDevices"] == [
        {
            "pciVendorSelector": "1B36:0010",
            "resourceName": "gpufleet.io/pci-1b36-0010",
            "externalResourceProvider": False,
        }
    ]
    assert configuration["developerConfiguration"]["featureGates"] == ["CPUManager", "HostDevices"]
    assert "annotations" not in kv.kubevirt["metadata"]
    cpu = _domain(vm)["cpu"]
    assert "isolateEmulatorThread" not in cpu and (cpu["cores"], cpu["threads"]) == (1, 1)
    assert _domain(vm)["memory"]["hugepages"]["pageSize"] == "2Mi"
    assert _domain(vm)["resources"]["requests"]["memory"] == "512Mi"
    assert kv.notes == (
        "emulator_cpus 0: QEMU's emulator threads cannot run on the system's reserved CPUs; they share each VM's"
        " dedicated vCPUs",
    )


def test_emulator_cpus_kubevirt_cannot_give_are_said(dgx, catalog):
    odd = Virtualization(vcpus=15, memory_gib=16, emulator_cpus=2, max_vms=1)
    kv = manifests(plan(dgx, odd, host="dgx-h100"), odd, catalog)
    assert _domain(kv.virtual_machines[0])["cpu"]["isolateEmulatorThread"] is True
    assert kv.kubevirt["spec"]["configuration"]["developerConfiguration"]["featureGates"] == ["CPUManager"]
    assert kv.notes == (
        "emulator_cpus 2: each VM gets 1 emulator CPU(s) (isolateEmulatorThread gives 1, or 2 with AlignCPUs for an"
        " even vCPU count; 15 vCPUs)",
    )
    one = Virtualization(vcpus=16, memory_gib=16, emulator_cpus=1, max_vms=1)
    kv = manifests(plan(dgx, one, host="dgx-h100"), one, catalog)
    assert kv.notes == () and "annotations" not in kv.kubevirt["metadata"]


def test_what_kubevirt_manifests_cannot_be_written_for(dgx, catalog):
    request = Virtualization(vcpus=4, memory_gib=16, max_vms=1)
    p = plan(dgx, request, host="dgx-h100")
    with pytest.raises(KubeVirtError, match=r"'dgx h100' is not a Kubernetes node name"):
        manifests(dataclasses.replace(p, host="dgx h100"), request, catalog)
    unknown = dataclasses.replace(p, vms=(dataclasses.replace(p.vms[0], hostdev_ids=("10de:ffff",)),))
    with pytest.raises(KubeVirtError, match=r"\(10de:ffff\) is not in the GPU catalog"):
        manifests(unknown, request, catalog)
    amd = dataclasses.replace(p, vms=(dataclasses.replace(p.vms[0], hostdev_ids=("1002:74a1",)),))
    with pytest.raises(KubeVirtError, match=r"is MI300X, an amd GPU"):
        manifests(amd, request, catalog)
    # a GPU's VF is a vGPU: its resource is a vGPU type the plan does not name
    gpu = dgx["gpus"][0]
    vfs = {**gpu, "sriov_totalvfs": 16, "sriov_numvfs": 2, "interfaces": [], "vfs": ["0000:1b:00.4", "0000:1b:00.5"]}
    vgpu = Virtualization(vms_per_gpu=2, max_vms=2)
    on_vfs = plan({**dgx, "sriov_devices": [*dgx["sriov_devices"], {**vfs, "vf_device": "2330"}]}, vgpu, host="d")
    with pytest.raises(KubeVirtError, match=r"vm-gpu0-0 gets the VF 0000:1b:00\.4 of GPU 0000:1b:00\.0: .* vGPU"):
        manifests(on_vfs, vgpu, catalog)


def _cli(*args: str):
    return CliRunner().invoke(app, ["virt", "plan", *args])


def test_cli_kubevirt_dir_writes_one_file_per_vm_and_the_kubevirt_cr(tmp_path: Path):
    out = tmp_path / "kubevirt"
    args = ("--host-root", str(DGX), "--vcpus", "8", "--memory-gib", "64")
    human = _cli(*args, "--kubevirt-dir", str(out))
    assert human.exit_code == 0, human.output
    assert sorted(p.name for p in out.iterdir()) == ["kubevirt.yaml", *(f"vm-gpu{i}.yaml" for i in range(8))]
    assert f"wrote {out / 'kubevirt.yaml'}" in human.stdout and f"wrote {out / 'vm-gpu7.yaml'}" in human.stdout
    vm = yaml.safe_load((out / "vm-gpu3.yaml").read_text())
    cr = yaml.safe_load((out / "kubevirt.yaml").read_text())
    assert schema_errors(vm) == [] and schema_errors(cr) == []
    permitted = {d["resourceName"] for d in cr["spec"]["configuration"]["permittedHostDevices"]["pciHostDevices"]}
    assert _domain(vm)["devices"]["gpus"][0]["deviceName"] in permitted
    # --json keeps its documented shape; the files are written all the same
    machine = _cli(*args, "--json", "--kubevirt-dir", str(tmp_path / "again"))
    assert machine.exit_code == 0 and list(json.loads(machine.stdout)) == ["vms"]
    assert len(list((tmp_path / "again").iterdir())) == 9
    bad = _cli(*args, "--host", "dgx h100", "--kubevirt-dir", str(tmp_path / "never"))
    assert bad.exit_code == 1 and not (tmp_path / "never").exists()
    assert bad.stderr.strip().splitlines() == [
        "error: --kubevirt-dir: host dgx h100: 'dgx h100' is not a Kubernetes node name the kubernetes.io/hostname"
        " label can hold; give --host"
    ]
    assert "--kubevirt-dir" in _cli("--help").stdout
