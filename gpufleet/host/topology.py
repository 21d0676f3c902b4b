"""The NUMA planner: from a host's topology facts and a tuning profile, the whole tuning plan. Pure, no I/O.

Input: the facts :func:`gpufleet.host.hostfacts.read_host` returns (the Ansible module ``gpu_topology`` returns the
same), and a :class:`~gpufleet.spec.models.TuningProfile`. Output: a :class:`TopologyPlan` with

- per GPU: whole physical cores (SMT siblings together) on the GPU's NUMA node, no CPU shared between GPUs: the
  GPUs of a node share what the system leaves there fairly, within the profile's ``cores_per_gpu`` range, and
  each node's plan says why in words; and the nearest NIC(s);
- reserved system CPUs (``reserved_cores`` whole cores, from NUMA nodes without GPUs first, disjoint from the GPU
  sets) and, with isolation, isolated CPUs;
- hugepages per NUMA node and size, never more than the node's memory minus a reserve;
- kernel arguments (1 GiB hugepages at boot in the per-node form ``hugepages=0:N,1:M`` on kernels >= 5.16,
  IOMMU for SR-IOV, isolation, and on hosts with AMD GPUs the IOMMU pass-through AMD recommends for Instinct);
- a KubeletConfiguration fragment whose memory-manager ``reservedMemory`` sums exactly to kube-reserved +
  system-reserved + eviction-hard (the kubelet refuses to start otherwise), from node memory rounded down to
  512 MiB so that a reboot (which moves MemTotal by some MiB) does not change it;
- irqbalance's banned CPU list and systemd's ``CPUAffinity`` for system services;
- SR-IOV VFs per device (never above ``sriov_totalvfs``) and the SR-IOV network device plugin's ``resourceList``;
- Slurm ``gres.conf`` lines, each with the GPU's device node: ``/dev/nvidia<N>`` for NVIDIA GPUs (N: its place among
  the host's NVIDIA GPUs in PCI order), the DRM render node the facts read for AMD GPUs (``/dev/dri/renderD128``; an
  MI300X has eight, the first its primary partition's).

AMD GPUs are planned as NVIDIA ones are (whole cores on their NUMA node, NICs, hugepages); the facts must name them
in the catalog (``1002:74a1`` is an MI300X).

Inputs that cannot work (a GPU the catalog does not know, too few cores for the GPUs' minimum, hugepages beyond a
node's memory...) raise :class:`TopologyError` naming the host and the reason. Facts that contradict each other (a
CPU in two cores, a device on a NUMA node the host does not have...) raise
:class:`gpufleet.host.hostfacts.FactsError` naming the sysfs file, as :func:`gpufleet.host.hostfacts.read_host` does for
facts it cannot read: bad facts always surface as ``FactsError``, never as another exception.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpufleet.host.hostfacts import AMD as AMD_VENDOR
from gpufleet.host.hostfacts import NVIDIA as NVIDIA_VENDOR
from gpufleet.host.hostfacts import check_facts, format_cpulist
from gpufleet.spec.models import TuningProfile

MIB_PER_GIB = 1024
HUGEPAGE_1G_KIB = 1048576
HUGEPAGE_2M_KIB = 2048
# A NUMA node keeps this much ordinary memory when hugepages are set aside: max(512 MiB, 10% of the node).
NODE_RESERVE_MIN_MIB = 512
NODE_RESERVE_FRACTION = 0.10
# Memory figures that feed the kubelet's reservations are rounded down to this: the kernel keeps a few dozen MiB
# differently on every boot (node MemTotal moves), and the plan (the kubelet drop-in) must not change with it.
MEMORY_QUANTUM_MIB = 512
# The kubelet's default hard eviction threshold for memory.
EVICTION_HARD_MEMORY_MIB = 100
PER_NODE_HUGEPAGES_KERNEL = (5, 16)  # hugepages=<node>:<count>,... on the kernel command line
SRIOV_CLASSES = {"ethernet": "0200", "infiniband": "0207", "nvme": "0108"}


class TopologyError(ValueError):
    """A profile that cannot work on a host; the message names the host and the reason."""

    def __init__(self, host: str, reason: str) -> None:
        self.host, self.reason = host, reason
        super().__init__(f"host {host}: {reason}")


@dataclass
class GpuAssignment:
    index: int  # the GPU's place among the host's GPUs in PCI bus order (an NVIDIA-only host's /dev/nvidia<index>)
    pci: str
    model: str | None
    numa_node: int | None
    cpus: list[int]
    nics: list[str]
    hugepages_1g: int = 0
    # the device node a job is given: /dev/nvidia<N>, or an AMD GPU's DRM render node (/dev/dri/renderD<M>); None
    # while the host's facts show no render node for an AMD GPU (its driver is not bound yet)
    device: str | None = None


@dataclass
class NodePlan:
    id: int
    cpus: list[int]
    memory_mib: int
    cores: int
    reserved_cpus: list[int] = field(default_factory=list)
    gpus: list[str] = field(default_factory=list)
    cores_per_gpu: int = 0  # the cores each GPU drawing on this node got
    choice: str = ""  # why, in words


@dataclass
class TopologyPlan:
    host: str
    cpu_vendor: str | None
    kernel: str | None
    smt: bool
    numa_nodes: list[NodePlan]
    gpus: list[GpuAssignment]
    reserved_cpus: list[int]
    isolated_cpus: list[int]
    hugepages: list[dict[str, int]]  # {numa_node, size_kib, count}
    kernel_args: list[str]
    kernel_arg_groups: dict[str, list[str]]  # the same arguments by purpose: hugepages, iommu, isolation, amdgpu
    kubelet: dict[str, Any]
    irqbalance_banned_cpus: str
    system_cpu_affinity: list[int]
    sriov: list[dict[str, Any]]  # {pci, class, interfaces, numvfs, totalvfs, numa_node}
    sriov_device_plugin: dict[str, Any]
    gres_conf: list[str]
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- helpers -------------------------------------------------------------------------------------------------


def kernel_version(release: str | None) -> tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def node_reserve_mib(memory_mib: int) -> int:
    """Ordinary memory a NUMA node keeps when hugepages are set aside."""
    return max(NODE_RESERVE_MIN_MIB, int(NODE_RESERVE_FRACTION * memory_mib))


def kube_reserved_mib(total_mib: int) -> int:
    """kube-reserved memory, the tiered rule GKE and AKS document: 25% of the first 4 GiB, 20% of the next 4,
    10% of the next 8, 6% of the next 112, 2% of the rest."""
    tiers = [(4 * 1024, 0.25), (4 * 1024, 0.20), (8 * 1024, 0.10), (112 * 1024, 0.06), (math.inf, 0.02)]
    left, reserved = total_mib, 0.0
    for size, rate in tiers:
        part = min(left, size)
        reserved += part * rate
        left -= part
        if left <= 0:
            break
    return int(reserved)


def system_reserved_mib(total_mib: int) -> int:
    """system-reserved memory for the OS and its daemons: max(256 MiB, 1% of memory)."""
    return max(256, int(0.01 * total_mib))


def _bus(pci: str) -> int:
    """``0000:1b:00.0`` -> 0x1b."""
    try:
        return int(pci.split(":")[-2], 16)
    except (IndexError, ValueError):
        return 0


def quantized_mib(kib: int) -> int:
    """Memory in MiB rounded down to MEMORY_QUANTUM_MIB (stable from boot to boot)."""
    return kib // 1024 // MEMORY_QUANTUM_MIB * MEMORY_QUANTUM_MIB


def _mi(mib: int) -> str:
    return f"{mib}Mi"


# -- the planner ---------------------------------------------------------------------------------------------


def plan(facts: Mapping[str, Any], profile: TuningProfile, host: str = "host", *, vms: bool = False) -> TopologyPlan:
    """The tuning plan of one host (see the module docstring). ``vms``: the host passes devices to VMs (its host
    group has ``virtualization:``), so its IOMMU arguments are planned even without SR-IOV.

    Raises :class:`gpufleet.host.hostfacts.FactsError` (path and reason) when the facts are malformed or contradict each
    other, and :class:`TopologyError` (host and reason) when the profile cannot work on the host."""
    check_facts(facts)
    nodes = {n["id"]: n for n in facts["numa_nodes"]}
    if not nodes:
        raise TopologyError(host, "no NUMA node found under sys/devices/system/node")
    cores_by_node = _cores_by_node(facts, host)
    notes: list[str] = []
    gpus = sorted(facts["gpus"], key=lambda g: g["pci"])  # PCI bus order: that is /dev/nvidia<i>'s order
    gpu_node = _gpu_nodes(gpus, nodes, host, notes)
    split = _split_cpus(cores_by_node, gpu_node, profile, host, notes)
    assignments = _assign_gpus(facts, gpus, gpu_node, split.gpu_cpus, profile, len(nodes))
    reserved_cpus = sorted(c for cores in split.reserved.values() for core in cores for c in core)
    gpu_cpus = sorted(c for a in assignments for c in a.cpus)
    isolated = gpu_cpus if profile.isolation else []
    hugepages, ordinary_mib = _hugepages(nodes, assignments, profile, host)
    node_plans = [
        NodePlan(
            id=node_id,
            cpus=list(nodes[node_id]["cpus"]),
            memory_mib=nodes[node_id]["memory_kib"] // 1024,
            cores=len(cores_by_node.get(node_id, [])),
            reserved_cpus=sorted(c for core in split.reserved.get(node_id, []) for c in core),
            gpus=[a.pci for a in assignments if a.numa_node == node_id],
            cores_per_gpu=split.per_gpu.get(node_id, 0),
            choice=split.choices.get(node_id, ""),
        )
        for node_id in sorted(nodes)
    ]
    sriov = _sriov(facts, profile, host)
    groups = _kernel_arg_groups(facts, len(nodes), hugepages, sriov, isolated, notes, iommu=vms)
    _device_nodes(gpus, assignments, notes)
    return TopologyPlan(
        host=host,
        cpu_vendor=facts.get("cpu_vendor"),
        kernel=facts.get("kernel"),
        smt=bool(facts.get("smt")),
        numa_nodes=node_plans,
        gpus=assignments,
        reserved_cpus=reserved_cpus,
        isolated_cpus=isolated,
        hugepages=hugepages,
        kernel_args=list(dict.fromkeys(a for group in groups.values() for a in group)),  # iommu=pt may be in two
        kernel_arg_groups=groups,
        kubelet=_kubelet(nodes, ordinary_mib, hugepages, reserved_cpus, split.aligned, host),
        irqbalance_banned_cpus=format_cpulist(gpu_cpus),
        system_cpu_affinity=reserved_cpus,
        sriov=sriov,
        sriov_device_plugin=_sriov_resources(sriov),
        gres_conf=_gres(facts, assignments, cores_by_node, split.source),
        notes=notes,
    )


# -- the steps -----------------------------------------------------------------------------------------------

Core = list[int]  # the CPUs of one physical core: SMT siblings together


def _cores_by_node(facts: Mapping[str, Any], host: str) -> dict[int, list[Core]]:
    """Each NUMA node's physical cores in CPU order (every core has its node: :func:`check_facts`)."""
    cores_by_node: dict[int, list[Core]] = defaultdict(list)
    for core in facts["cores"]:
        cores_by_node[core["numa_node"]].append(core["cpus"])
    if not cores_by_node:
        raise TopologyError(host, "no CPU topology found under sys/devices/system/cpu")
    for core_list in cores_by_node.values():
        core_list.sort(key=lambda cpus: cpus[0])
    return dict(cores_by_node)


