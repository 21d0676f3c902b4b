"""KubeVirt manifests for a VM plan (:class:`gpufleet.host.virt.VirtPlan`): one ``VirtualMachine`` (``kubevirt.io/v1``)
per planned VM and the ``KubeVirt`` CR settings they need. Pure, no I/O.

The libvirt domain (:mod:`gpufleet.host.virt_xml`) names host CPUs one by one; KubeVirt cannot. It asks the kubelet for
``vCPUs (+ emulator CPUs)`` dedicated CPUs (``dedicatedCpuPlacement``: the virt-launcher pod is Guaranteed, the
static CPU manager picks its cpuset, KubeVirt pins vCPU i to the i-th of them) and for the device and the
hugepages; the kubelet's single-numa-node topology manager then takes CPUs, device and hugepages from one NUMA node,
the device's (its device plugin reports it), and the static memory manager pins the pages there. gpufleet's kubelet
configuration (:func:`gpufleet.host.topology.plan`) sets all three (single-numa-node where every GPU's node has CPUs of
its own), with the same reserved CPUs the VM plan leaves to the system. So each VM lands on its device's node with
the plan's numbers of CPUs and pages, but not on the plan's CPU ids, and which GPU of a model a VM gets is the
device plugin's choice. What each manifest says:

- ``cpu``: ``dedicatedCpuPlacement``, one socket of ``vCPUs / threads`` cores with the plan's SMT pairing (threads
  2 when the vCPUs are sibling pairs), ``host-passthrough``, guest NUMA ``guestMappingPassthrough`` (KubeVirt
  allows it only with dedicated CPUs and hugepages: the guest sees the host node its CPUs are on);
  ``isolateEmulatorThread`` when the plan gives the VM emulator CPUs of its own. KubeVirt gives one such CPU, or
  two for an even vCPU count with the ``AlignCPUs`` gate and the KubeVirt CR's even-parity annotation (written when
  the plan asks for 2). It cannot put emulator threads on the system's reserved CPUs (``emulator_cpus: 0``) nor
  give more than 2: :attr:`KubeVirtManifests.notes` says so.
- ``memory``: hugepages of the plan's size, and the VM's memory as the request.
- the device: a whole NVIDIA GPU under ``devices.gpus``, whose resource the GPU Operator's sandbox device plugin
  (NVIDIA's kubevirt-gpu-device-plugin) advertises (:func:`sandbox_resource`, ``externalResourceProvider: true``);
  another device's VF under ``devices.hostDevices``, advertised by KubeVirt's own device plugin for devices of its
  ``pciVendorSelector`` that the host bound to vfio-pci (``externalResourceProvider: false``).
- ``nodeSelector`` ``kubernetes.io/hostname``: the plan is one host's; ``runStrategy: Halted`` (disks and networks
  are the operator's to add, as in the domains); no memory balloon.

The ``KubeVirt`` CR (``kubevirt/kubevirt``) carries ``permittedHostDevices.pciHostDevices`` for those resources and
the feature gates this needs in KubeVirt v1.6 (the vendored CRD's release): ``CPUManager`` (virt-handler labels a
node ``cpumanager=true`` only with it, and VMs with dedicated CPUs select that label), ``HostDevices`` when a VM
has ``hostDevices`` (the admission webhook refuses them without it), ``AlignCPUs`` as above. ``GPU`` and ``NUMA``
are GA since v1.4 and need none. It is cluster-wide: merge it with what the cluster's CR already has.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpufleet.catalog import Catalog
from gpufleet.host.virt import VirtPlan, VmPlan
from gpufleet.kube.labels import HOSTNAME_LABEL
from gpufleet.spec.models import Virtualization

API_VERSION = "kubevirt.io/v1"
KUBEVIRT_NAME = "kubevirt"  # the KubeVirt CR's name and namespace in KubeVirt's installation manifests
KUBEVIRT_NAMESPACE = "kubevirt"
# KubeVirt v1.6 feature gates (pkg/virt-config/featuregate/active.go at v1.6.6)
CPU_MANAGER_GATE = "CPUManager"
HOST_DEVICES_GATE = "HostDevices"
ALIGN_CPUS_GATE = "AlignCPUs"
# On the KubeVirt CR, with AlignCPUs: VMs with isolateEmulatorThread and an even vCPU count get a second emulator CPU
# (staging/src/kubevirt.io/api/core/v1/types.go EmulatorThreadCompleteToEvenParity; virt-api's VMI mutator copies it).
EVEN_PARITY_ANNOTATION = "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity"
MAX_EMULATOR_CPUS = 2  # isolateEmulatorThread: 1, or 2 with the even-parity annotation
# NVIDIA/kubevirt-gpu-device-plugin v1.6.0 (the GPU Operator v26.7.0's sandboxDevicePlugin) registers its resources
# as nvidia.com/<name> (pkg/device_plugin/generic_device_plugin.go, DeviceNamespace).
SANDBOX_RESOURCE_DOMAIN = "nvidia.com"
# What gpufleet names the resources KubeVirt's own device plugin advertises (pciHostDevices with
# externalResourceProvider false): KubeVirt takes any name of the form vendor.com/product_name.
HOST_DEVICE_RESOURCE_DOMAIN = "gpufleet.io"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
_NODE_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")  # a non-empty label value
_PAGE_SIZES = {1048576: "1Gi", 2048: "2Mi"}


class KubeVirtError(ValueError):
    """A VM plan KubeVirt manifests cannot be written for; the message names the host and says why."""

    def __init__(self, host: str, reason: str) -> None:
        self.host, self.reason = host, reason
        super().__init__(f"host {host}: {reason}")


@dataclass(frozen=True)
class PermittedDevice:
    """One ``permittedHostDevices.pciHostDevices`` entry: the resource a VM asks for, and who advertises it."""

    pci_vendor_selector: str  # "10DE:2330"
    resource_name: str
    external: bool  # True: the GPU Operator's sandbox device plugin; False: KubeVirt's own
    gpu: bool  # requested under devices.gpus (a whole GPU), else devices.hostDevices

    def to_dict(self) -> dict[str, Any]:
        return {
            "pciVendorSelector": self.pci_vendor_selector,
            "resourceName": self.resource_name,
            "externalResourceProvider": self.external,
        }


@dataclass(frozen=True)
class KubeVirtManifests:
    virtual_machines: tuple[dict[str, Any], ...]  # one VirtualMachine per planned VM, in the plan's order
    kubevirt: dict[str, Any]  # the KubeVirt CR
    notes: tuple[str, ...]  # where KubeVirt gives the VMs less than the plan asked for


def sandbox_resource(pci_id: str, pci_name: str | None) -> str:
    """The resource NVIDIA's kubevirt-gpu-device-plugin (v1.6.0, ``getDeviceName``) advertises a passthrough GPU as:
    its device name in the plugin's pci.ids upper-cased, ``/`` and ``.`` made ``_``, each run of whitespace made
    ``_``, then every character but letters, digits, ``_`` and ``.`` dropped; the device id when pci.ids lacks it.
    ``GA102GL [A10]`` -> ``nvidia.com/GA102GL_A10``, as the GPU Operator's "GPU Operator with KubeVirt" page shows."""
    if pci_name is None:
        return f"{SANDBOX_RESOURCE_DOMAIN}/{pci_id.split(':')[1].lower()}"
    name = pci_name.strip().upper().replace("/", "_").replace(".", "_")
    name = re.sub(r"[\t\n\f\r ]+", "_", name)  # Go's \s: ASCII whitespace only
    return f"{SANDBOX_RESOURCE_DOMAIN}/{re.sub(r'[^a-zA-Z0-9_.]+', '', name)}"


