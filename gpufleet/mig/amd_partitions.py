"""AMD Instinct partitions: the MIG planner's sibling (docs/amd.md).

An AMD Instinct GPU is split by two modes at once: a compute partition mode (SPX, DPX, QPX, CPX: 1, 2, 4 or 8
logical GPUs) and a memory partition mode (NPS1, NPS2, NPS4: NUMA memory regions). Which pairs a model runs is the
catalog's (``gpus.yaml``, ``amd_partition_geometries``: the amdgpu driver's rule per GC version, and what AMD
documents per model); this module judges a stack's or a demand's partitions against it, pure, no I/O:

- one GPU: does a pair run on a model, with its logical GPUs and the memory of each (:func:`check`), and why not
  (:func:`pair_problem`, the one place that says so);
- the memory mode is one per node (the driver applies an NPS change to the whole XGMI hive), compute modes may differ
  per group of GPUs, each pair valid for the model;
- a Device Config Manager profile (the AMD GPU Operator's partitioning, ``managed_by: operator``) assigns every GPU
  of a node: the groups' GPU counts plus the skipped GPUs equal the node's GPUs (DCM's rule, checked by
  :func:`layout_problems` only), and takes only the modes DCM v1.5.1 applies (:data:`DCM_COMPUTE_MODES`,
  :data:`DCM_MEMORY_MODES`; NPS4 only with CPX: :data:`DCM_NPS4_COMPUTE`); :func:`dcm_profile` writes a layout as
  DCM's profile entry.

Fleet packing of a partition demand is :mod:`gpufleet.mig.amd_pack`; its demand file, :mod:`gpufleet.mig.amd_demand`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.catalog import AmdPartitionPair, Gpu
    from gpufleet.plan.model import AmdPartitionGroupPlan, AmdPartitionPlan
    from gpufleet.spec.models import AmdPartitionGroup, AmdPartitions

    Layout = AmdPartitions | AmdPartitionPlan

# What AMD's Device Config Manager v1.5.1 applies. Its doc (gpu-operator docs/dcm/device-config-manager-configmap.md)
# says "computePartition: SPX, CPX; memoryPartition: NPS1, NPS4; NPS4 is supported only for CPX", but the v1.5.1 chart
# itself ships profiles dpx_nps2_all and qpx_nps1_all in its default DCM ConfigMap (../shared/reference/charts/
# amd-gpu-operator-v1.5.1/values.yaml, defaultDCMConfigMap), and the v1.3.0 release notes add DPX/QPX and NPS2: the
# chart's own profiles are taken as what v1.5.1 applies. NPS4 with a mode other than CPX appears in neither source,
# so it stays the host role's.
DCM_COMPUTE_MODES = ("SPX", "DPX", "QPX", "CPX")
DCM_MEMORY_MODES = ("NPS1", "NPS2", "NPS4")
DCM_NPS4_COMPUTE = "CPX"
# The ConfigMap gpufleet writes DCM's profiles into (``gpufleet amd pack -o``): the DeviceConfig's
# spec.configManager.config.name names it; the chart's own default one is default-dcm-config.
DCM_CONFIGMAP = "gpufleet-dcm-config"
DCM_CONFIGMAP_KEY = "config.json"
# What DCM stops and restarts on a node while it repartitions (config.json's gpuClientSystemdServices: AMD's default,
# in the GPU Operator v1.5.1 chart's values.yaml defaultDCMConfigMap)
DCM_SYSTEMD_SERVICES = ("amd-metrics-exporter", "gpuagent")

KeyPath = tuple[str | int, ...]

_PAIR_RE = re.compile(r"\s*([A-Za-z]{2,8})\s*[+_]\s*([A-Za-z]{2,8}\d{0,3})\s*")


@dataclass(frozen=True)
class Problem:
    """Something wrong with a partition layout, at ``path`` relative to the layout's key."""

    path: KeyPath
    message: str


@dataclass(frozen=True)
class NodePartitions:
    """What a node's GPUs become under a layout: per pair (``cpx_nps4``), its logical GPUs on the node and the memory
    of each; ``whole``: GPUs left as they are (skipped)."""

    logical_gpus: dict[str, int]
    memory_gib: dict[str, float]
    whole: int