def _gpu_nodes(
    gpus: Sequence[Mapping[str, Any]], nodes: Mapping[int, Any], host: str, notes: list[str]
) -> dict[str, int]:
    """Each GPU's NUMA node; a GPU gpufleet's catalog does not know, or without a node on a multi-node host, is
    refused (its CPUs and its gres.conf type could only be guessed)."""
    gpu_node: dict[str, int] = {}
    for gpu in gpus:
        if gpu.get("model") is None:
            raise TopologyError(
                host,
                f"GPU {gpu['pci']} has PCI id {gpu['vendor']}:{gpu['device']}, which gpufleet's catalog does not know"
                " (gpufleet/catalog/gpus.yaml lists the GPUs gpufleet plans for; `gpufleet catalog` shows them)",
            )
        node = gpu["numa_node"]
        if node is None:
            if len(nodes) > 1:
                raise TopologyError(
                    host,
                    f"GPU {gpu['pci']} reports no NUMA node (numa_node = -1) on a host with {len(nodes)} NUMA nodes;"
                    " its CPUs cannot be chosen (check the firmware's ACPI SRAT/SLIT settings)",
                )
            node = next(iter(nodes))
            notes.append(f"GPU {gpu['pci']} reports no NUMA node; the host has one, node {node}")
        gpu_node[gpu["pci"]] = node
    return gpu_node


