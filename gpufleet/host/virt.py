"""The VM planner: GPU virtual machines on one host, from its topology facts. Pure, no I/O.

Input: the facts :func:`gpufleet.host.hostfacts.read_host` returns, a
:class:`~gpufleet.spec.models.Virtualization` request (what each VM gets, its vCPUs and memory) and the host's
:class:`~gpufleet.spec.models.TuningProfile` (whose reserved CPUs and hugepages the VMs leave alone: the topology
planner, :func:`gpufleet.host.topology.plan`, says which they are). Output: a :class:`VirtPlan`, per VM

- its device: a whole GPU (passthrough), one of a GPU's SR-IOV virtual functions (``vms_per_gpu`` > 1), or with
  ``device: vf`` one VF of another SR-IOV device (the lab's NVMe controller); the VM lives on that device's NUMA node;
- the host CPUs its vCPUs are pinned to, on that node: whole physical cores first (SMT siblings together, so vCPUs
  ``2k`` and ``2k+1`` are one core's two threads), never the system's reserved CPUs nor another VM's; ``cpus[i]``
  is vCPU ``i``'s CPU;
- the CPUs of its emulator threads (QEMU's I/O and housekeeping), apart from every VM's vCPUs: ``emulator_cpus`` of
  its own, taken after all the node's vCPUs so that vCPUs get the whole cores; with ``emulator_cpus: 0``, the
  system's reserved CPUs on its node, shared with the host's services (OpenStack's ``emulator_threads_policy=share``);
- the hugepages backing its memory on that node: 1 GiB pages when the memory is a whole number of GiB, else 2 MiB
  (or the size the request names).

A request that does not fit is refused with the numbers (:class:`VirtError`): too few free CPUs on a node, more
hugepages than a node can hold (its memory less the ordinary memory it keeps and the tuning profile's own
hugepages), too few devices (no GPU, fewer VFs than VMs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpufleet.host.hostfacts import check_facts, format_cpulist
from gpufleet.host.topology import TopologyPlan, node_reserve_mib
from gpufleet.host.topology import plan as topology_plan
from gpufleet.spec.models import TuningProfile, Virtualization


class VirtError(ValueError):
    """A VM request that does not fit a host; the message names the host and gives the numbers."""

    def __init__(self, host: str, reason: str) -> None:
        self.host, self.reason = host, reason
        super().__init__(f"host {host}: {reason}")


@dataclass(frozen=True)
class VmGpu:
    pci: str
    numa_node: int


@dataclass(frozen=True)
class VmHugepages:
    numa_node: int
    size_kib: int
    count: int


@dataclass(frozen=True)
class VmPlan:
    name: str
    gpu: VmGpu | None  # the GPU the VM's device is or belongs to; None for a VF of another device
    cpus: tuple[int, ...]  # cpus[i] is vCPU i's host CPU
    emulator_cpus: tuple[int, ...]
    hugepages: VmHugepages
    hostdevs: tuple[str, ...]  # PCI addresses passed through (a GPU, or a VF)
    hostdev_ids: tuple[str | None, ...]  # their ``vendor:device`` ids (``10de:2330``); None where sysfs has none
    numa_node: int
    memory_mib: int
    threads_per_core: int  # 2 when the vCPUs come in SMT sibling pairs: the guest sees the same topology

    def to_dict(self) -> dict[str, Any]:
        """The ``gpufleet virt plan --json`` shape of one VM (docs: DESIGN.md, CLI contracts)."""
        return {
            "name": self.name,
            "gpu": None if self.gpu is None else {"pci": self.gpu.pci, "numa_node": self.gpu.numa_node},
            "cpus": list(self.cpus),
            "emulator_cpus": list(self.emulator_cpus),
            "hugepages": {
                "numa_node": self.hugepages.numa_node,
                "size_kib": self.hugepages.size_kib,
                "count": self.hugepages.count,
            },
            "hostdevs": list(self.hostdevs),
        }


@dataclass(frozen=True)
class NodeUse:
    """What the VMs take of one NUMA node, and what it had for them."""

    id: int
    free_cpus: int  # the node's CPUs less the system's reserved ones
    vm_cpus: int  # vCPUs and emulator CPUs of the VMs on it
    hugepage_mib: int  # what the node can back VMs with
    vm_hugepage_mib: int


@dataclass(frozen=True)
class VirtPlan:
    host: str
    vms: tuple[VmPlan, ...]
    nodes: tuple[NodeUse, ...]
    reserved_cpus: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"vms": [vm.to_dict() for vm in self.vms]}


@dataclass(frozen=True)
class _Device:
    """What one VM is given before its CPUs and memory are chosen."""

    name: str
    gpu: VmGpu | None
    hostdev: str
    numa_node: int
    hostdev_id: str | None  # ``vendor:device``


def plan(
    facts: Mapping[str, Any], request: Virtualization, profile: TuningProfile | None = None, host: str = "host"
) -> VirtPlan:
    """The VMs of one host (see the module docstring). Raises :class:`VirtError` when they do not fit,
    :class:`gpufleet.host.topology.TopologyError` when the tuning profile cannot work on the host, and
    :class:`gpufleet.host.hostfacts.FactsError` for facts that contradict each other."""
    check_facts(facts)
    tuning = topology_plan(facts, profile or TuningProfile(), host)
    devices = _devices(facts, tuning, request, host)[: request.max_vms]
    reserved = set(tuning.reserved_cpus)
    cores_of: dict[int, list[list[int]]] = defaultdict(list)
    for core in sorted(facts["cores"], key=lambda c: c["cpus"][0]):
        free = [c for c in core["cpus"] if c not in reserved]
        if free:
            cores_of[core["numa_node"]].append(free)
    per_vm = request.vcpus + request.emulator_cpus
    by_node: dict[int, list[_Device]] = defaultdict(list)
    for dev in devices:
        by_node[dev.numa_node].append(dev)
    node_memory = {n["id"]: n["memory_kib"] // 1024 for n in facts["numa_nodes"]}
    profile_pages = defaultdict(int)
    for h in tuning.hugepages:
        profile_pages[h["numa_node"]] += h["size_kib"] * h["count"] // 1024
    page_kib = request.page_kib
    vms: dict[str, VmPlan] = {}
    uses: list[NodeUse] = []
    for node_id in sorted(node_memory):
        on_node = by_node.get(node_id, [])
        free = sum(len(c) for c in cores_of.get(node_id, []))
        hugepage_mib = max(node_memory[node_id] - node_reserve_mib(node_memory[node_id]) - profile_pages[node_id], 0)
        uses.append(NodeUse(node_id, free, per_vm * len(on_node), hugepage_mib, request.memory_mib * len(on_node)))
        if not on_node:
            continue
        _check_fits(host, facts, node_id, len(on_node), request, free, hugepage_mib, profile_pages[node_id])
        pool = _CorePool(cores_of[node_id])
        vcpus = [pool.take(request.vcpus) for _ in on_node]
        if request.emulator_cpus:
            emulators = [pool.take(request.emulator_cpus) for _ in on_node]
        else:
            shared = _reserved_near(node_id, facts, reserved)
            if not shared:
                raise VirtError(
                    host, "emulator_cpus 0 shares the system's reserved CPUs, but the tuning profile reserves none"
                )
            emulators = [shared for _ in on_node]
        siblings = {c: tuple(core) for core in cores_of[node_id] for c in core}
        for dev, cpus, emulator in zip(on_node, vcpus, emulators, strict=True):
            vms[dev.name] = VmPlan(
                name=dev.name,
                gpu=dev.gpu,
                cpus=tuple(cpus),
                emulator_cpus=tuple(emulator),
                hugepages=VmHugepages(node_id, page_kib, request.memory_mib * 1024 // page_kib),
                hostdevs=(dev.hostdev,),
                hostdev_ids=(dev.hostdev_id,),
                numa_node=node_id,
                memory_mib=request.memory_mib,
                threads_per_core=_threads(cpus, siblings),
            )
    return VirtPlan(
        host=host,
        vms=tuple(vms[d.name] for d in devices),
        nodes=tuple(uses),
        reserved_cpus=tuple(tuning.reserved_cpus),
    )


def _check_fits(
    host: str,
    facts: Mapping[str, Any],
    node_id: int,
    n: int,
    request: Virtualization,
    free: int,
    hugepage_mib: int,
    profile_mib: int,
) -> None:
    """Refuse ``n`` VMs on a node that has too few free CPUs or too little hugepage memory for them."""
    node = next(x for x in facts["numa_nodes"] if x["id"] == node_id)
    per_vm = request.vcpus + request.emulator_cpus
    if per_vm * n > free:
        raise VirtError(
            host,
            f"NUMA node {node_id} has {free} free CPUs ({len(node['cpus'])} less {len(node['cpus']) - free} reserved"
            f" for the system), the {n} VM(s) on it need {per_vm * n} ({n} x ({request.vcpus} vCPUs +"
            f" {request.emulator_cpus} emulator CPUs)); lower --vcpus or the VMs per device",
        )
    if request.memory_mib * n > hugepage_mib:
        memory_mib = node["memory_kib"] // 1024
        raise VirtError(
            host,
            f"NUMA node {node_id} can back VMs with {hugepage_mib} MiB of hugepages ({memory_mib} MiB less"
            f" {node_reserve_mib(memory_mib)} MiB kept as ordinary memory and {profile_mib} MiB of the tuning"
            f" profile's hugepages), the {n} VM(s) on it need {request.memory_mib * n} MiB ({n} x"
            f" {request.memory_gib:g} GiB); lower --memory-gib",
        )


def _devices(facts: Mapping[str, Any], tuning: TopologyPlan, request: Virtualization, host: str) -> list[_Device]:
    """What each VM is given, in PCI order, with its NUMA node (one the host has CPUs on)."""
    nodes_with_cpus = {n["id"] for n in facts["numa_nodes"] if n["cpus"]}
    only = sorted(n["id"] for n in facts["numa_nodes"])
    vfs_of = {d["pci"]: list(d.get("vfs", [])) for d in facts.get("sriov_devices", [])}
    vf_id = {
        d["pci"]: f"{d['vendor']}:{d['vf_device']}" if d.get("vf_device") else None
        for d in facts.get("sriov_devices", [])
    }
    gpu_id = {g["pci"]: f"{g['vendor']}:{g['device']}" for g in facts.get("gpus", [])}
    devices: list[_Device] = []
    if request.device == "gpu":
        if not tuning.gpus:
            raise VirtError(host, "has no GPU (sys/bus/pci/devices lists none): nothing to give VMs")
        for g in tuning.gpus:
            if request.max_vms is not None and len(devices) >= request.max_vms:
                break  # the devices after the first max_vms are not looked at
            node = g.numa_node if g.numa_node is not None else only[0]
            gpu = VmGpu(g.pci, node)
            if request.vms_per_gpu == 1:
                devices.append(_Device(f"vm-gpu{g.index}", gpu, g.pci, node, gpu_id.get(g.pci)))
                continue
            vfs = vfs_of.get(g.pci, [])
            if len(vfs) < request.vms_per_gpu:
                raise VirtError(
                    host,
                    f"GPU {g.pci} has {len(vfs)} SR-IOV VFs, the {request.vms_per_gpu} VMs per GPU need"
                    f" {request.vms_per_gpu} (an SR-IOV GPU's VFs exist once its vGPU host driver enables them)",
                )
            devices += [
                _Device(f"vm-gpu{g.index}-{j}", gpu, vf, node, vf_id[g.pci])
                for j, vf in enumerate(vfs[: request.vms_per_gpu])
            ]
    else:
        gpus = {g.pci for g in tuning.gpus}
        pfs = sorted((d for d in facts.get("sriov_devices", []) if d["pci"] not in gpus), key=lambda d: d["pci"])
        for pf in pfs:
            node = pf["numa_node"]
            if node is None:
                if len(only) > 1:
                    raise VirtError(
                        host,
                        f"SR-IOV device {pf['pci']} reports no NUMA node (numa_node = -1) on a host with"
                        f" {len(only)} NUMA nodes: its VMs' CPUs cannot be chosen",
                    )
                node = only[0]
            devices += [_Device(f"vm-vf{len(devices)}", None, vf, node, vf_id[pf["pci"]]) for vf in pf.get("vfs", [])]
        if not devices:
            raise VirtError(
                host,
                f"has no SR-IOV VF to give VMs ({len(pfs)} capable device(s), VFs enabled on none: the sriov role"
                " enables them, sriov_numvfs)",
            )
    for dev in devices:
        if dev.numa_node not in nodes_with_cpus:
            raise VirtError(
                host, f"{dev.hostdev} is on NUMA node {dev.numa_node}, which has no CPUs to pin its VM's vCPUs to"
            )
    return devices


def _reserved_near(node_id: int, facts: Mapping[str, Any], reserved: set[int]) -> list[int]:
    """The system's reserved CPUs on ``node_id``, else all of them (emulator threads shared with the host)."""
    node = next(n for n in facts["numa_nodes"] if n["id"] == node_id)
    return sorted(reserved & set(node["cpus"])) or sorted(reserved)