@dataclass(frozen=True)
class PairCheck:
    """Does a compute x memory pair run on one GPU of a model (``gpufleet amd check``): its logical GPUs and the
    memory of each when it does (``documented``: AMD lists it for the model, else the driver's rule allows it;
    ``dcm``: AMD's Device Config Manager applies it), the reason when it does not."""

    gpu: str
    pair: str
    fits: bool
    logical_gpus: int | None = None
    memory_gib: float | None = None
    reason: str | None = None
    documented: bool | None = None
    dcm: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        """``amd check --json``: ``{gpu, pair, fits, logical_gpus, memory_gib, reason}``."""
        return {
            "gpu": self.gpu,
            "pair": self.pair,
            "fits": self.fits,
            "logical_gpus": self.logical_gpus,
            "memory_gib": self.memory_gib,
            "reason": self.reason,
        }


class PairSyntaxError(ValueError):
    """Text that is not written as a compute x memory pair (``CPX+NPS4``)."""


def parse_pair(text: str) -> tuple[str, str]:
    """``CPX+NPS4``, ``cpx+nps4`` or the resource suffix ``cpx_nps4`` -> ``("CPX", "NPS4")``; whether the modes exist
    is :func:`pair_problem`'s to say. Raises :class:`PairSyntaxError` for anything else."""
    m = _PAIR_RE.fullmatch(text)
    if m is None:
        shown = text if len(text) <= 40 else text[:40] + "..."
        raise PairSyntaxError(f"{shown!r} is not a partition pair: write COMPUTE+MEMORY, e.g. CPX+NPS4 or SPX+NPS1")
    return m.group(1).upper(), m.group(2).upper()


def _rule(gpu: Gpu) -> str:
    """Where a model's pairs come from, for messages: the amdgpu driver's rule of its GC version."""
    assert gpu.partitions is not None
    return f"the amdgpu driver's rule for {gpu.partitions.geometry.replace('gc-', 'GC ')}"


def pair_problem(gpu: Gpu, compute: str, memory: str) -> str | None:
    """Why ``compute`` x ``memory`` does not run on ``gpu`` (None when it does): a mode the model does not have, or
    which NPS modes the compute mode takes and which compute modes the NPS mode takes, on that model."""
    parts = gpu.partitions
    if parts is None:
        return no_partitions_reason(gpu)
    if parts.pair(compute, memory) is not None:
        return None
    if compute not in parts.compute_modes:
        return (
            f"{compute} is not a compute partition mode of {gpu.name}; its modes are {', '.join(parts.compute_modes)}"
        )
    if (reason := memory_mode_problem(gpu, memory)) is not None:
        return reason
    with_compute = " or ".join(parts.memory_modes_of(compute))
    with_memory = ", ".join(parts.compute_modes_of(memory))
    return (
        f"{compute} with {memory} is not a partition mode of {gpu.name}: {compute} runs with {with_compute};"
        f" {memory} runs with {with_memory} ({_rule(gpu)})"
    )


def memory_mode_problem(gpu: Gpu, memory: str) -> str | None:
    """Why ``gpu`` has no memory partition mode ``memory`` (None when it has)."""
    parts = gpu.partitions
    if parts is None:
        return no_partitions_reason(gpu)
    if memory in parts.memory_modes:
        return None
    return (
        f"{memory} is not a memory partition mode of {gpu.name}; its modes are {', '.join(parts.memory_modes)}"
        f" ({_rule(gpu)} and the modes its firmware is known to offer)"
    )


def no_partitions_reason(gpu: Gpu) -> str:
    """Why a GPU model takes no AMD partitions."""
    if gpu.vendor != "amd":
        return f"{gpu.name} is an NVIDIA GPU: partition it with mig, not amd_partitions"
    return f"{gpu.name} has no compute or memory partitions (AMD Instinct MI300X, MI325X, MI350X and MI355X do)"


def dcm_applies(compute: str, memory: str) -> bool:
    """Whether AMD's Device Config Manager applies the pair (the modes it takes; NPS4 only with CPX)."""
    return (
        compute in DCM_COMPUTE_MODES
        and memory in DCM_MEMORY_MODES
        and (memory != "NPS4" or compute == DCM_NPS4_COMPUTE)
    )