@dataclass(frozen=True)
class _CpuSplit:
    """How a host's cores are split between the system and the GPUs (see :func:`_split_cpus`)."""

    reserved: dict[int, list[Core]]  # NUMA node -> its cores kept for the system
    gpu_cpus: dict[str, list[int]]  # GPU PCI address -> its CPUs
    per_gpu: dict[int, int]  # NUMA node -> the cores each GPU drawing on it got
    choices: dict[int, str]  # NUMA node -> the reason, in words
    aligned: bool  # every GPU's cores are on its own node
    source: dict[str, int]  # GPU PCI address -> the node its cores are on (its own, unless that has no CPUs)


def _split_cpus(
    cores_by_node: Mapping[int, list[Core]],
    gpu_node: Mapping[str, int],
    profile: TuningProfile,
    host: str,
    notes: list[str],
) -> _CpuSplit:
    """Reserved system cores and each GPU's cores. The GPUs that draw on one node's cores (its own; those of a
    CPU-less node draw on the node with the most cores to spare) share what the system leaves there fairly, within
    the profile's ``cores_per_gpu`` range. System cores come from nodes without GPUs first, then from the nodes
    with the most cores beyond their GPUs' minimum."""
    want = profile.cores_per_gpu
    gpus_of = _gpu_sources(cores_by_node, gpu_node, want.min, notes)
    for source, pcis in sorted(gpus_of.items()):
        have = len(cores_by_node[source])
        if have < want.min * len(pcis):
            raise TopologyError(
                host,
                f"NUMA node {source} has {have} physical cores for {len(pcis)} GPU(s); cores_per_gpu min {want.min}"
                f" needs {want.min * len(pcis)} (lower cores_per_gpu, e.g. --cores-per-gpu {have // len(pcis)})"
                if have >= len(pcis)
                else f"NUMA node {source} has {have} physical cores for {len(pcis)} GPU(s): not one core each",
            )
    count = profile.reserved_cores if profile.reserved_cores is not None else len(cores_by_node)
    taken = _reserve(cores_by_node, {n: len(p) for n, p in gpus_of.items()}, count, want.min, host)
    reserved = {n: cores_by_node[n][:k] for n, k in taken.items()}
    gpu_cpus: dict[str, list[int]] = {}
    per_gpu: dict[int, int] = {}
    choices: dict[int, str] = {}
    for node_id, cores in sorted(cores_by_node.items()):
        pcis, free = gpus_of.get(node_id, []), cores[taken[node_id] :]
        said = f"{len(cores)} cores, {taken[node_id]} for the system"
        if not pcis:
            choices[node_id] = f"{said}, no GPU"
            continue
        share = len(free) // len(pcis)
        each = per_gpu[node_id] = min(share, want.max)
        for i, pci in enumerate(pcis):
            gpu_cpus[pci] = sorted(c for core in free[i * each : (i + 1) * each] for c in core)
        why = f"the node's share, within cores_per_gpu {want}"
        if each < share:
            why = f"cores_per_gpu {want} caps the node's share of {share}"
        left = len(free) - each * len(pcis)
        choices[node_id] = f"{said}, {len(pcis)} GPU(s): {each} cores each ({why})" + (
            f", {left} left for other work" if left else ""
        )
    source = {pci: node for node, pcis in gpus_of.items() for pci in pcis}
    aligned = all(gpu_node[pci] == node for pci, node in source.items())
    return _CpuSplit(reserved, gpu_cpus, per_gpu, choices, aligned, source)


