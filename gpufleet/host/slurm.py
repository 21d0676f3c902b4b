"""Slurm's view of a bare-metal host (docs/queues.md, "Slurm"): its ``gres.conf`` lines and its ``slurm.conf``
``NodeName`` line, from the host's topology facts, its topology plan and its host group's MIG layout. Pure.

- ``gres.conf``: the plan's ``Name=gpu Type=<model> File=/dev/nvidiaN Cores=<its NUMA node's cores>`` line for each
  GPU the layout leaves whole. A host with MIG instances gets ``AutoDetect=nvml`` instead of lines for its MIG
  GPUs: Slurm supports MIG devices through NVML autodetection only, which finds their device files and cores itself,
  and expects them partitioned already (Slurm's gres.html, "MIG Management"; SchedMD/slurm doc/html/gres.shtml).
- ``slurm.conf``: ``NodeName=<host> Sockets CoresPerSocket ThreadsPerCore RealMemory Gres``. ``Gres`` counts the
  whole GPUs by the same type as ``gres.conf`` (``gpu:<model>:<n>``) and the MIG instances by profile
  (``gpu:<profile>:<n>``: gres.html says a MIG GRES type must be a substring of the "MIG Profile" string slurmd
  reports, e.g. ``nvidia_a100_3g.20gb``, which ends with the profile). ``RealMemory`` (MiB) is the host's memory
  rounded down to 512 MiB (as the kubelet figures are, so a reboot does not change it) less the hugepages the plan
  sets aside, which no job's ordinary allocation can use: a node that reports less than ``RealMemory`` is drained
  (slurm.conf(5)).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpufleet.host.topology import MEMORY_QUANTUM_MIB, quantized_mib
from gpufleet.mig.outputs import node_mig

if TYPE_CHECKING:
    from gpufleet.host.topology import TopologyPlan
    from gpufleet.spec.models import MigLayout

AUTODETECT_NVML = "AutoDetect=nvml"


@dataclass(frozen=True)
class SlurmNode:
    """One host's ``gres.conf`` lines and ``slurm.conf`` node line."""

    name: str
    gres_conf: tuple[str, ...]
    node_line: str

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gres_conf": list(self.gres_conf), "slurm_conf": self.node_line}


def mig_gpu_indices(layout: MigLayout, gpus: int) -> set[int]:
    """The indices (``/dev/nvidiaN``) of the GPUs a layout partitions on a host of ``gpus`` GPUs."""
    out: set[int] = set()
    for group in layout.devices:
        out |= set(range(gpus)) if group.gpus == "all" else {i for i in group.gpus if i < gpus}
    return out


def _shape(facts: Mapping[str, Any]) -> tuple[int, int, int]:
    """Sockets, cores per socket, threads per core (Slurm wants one figure each: the largest socket's and core's)."""
    per_socket = Counter(c["package"] for c in facts["cores"])
    threads = max((len(c["cpus"]) for c in facts["cores"]), default=1)
    return len(per_socket), max(per_socket.values(), default=0), threads


def real_memory_mib(facts: Mapping[str, Any], plan: TopologyPlan) -> int:
    hugepages = sum(h["size_kib"] * h["count"] for h in plan.hugepages) // 1024
    total = quantized_mib(int(facts["memory_kib"]))
    return max(total - hugepages, MEMORY_QUANTUM_MIB) if total else 0


def slurm_node(facts: Mapping[str, Any], plan: TopologyPlan, name: str, layout: MigLayout | None) -> SlurmNode:
    """The Slurm lines of a host (``layout``: its host group's MIG layout, None without one)."""
    mig = mig_gpu_indices(layout, len(plan.gpus)) if layout is not None else set()
    mig = {a.index for a in plan.gpus if a.index in mig and a.model is not None}
    gres = [line for a, line in zip(plan.gpus, plan.gres_conf, strict=True) if a.index not in mig]
    counts = Counter(str(a.model).lower() for a in plan.gpus if a.index not in mig)
    if layout is not None and mig:
        gres.insert(0, AUTODETECT_NVML)
        counts.update(node_mig(layout, len(plan.gpus)).instances)
    sockets, cores, threads = _shape(facts)
    line = (
        f"NodeName={name} Sockets={sockets} CoresPerSocket={cores} ThreadsPerCore={threads}"
        f" RealMemory={real_memory_mib(facts, plan)}"
    )
    if counts:
        line += " Gres=" + ",".join(f"gpu:{kind}:{n}" for kind, n in counts.items() if n)
    return SlurmNode(name, tuple(gres), line)