class _CorePool:
    """A NUMA node's free CPUs by physical core; :meth:`take` hands out whole cores first."""

    def __init__(self, cores: Sequence[Sequence[int]]) -> None:
        self.cores = [list(c) for c in cores]
        self.size = [len(c) for c in cores]

    def take(self, count: int) -> list[int]:
        """``count`` CPUs: whole free cores while ``count`` fills them, then single CPUs, from cores already split
        first (so that fewer whole cores are broken). The caller has checked that enough are free."""
        chosen: list[int] = []
        for i, core in enumerate(self.cores):
            if core and len(core) == self.size[i] and count - len(chosen) >= len(core):
                chosen += core
                self.cores[i] = []
        while len(chosen) < count:
            i = min(
                (i for i, core in enumerate(self.cores) if core),
                key=lambda i: (len(self.cores[i]) == self.size[i], i),
            )
            chosen.append(self.cores[i].pop(0))
        return chosen


def _threads(cpus: Sequence[int], siblings: Mapping[int, tuple[int, ...]]) -> int:
    """2 when ``cpus`` are SMT sibling pairs in order (vCPUs 2k, 2k+1 one core), else 1."""
    if len(cpus) % 2 or not cpus:
        return 1
    pairs = zip(cpus[0::2], cpus[1::2], strict=True)
    return 2 if all(len(siblings[a]) == 2 and set(siblings[a]) == {a, b} for a, b in pairs) else 1


def describe(p: VirtPlan) -> list[str]:
    """One line per NUMA node with VMs: CPUs and hugepage memory, taken of what the node had."""
    return [
        f"NUMA node {u.id}: VMs take {u.vm_cpus} of {u.free_cpus} free CPUs and {u.vm_hugepage_mib} of"
        f" {u.hugepage_mib} MiB of hugepage memory"
        for u in p.nodes
        if u.vm_cpus
    ] + ([f"reserved for the system: CPUs {format_cpulist(p.reserved_cpus)}"] if p.reserved_cpus else [])