def _gpu_sources(
    cores_by_node: Mapping[int, list[Core]], gpu_node: Mapping[str, int], minimum: int, notes: list[str]
) -> dict[int, list[str]]:
    """NUMA node -> the GPUs (PCI order) that take their cores from it: its own, and those of CPU-less nodes, which
    go to the node with the most cores beyond its GPUs' minimum."""
    gpus_of: dict[int, list[str]] = defaultdict(list)
    homeless: dict[int, list[str]] = defaultdict(list)
    for pci, node in sorted(gpu_node.items()):
        (gpus_of if cores_by_node.get(node) else homeless)[node].append(pci)
    for node, pcis in sorted(homeless.items()):
        source = max(cores_by_node, key=lambda n: (len(cores_by_node[n]) - minimum * len(gpus_of.get(n, [])), -n))
        notes.append(f"NUMA node {node} has no CPUs; its GPUs take cores of node {source}")
        gpus_of[source] = sorted([*gpus_of.get(source, []), *pcis])
    return dict(gpus_of)


def _reserve(
    cores_by_node: Mapping[int, list[Core]], gpus_on: Mapping[int, int], count: int, minimum: int, host: str
) -> dict[int, int]:
    """How many of each node's first cores the system keeps: ``count`` in all, one at a time from the node with the
    most to spare (cores beyond its GPUs' minimum), nodes without GPUs first."""
    taken = {n: 0 for n in cores_by_node}

    def spare(n: int) -> int:
        return len(cores_by_node[n]) - taken[n] - minimum * gpus_on.get(n, 0)

    for done in range(count):
        candidates = [n for n in cores_by_node if spare(n) > 0]
        without_gpus = [n for n in candidates if not gpus_on.get(n)]
        if not candidates:
            cores = sum(len(c) for c in cores_by_node.values())
            raise TopologyError(
                host,
                f"{count} cores reserved for the system do not fit: after {done}, the GPUs need every other core of"
                f" the {cores} (cores_per_gpu min {minimum}); lower reserved_cores (--reserve-cores) or cores_per_gpu",
            )
        node = max(without_gpus or candidates, key=lambda n: (spare(n), -n))
        taken[node] += 1
    return taken