def check(gpu: Gpu, compute: str, memory: str) -> PairCheck:
    """Does ``compute`` x ``memory`` run on one ``gpu``: its logical GPUs and memory per logical GPU, or why not."""
    name = f"{compute}+{memory}"
    reason = pair_problem(gpu, compute, memory)
    if reason is not None:
        return PairCheck(gpu=gpu.name, pair=name, fits=False, reason=reason)
    assert gpu.partitions is not None
    pair = gpu.partitions.pair(compute, memory)
    assert pair is not None
    return PairCheck(
        gpu=gpu.name,
        pair=pair.name,
        fits=True,
        logical_gpus=pair.logical_gpus,
        memory_gib=pair.memory_gib,
        documented=pair.documented,
        dcm=dcm_applies(compute, memory),
    )


def layout_problems(gpu: Gpu, layout: AmdPartitions, gpus_per_node: int | None) -> list[Problem]:
    """Every problem of ``layout`` on nodes of ``gpus_per_node`` ``gpu`` GPUs (None: not known, counts unchecked)."""
    if gpu.partitions is None:
        return [Problem((), no_partitions_reason(gpu))]
    problems = []
    if (reason := memory_mode_problem(gpu, layout.memory)) is not None:
        problems.append(Problem(("memory",), reason))  # no group's pair can run: said once, at the memory mode
    else:
        for i, group in enumerate(layout.devices):
            reason = pair_problem(gpu, group.compute, layout.memory)
            if reason is not None:
                problems.append(Problem(("devices", i, "compute"), reason))
    if layout.managed_by == "operator":
        problems += dcm_problems(layout)
    if gpus_per_node is not None:
        problems += _count_problems(layout, gpus_per_node)
    return problems


def _groups(layout: Layout) -> Sequence[AmdPartitionGroup | AmdPartitionGroupPlan]:
    """A layout's device groups: a stack's ``devices``, or a plan's ``groups``."""
    devices = getattr(layout, "devices", None)
    return devices if devices is not None else layout.groups  # type: ignore[union-attr]


def dcm_problems(layout: Layout) -> list[Problem]:
    """What AMD's Device Config Manager does not apply in ``layout`` (its memory mode, a group's compute mode)."""
    problems = []
    if layout.memory not in DCM_MEMORY_MODES:
        problems.append(
            Problem(
                ("memory",),
                f"the AMD GPU Operator's Device Config Manager applies {' or '.join(DCM_MEMORY_MODES)}, not"
                f" {layout.memory}; use managed_by: host (the amd_partition role) for it",
            )
        )
    for i, group in enumerate(_groups(layout)):
        if group.compute not in DCM_COMPUTE_MODES:
            problems.append(
                Problem(
                    ("devices", i, "compute"),
                    f"the AMD GPU Operator's Device Config Manager applies {' or '.join(DCM_COMPUTE_MODES)}, not"
                    f" {group.compute}; use managed_by: host (the amd_partition role) for it",
                )
            )
        elif layout.memory == "NPS4" and group.compute != DCM_NPS4_COMPUTE:
            problems.append(
                Problem(
                    ("devices", i, "compute"),
                    f"the AMD GPU Operator's Device Config Manager applies NPS4 with {DCM_NPS4_COMPUTE} only, not with"
                    f" {group.compute}; use managed_by: host (the amd_partition role) for it",
                )
            )
    return problems


def _count_problems(layout: AmdPartitions, gpus: int) -> list[Problem]:
    problems = []
    for i, index in enumerate(layout.skipped_gpus):
        if index >= gpus:
            problems.append(Problem(("skipped_gpus", i), f"GPU {index} is not on a node of {gpus} GPUs (0-{gpus - 1})"))
    assigned = sum(g.gpus for g in layout.devices if g.gpus != "all")
    covered = assigned + len(layout.skipped_gpus)
    if any(g.gpus == "all" for g in layout.devices):
        if len(layout.skipped_gpus) >= gpus:
            problems.append(Problem(("skipped_gpus",), f"every one of the node's {gpus} GPUs is skipped"))
    elif covered != gpus:
        problems.append(
            Problem(
                ("devices",),
                f"the groups assign {assigned} GPUs and skip {len(layout.skipped_gpus)}: {covered}, but a node has"
                f" {gpus}; every GPU is assigned or skipped (AMD's Device Config Manager: the sum of numGPUsAssigned"
                " and skipped GPUs is the node's GPUs)",
            )
        )
    return problems