def host_device_resource(pci_id: str) -> str:
    """gpufleet's name for the devices of ``pci_id`` that KubeVirt's own device plugin advertises."""
    vendor, device = pci_id.lower().split(":")
    return f"{HOST_DEVICE_RESOURCE_DOMAIN}/pci-{vendor}-{device}"


def _device(vm: VmPlan, host: str, catalog: Catalog) -> PermittedDevice:
    """What ``vm`` asks KubeVirt for: its GPU through the sandbox device plugin, or its VF through KubeVirt's own."""
    (pci,), (pci_id,) = vm.hostdevs, vm.hostdev_ids
    if pci_id is None:
        raise KubeVirtError(host, f"{vm.name}: {pci} has no vendor:device id in sysfs, which pciVendorSelector needs")
    selector = pci_id.upper()
    if vm.gpu is None:
        return PermittedDevice(selector, host_device_resource(pci_id), external=False, gpu=False)
    if vm.gpu.pci != pci:
        raise KubeVirtError(
            host,
            f"{vm.name} gets the VF {pci} of GPU {vm.gpu.pci}: a GPU's VF is a vGPU, whose KubeVirt resource is the"
            " vGPU type NVIDIA's vGPU software configures on it, which the VM plan does not name; KubeVirt manifests"
            " are written for whole GPUs (vms_per_gpu 1) and other devices' VFs (device vf)",
        )
    gpu = catalog.find_gpu(pci_id)
    if gpu is None or gpu.vendor != "nvidia":
        what = "is not in the GPU catalog" if gpu is None else f"is {gpu.name}, an {gpu.vendor} GPU"
        raise KubeVirtError(
            host,
            f"GPU {pci} ({pci_id}) {what}: gpufleet requests passthrough GPUs from the GPU Operator's sandbox device"
            " plugin, which serves NVIDIA GPUs it knows the resource name of",
        )
    names = gpu.pci_name_of
    if pci_id not in names:
        raise KubeVirtError(
            host,
            f"the catalog's {gpu.name} has no pci_names entry for {pci_id}: its name in the sandbox device plugin's"
            " pci.ids makes the resource name",
        )
    return PermittedDevice(selector, sandbox_resource(pci_id, names[pci_id]), external=True, gpu=True)