def _assign_gpus(
    facts: Mapping[str, Any],
    gpus: Sequence[Mapping[str, Any]],
    gpu_node: Mapping[str, int],
    gpu_cpus: Mapping[str, list[int]],
    profile: TuningProfile,
    node_count: int,
) -> list[GpuAssignment]:
    """Each GPU with its CPUs and nearest NICs: same NUMA node, InfiniBand before Ethernet; with as many such NICs
    as GPUs on the node, one each in PCI order, else each GPU gets the NIC(s) closest on the PCI bus."""
    nics_by_node: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
    for nic in facts["nics"]:
        nics_by_node[nic["numa_node"]].append(nic)
    per_node: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for gpu in gpus:
        per_node[gpu_node[gpu["pci"]]].append(gpu)
    assignments: list[GpuAssignment] = []
    for node_id, node_gpus in per_node.items():
        candidates = nics_by_node.get(node_id) or (nics_by_node.get(None) if node_count == 1 else []) or []
        kind = "infiniband" if any(n["kind"] == "infiniband" for n in candidates) else "ethernet"
        near = sorted((n for n in candidates if n["kind"] == kind), key=lambda n: n["pci"])
        for i, gpu in enumerate(node_gpus):
            if not near:
                chosen: list[str] = []
            elif len(near) == len(node_gpus):
                chosen = [near[i]["pci"]]
            else:
                best = min(abs(_bus(n["pci"]) - _bus(gpu["pci"])) for n in near)
                chosen = [n["pci"] for n in near if abs(_bus(n["pci"]) - _bus(gpu["pci"])) == best]
            assignments.append(
                GpuAssignment(
                    index=0,
                    pci=gpu["pci"],
                    model=gpu.get("model"),
                    numa_node=node_id,
                    cpus=gpu_cpus[gpu["pci"]],
                    nics=chosen,
                    hugepages_1g=profile.hugepages_1g_per_gpu,
                )
            )
    assignments.sort(key=lambda a: a.pci)
    for i, a in enumerate(assignments):
        a.index = i
    return assignments