def group_sizes(layout: Layout, gpus: int) -> list[int]:
    """The GPUs of each device group on a node of ``gpus`` GPUs (``all``: the GPUs not skipped)."""
    return [gpus - len(layout.skipped_gpus) if g.gpus == "all" else int(g.gpus) for g in _groups(layout)]


def node_partitions(gpu: Gpu, layout: AmdPartitions, gpus: int) -> NodePartitions:
    """What a node of ``gpus`` GPUs becomes under a valid ``layout``: logical GPUs and memory per pair."""
    assert gpu.partitions is not None
    logical: dict[str, int] = {}
    memory: dict[str, float] = {}
    for group, count in zip(layout.devices, group_sizes(layout, gpus), strict=True):
        pair = gpu.partitions.pair(group.compute, layout.memory)
        assert pair is not None, "node_partitions needs a valid layout"
        logical[pair.resource_suffix] = logical.get(pair.resource_suffix, 0) + count * pair.logical_gpus
        memory[pair.resource_suffix] = pair.memory_gib
    return NodePartitions(logical_gpus=logical, memory_gib=memory, whole=len(layout.skipped_gpus))


def pairs_for_memory(gpu: Gpu, memory_gib: float) -> Sequence[AmdPartitionPair]:
    """The model's pairs whose logical GPU holds ``memory_gib``, most logical GPUs first (the smallest fit: the
    fewest GPUs for a number of logical GPUs); among equals, the pairs AMD documents for the model, then those AMD's
    Device Config Manager applies, then by NPS mode."""
    if gpu.partitions is None:
        return ()
    fits = [p for p in gpu.partitions.pairs if p.memory_gib >= memory_gib]
    return sorted(
        fits, key=lambda p: (-p.logical_gpus, not p.documented, not dcm_applies(p.compute, p.memory), p.memory)
    )


# -- the Device Config Manager's ConfigMap ---------------------------------------------------------------------


def dcm_profile(layout: Layout, gpus: int | None) -> dict[str, Any]:
    """A validated layout (a stack's ``amd_partitions`` or the plan's) on nodes of ``gpus`` GPUs as AMD's Device
    Config Manager profile, the ``gpu-config-profiles.<profile>`` entry of its ``config.json``:
    ``{profiles: [{computePartition, memoryPartition, numGPUsAssigned}], skippedGPUs: {ids}}`` (gpu-operator
    docs/dcm/device-config-manager-configmap.md); a group of ``all`` GPUs on nodes of unknown GPUs (``gpus`` None)
    has no ``numGPUsAssigned``, as in AMD's ``*_all`` profiles. That every GPU is assigned or skipped is
    :func:`layout_problems`' rule; a mode DCM does not apply raises ValueError with the reason."""
    problems = dcm_problems(layout)
    if problems:
        raise ValueError("; ".join(p.message for p in problems))
    profiles = []
    for group in _groups(layout):
        entry: dict[str, Any] = {"computePartition": group.compute, "memoryPartition": layout.memory}
        if group.gpus != "all":
            entry["numGPUsAssigned"] = int(group.gpus)
        elif gpus is not None:
            entry["numGPUsAssigned"] = gpus - len(layout.skipped_gpus)
        profiles.append(entry)
    return {"profiles": profiles, "skippedGPUs": {"ids": sorted(layout.skipped_gpus)}}


def dcm_config(profiles: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """DCM's ``config.json``: the named profiles (:func:`dcm_profile`), in order, and the services DCM stops while it
    repartitions a node (:data:`DCM_SYSTEMD_SERVICES`)."""
    return {
        "gpu-config-profiles": {name: dict(profile) for name, profile in profiles.items()},
        "gpuClientSystemdServices": {"names": list(DCM_SYSTEMD_SERVICES)},
    }


def dcm_configmap(config: Mapping[str, Any], namespace: str, name: str = DCM_CONFIGMAP) -> dict[str, Any]:
    """The ConfigMap holding DCM's ``config.json`` (the JSON as text, as DCM reads it)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {DCM_CONFIGMAP_KEY: json.dumps(config, indent=2) + "\n"},
    }