def _quantity(mib: int) -> str:
    return f"{mib // 1024}Gi" if mib % 1024 == 0 else f"{mib}Mi"


def virtual_machine(vm: VmPlan, device: PermittedDevice, host: str, isolate_emulator: bool) -> dict[str, Any]:
    """The ``VirtualMachine`` of one planned VM (see the module docstring)."""
    vcpus, threads = len(vm.cpus), vm.threads_per_core
    cpu: dict[str, Any] = {
        "sockets": 1,
        "cores": vcpus // threads,
        "threads": threads,
        "model": "host-passthrough",
        "dedicatedCpuPlacement": True,
        "numa": {"guestMappingPassthrough": {}},
    }
    if isolate_emulator:
        cpu["isolateEmulatorThread"] = True
    devices: dict[str, Any] = {
        "gpus" if device.gpu else "hostDevices": [
            {"name": "gpu0" if device.gpu else "hostdev0", "deviceName": device.resource_name}
        ],
        "autoattachMemBalloon": False,  # pinned, passed-through memory cannot be ballooned
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "VirtualMachine",
        "metadata": {"name": vm.name, "labels": dict(MANAGED_BY)},
        "spec": {
            "runStrategy": "Halted",  # add a disk, then start it (virtctl start)
            "template": {
                "spec": {
                    "nodeSelector": {HOSTNAME_LABEL: host},
                    "domain": {
                        "cpu": cpu,
                        "memory": {"hugepages": {"pageSize": _PAGE_SIZES[vm.hugepages.size_kib]}},
                        "resources": {"requests": {"memory": _quantity(vm.memory_mib)}},
                        "devices": devices,
                    },
                }
            },
        },
    }


def kubevirt_cr(
    devices: tuple[PermittedDevice, ...], gates: tuple[str, ...], annotations: dict[str, str]
) -> dict[str, Any]:
    """The ``KubeVirt`` CR with the permitted devices and feature gates (the rest of its spec is the cluster's)."""
    metadata: dict[str, Any] = {"name": KUBEVIRT_NAME, "namespace": KUBEVIRT_NAMESPACE, "labels": dict(MANAGED_BY)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {
        "apiVersion": API_VERSION,
        "kind": "KubeVirt",
        "metadata": metadata,
        "spec": {
            "configuration": {
                "developerConfiguration": {"featureGates": list(gates)},
                "permittedHostDevices": {"pciHostDevices": [d.to_dict() for d in devices]},
            }
        },
    }


def _emulator(request: Virtualization) -> tuple[bool, bool, list[str]]:
    """(isolateEmulatorThread, even parity with AlignCPUs, notes) for the plan's emulator CPUs of each VM."""
    own = request.emulator_cpus
    if own == 0:
        note = (
            "emulator_cpus 0: QEMU's emulator threads cannot run on the system's reserved CPUs; they share each VM's"
            " dedicated vCPUs"
        )
        return False, False, [note]
    given = MAX_EMULATOR_CPUS if own >= MAX_EMULATOR_CPUS and request.vcpus % 2 == 0 else 1
    if given == own:
        return True, given == MAX_EMULATOR_CPUS, []
    note = (
        f"emulator_cpus {own}: each VM gets {given} emulator CPU(s) (isolateEmulatorThread gives 1, or 2 with"
        f" AlignCPUs for an even vCPU count; {request.vcpus} vCPUs)"
    )
    return True, given == MAX_EMULATOR_CPUS, [note]


def manifests(plan: VirtPlan, request: Virtualization, catalog: Catalog) -> KubeVirtManifests:
    """The ``VirtualMachine`` of each planned VM and the ``KubeVirt`` CR they need. Raises :class:`KubeVirtError`
    for a host name that is no node label value, a VM on a GPU's VF (a vGPU), a GPU the sandbox device plugin does
    not serve or whose name the catalog lacks, and a device without a PCI id."""
    if not _NODE_LABEL_VALUE.fullmatch(plan.host):
        raise KubeVirtError(
            plan.host, f"{plan.host!r} is not a Kubernetes node name the {HOSTNAME_LABEL} label can hold; give --host"
        )
    if not plan.vms:
        raise KubeVirtError(plan.host, "the plan has no VM")
    isolate, even_parity, notes = _emulator(request)
    devices = {vm.name: _device(vm, plan.host, catalog) for vm in plan.vms}
    vms = tuple(virtual_machine(vm, devices[vm.name], plan.host, isolate) for vm in plan.vms)
    permitted = tuple(sorted(set(devices.values()), key=lambda d: (d.pci_vendor_selector, d.resource_name)))
    gates = [CPU_MANAGER_GATE]
    if any(not d.gpu for d in permitted):
        gates.append(HOST_DEVICES_GATE)
    annotations = {}
    if even_parity:
        gates.append(ALIGN_CPUS_GATE)
        annotations[EVEN_PARITY_ANNOTATION] = ""
    return KubeVirtManifests(vms, kubevirt_cr(permitted, tuple(gates), annotations), tuple(notes))