def _hugepages(
    nodes: Mapping[int, Mapping[str, Any]], assignments: Sequence[GpuAssignment], profile: TuningProfile, host: str
) -> tuple[list[dict[str, int]], dict[int, int]]:
    """Hugepages per node (1 GiB per GPU on its node or per node, 2 MiB per node), never more than the node's
    memory less its reserve; and each node's ordinary memory left (quantized) for the kubelet's reservations."""
    hugepages: list[dict[str, int]] = []
    ordinary_mib: dict[int, int] = {}
    for node_id in sorted(nodes):
        node = nodes[node_id]
        memory_mib = node["memory_kib"] // 1024
        pages_1g = profile.hugepages_1g_per_node + sum(a.hugepages_1g for a in assignments if a.numa_node == node_id)
        pages_2m = profile.hugepages_2m_per_node
        huge_mib = pages_1g * MIB_PER_GIB + pages_2m * 2
        if huge_mib:
            keep = node_reserve_mib(memory_mib)
            if huge_mib > memory_mib - keep:
                raise TopologyError(
                    host,
                    f"NUMA node {node_id}: {pages_1g} x 1 GiB + {pages_2m} x 2 MiB hugepages ({huge_mib} MiB)"
                    f" exceed its {memory_mib} MiB less the {keep} MiB kept as ordinary memory",
                )
        for size, count in ((HUGEPAGE_1G_KIB, pages_1g), (HUGEPAGE_2M_KIB, pages_2m)):
            if count:
                hugepages.append({"numa_node": node_id, "size_kib": size, "count": count})
        ordinary_mib[node_id] = quantized_mib(node["memory_kib"]) - huge_mib
    return hugepages, ordinary_mib


def _sriov(facts: Mapping[str, Any], profile: TuningProfile, host: str) -> list[dict[str, Any]]:
    """VFs per capable device of the profile's classes, never above the device's limit."""
    classes = {SRIOV_CLASSES[c] for c in profile.sriov_device_classes}
    sriov: list[dict[str, Any]] = []
    if not profile.vfs_per_nic:
        return sriov
    for dev in sorted(facts.get("sriov_devices", []), key=lambda d: d["pci"]):
        if dev["class"] not in classes:
            continue
        if profile.vfs_per_nic > dev["sriov_totalvfs"]:
            name = ",".join(dev["interfaces"]) or dev["pci"]
            raise TopologyError(
                host,
                f"{name} ({dev['pci']}) supports {dev['sriov_totalvfs']} VFs; the profile asks for"
                f" {profile.vfs_per_nic} (vfs_per_nic)",
            )
        sriov.append(
            {
                "pci": dev["pci"],
                "class": dev["class"],
                "vendor": dev["vendor"],
                "interfaces": list(dev["interfaces"]),
                "numa_node": dev["numa_node"],
                "numvfs": profile.vfs_per_nic,
                "totalvfs": dev["sriov_totalvfs"],
            }
        )
    return sriov


def _device_nodes(gpus: Sequence[Mapping[str, Any]], assignments: Sequence[GpuAssignment], notes: list[str]) -> None:
    """Each GPU's device node: ``/dev/nvidia<N>`` (N counts the NVIDIA GPUs in PCI order, as the NVIDIA driver numbers
    them), an AMD GPU's DRM render node from the facts (the amdgpu driver gives an MI300X eight, so they cannot be
    counted), or None with a note when an AMD GPU has none yet."""
    facts = {g["pci"]: g for g in gpus}
    nvidia = 0
    for a in assignments:  # PCI order
        gpu = facts[a.pci]
        if gpu["vendor"] == NVIDIA_VENDOR:
            a.device = f"/dev/nvidia{nvidia}"
            nvidia += 1
        elif gpu.get("render_node"):
            a.device = f"/dev/dri/{gpu['render_node']}"
        else:
            notes.append(
                f"GPU {a.pci} has no DRM render node yet (no driver bound): its gres.conf line names no device file;"
                " plan again once its driver is loaded"
            )


def iommu_args(facts: Mapping[str, Any]) -> list[str]:
    """The kernel arguments that switch the host's IOMMU on, in pass-through mode for the host's own devices: Intel
    VT-d is off unless ``intel_iommu=on``; AMD-Vi is on by default. The firmware's table says which IOMMU the host
    has (``facts["iommu"]``); without one, the CPU's vendor does."""
    intel = facts.get("iommu") == "intel" or (facts.get("iommu") is None and facts.get("cpu_vendor") == "GenuineIntel")
    return ["intel_iommu=on", "iommu=pt"] if intel else ["iommu=pt"]


def _kernel_arg_groups(
    facts: Mapping[str, Any],
    node_count: int,
    hugepages: Sequence[Mapping[str, int]],
    sriov: Sequence[Any],
    isolated: Sequence[int],
    notes: list[str],
    *,
    iommu: bool,
) -> dict[str, list[str]]:
    """Kernel arguments by purpose (each tuning role owns its group): hugepages, iommu, isolation, and amdgpu (the
    ``amd_driver`` role's: the IOMMU in pass-through mode, which AMD recommends for Instinct GPUs, on every host with
    AMD GPUs, SR-IOV or not)."""
    groups: dict[str, list[str]] = {"hugepages": [], "iommu": [], "isolation": [], "amdgpu": []}
    total_1g = {h["numa_node"]: h["count"] for h in hugepages if h["size_kib"] == HUGEPAGE_1G_KIB}
    if total_1g:
        if kernel_version(facts.get("kernel")) >= PER_NODE_HUGEPAGES_KERNEL:
            spec = ",".join(f"{n}:{c}" for n, c in sorted(total_1g.items()))
        else:
            spec = str(sum(total_1g.values()))
            if node_count > 1:
                notes.append("kernel older than 5.16: 1 GiB hugepages are set as a total the kernel spreads over nodes")
        groups["hugepages"] = ["default_hugepagesz=1G", "hugepagesz=1G", f"hugepages={spec}"]
    if sriov or iommu:
        groups["iommu"] = iommu_args(facts)
    if isolated:
        cpulist = format_cpulist(isolated)
        groups["isolation"] = [f"isolcpus={cpulist}", f"nohz_full={cpulist}", f"rcu_nocbs={cpulist}"]
    if any(g["vendor"] == AMD_VENDOR for g in facts["gpus"]):
        groups["amdgpu"] = iommu_args(facts)
    return groups


def _kubelet(
    nodes: Mapping[int, Mapping[str, Any]],
    ordinary_mib: Mapping[int, int],
    hugepages: Sequence[Mapping[str, int]],
    reserved_cpus: Sequence[int],
    aligned: bool,
    host: str,
) -> dict[str, Any]:
    """The KubeletConfiguration fragment: static CPU manager, topology manager, static memory manager with exact
    reservations."""
    total_mib = sum(quantized_mib(n["memory_kib"]) for n in nodes.values())
    kube_mib, system_mib = kube_reserved_mib(total_mib), system_reserved_mib(total_mib)
    reserved_memory = _spread(kube_mib + system_mib + EVICTION_HARD_MEMORY_MIB, ordinary_mib, host)
    hugepage_sizes = sorted({h["size_kib"] for h in hugepages}, reverse=True)
    return {
        "cpuManagerPolicy": "static",
        "reservedSystemCPUs": format_cpulist(reserved_cpus),
        "topologyManagerPolicy": "single-numa-node" if aligned else "restricted",
        "topologyManagerScope": "pod",
        "memoryManagerPolicy": "Static",
        "kubeReserved": {"memory": _mi(kube_mib)},
        "systemReserved": {"memory": _mi(system_mib)},
        "evictionHard": {"memory.available": _mi(EVICTION_HARD_MEMORY_MIB)},
        "reservedMemory": [
            {
                "numaNode": node_id,
                "limits": {"memory": _mi(mib), **{_hugepage_resource(s): "0" for s in hugepage_sizes}},
            }
            for node_id, mib in sorted(reserved_memory.items())
        ],
    }


def _gres(
    facts: Mapping[str, Any],
    assignments: Sequence[GpuAssignment],
    cores_by_node: Mapping[int, list[Core]],
    source: Mapping[str, int],
) -> list[str]:
    """Slurm gres.conf lines: logical core indices (socket-major, lstopo's Core L#) of the NUMA node the GPU's cores
    are on (its own; for a GPU on a node without CPUs, the node it takes its cores from); Slurm's gres.conf(5) advises
    naming all cores of the socket or NUMA node, since it co-allocates at that level."""
    logical = {
        tuple(c["cpus"]): i for i, c in enumerate(sorted(facts["cores"], key=lambda c: (c["package"], c["cpus"][0])))
    }
    gres: list[str] = []
    for a in assignments:
        node_cores = sorted(logical[tuple(c)] for c in cores_by_node[source[a.pci]])
        device = f"File={a.device}" if a.device else "Count=1"  # no device file known yet: see _device_nodes
        gres.append(f"Name=gpu Type={str(a.model).lower()} {device} Cores={format_cpulist(node_cores)}")
    return gres


def _hugepage_resource(size_kib: int) -> str:
    return "hugepages-1Gi" if size_kib == HUGEPAGE_1G_KIB else f"hugepages-{size_kib // 1024}Mi"


def _spread(total_mib: int, ordinary_mib: Mapping[int, int], host: str) -> dict[int, int]:
    """``total_mib`` split over NUMA nodes in proportion to their ordinary memory, summing exactly to it."""
    usable = {n: max(m, 0) for n, m in ordinary_mib.items()}
    whole = sum(usable.values())
    if whole < total_mib:
        raise TopologyError(
            host,
            f"the kubelet must reserve {total_mib} MiB, but only {whole} MiB is left outside hugepages",
        )
    shares = {n: total_mib * m // whole for n, m in usable.items()}
    rest = total_mib - sum(shares.values())
    for n in sorted(usable, key=lambda n: usable[n], reverse=True)[:rest]:
        shares[n] += 1
    for n, mib in shares.items():
        if mib > usable[n]:
            raise TopologyError(host, f"NUMA node {n}: reserving {mib} MiB leaves it no ordinary memory")
    return {n: mib for n, mib in shares.items() if mib}


def _sriov_resources(sriov: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The SR-IOV network device plugin's config.json: one resource per device class and NUMA node."""
    groups: dict[tuple[str, int | None], list[dict[str, Any]]] = defaultdict(list)
    for dev in sriov:
        groups[(dev["class"], dev["numa_node"])].append(dev)
    names = {v: k for k, v in SRIOV_CLASSES.items()}
    resources = []
    for (cls, node), devs in sorted(groups.items(), key=lambda kv: (kv[0][0], -1 if kv[0][1] is None else kv[0][1])):
        kind = names[cls]
        where = f"numa{node}" if node is not None else "numa_unknown"
        selectors: dict[str, Any] = {"vendors": sorted({d["vendor"] for d in devs})}
        if kind == "nvme":
            selectors["rootDevices"] = [d["pci"] for d in devs]
        else:
            selectors["pfNames"] = [i for d in devs for i in d["interfaces"]]
        if kind == "infiniband":
            selectors["isRdma"] = True
        resources.append(
            {
                "resourceName": f"{kind}_{where}",
                "deviceType": "accelerator" if kind == "nvme" else "netDevice",
                "selectors": selectors,
            }
        )
    return {"resourceList": resources}
