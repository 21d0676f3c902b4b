"""MIG layouts in the ecosystem's formats: mig-parted configs, the GPU Operator's MIG settings, AKS-managed MIG.

- mig-parted (``version: v1``, ``mig-configs``): one named config per layout, each entry with the GPU model's
  ``device-filter`` (``0x233010DE`` form), ``devices``, ``mig-enabled`` and ``mig-devices``; ``all-disabled``
  is always present (the GPU Operator's MIG manager falls back to it).
- GPU Operator: the node label ``nvidia.com/mig.config=<name>``, the ConfigMap holding the mig-parted config for
  ``migManager.config``, and ``mig.strategy``: ``single`` when every GPU of a node carries instances of one and
  the same profile, else ``mixed``; with it, the extended resources pods request.
- AKS-managed MIG: ``gpuInstanceProfile`` MIG<n>g fills every GPU of a pool with the plain n-slice profile.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from io import StringIO
from typing import Any, Literal

from gpufleet.catalog import Catalog, Gpu
from gpufleet.mig import FleetPack
from gpufleet.mig.placement import Layout
from gpufleet.spec.models import MigLayout, OperatorManagedMig, Stack

DISABLED_CONFIG = "all-disabled"
CONFIGMAP_KEY = "config.yaml"


@dataclass(frozen=True)
class NamedLayout:
    """A mig-parted config to emit: a name, the GPU model it is for, and its device groups."""

    name: str
    gpu: Gpu
    layout: MigLayout


def _entry(gpu: Gpu, devices: str | Sequence[int], profiles: dict[str, int]) -> dict[str, Any]:
    return {
        "device-filter": list(gpu.mig_device_filters),
        "devices": devices if devices == "all" else list(devices),
        "mig-enabled": True,
        "mig-devices": dict(profiles),
    }


def disabled_entries() -> list[dict[str, Any]]:
    """The ``all-disabled`` layout: MIG off on every GPU (what a host falls back to)."""
    return [{"devices": "all", "mig-enabled": False}]


def with_disabled(config: Mapping[str, Any]) -> dict[str, Any]:
    """A mig-parted config whose ``mig-configs`` include ``all-disabled`` (added when missing): the layout every
    host can fall back to, and the GPU Operator MIG manager's default."""
    configs = dict(config.get("mig-configs") or {})
    configs.setdefault(DISABLED_CONFIG, disabled_entries())
    return {"version": config.get("version", "v1"), "mig-configs": configs}


def mig_parted_config(layouts: Iterable[NamedLayout]) -> dict[str, Any]:
    """One mig-parted ``v1`` config with a named entry per layout (several GPU models may share a name)."""
    configs: dict[str, list[dict[str, Any]]] = {DISABLED_CONFIG: disabled_entries()}
    for named in _unique(layouts):
        entries = configs.setdefault(named.name, [])
        for group in named.layout.devices:
            entries.append(_entry(named.gpu, group.gpus, dict(group.profiles)))
    return {"version": "v1", "mig-configs": configs}


def stack_layouts(stack: Stack, catalog: Catalog) -> tuple[list[NamedLayout], list[NamedLayout]]:
    """The mig-parted layouts a stack asks for: (AKS pools with operator-managed MIG, bare-metal host groups)."""
    pools: list[NamedLayout] = []
    if stack.aks is not None:
        for pool in stack.aks.gpu_pools:
            if isinstance(pool.mig, OperatorManagedMig):
                size = catalog.vm_size(pool.vm_size)
                assert size is not None, "needs a validated stack"
                pools.append(NamedLayout(pool.mig.config_name, catalog.gpu(size.gpu), pool.mig))
    hosts: list[NamedLayout] = []
    if stack.baremetal is not None:
        for group in stack.baremetal.host_groups:
            if group.mig is not None and group.gpu_model is not None:
                hosts.append(NamedLayout(group.mig.config_name, catalog.gpu(group.gpu_model), group.mig))
    return pools, hosts


def node_layouts(layout: MigLayout, gpus: int, gpu: Gpu) -> tuple[Layout, ...]:
    """The layout of each of a node's ``gpus`` GPUs (by index) under a stack's MIG layout: its device group's
    instances, ``()`` for a GPU in no group (MIG left off)."""
    from gpufleet.mig.placement import as_layout

    assert gpu.mig is not None, "a MIG layout is for a MIG GPU"
    out = []
    for index in range(gpus):
        group = next((g for g in layout.devices if g.gpus == "all" or index in g.gpus), None)
        out.append(as_layout(group.profiles, gpu.mig) if group is not None else ())
    return tuple(out)


def _unique(layouts: Iterable[NamedLayout]) -> list[NamedLayout]:
    """Layouts shared by several pools (same name, same model) appear once in a config."""
    seen: set[tuple[str, str]] = set()
    out = []
    for named in layouts:
        if (named.name, named.gpu.name) not in seen:
            seen.add((named.name, named.gpu.name))
            out.append(named)
    return out


def packed_config_name(gpu: str, index: int) -> str:
    """The mig-parted config name of a packing's ``index``-th layout (1-based) for a model."""
    return f"{gpu.lower()}-{index}"


def packed_layouts(result: FleetPack, gpus: Mapping[str, Gpu]) -> list[NamedLayout]:
    """The layouts of a packing as named mig-parted configs (each applied to all GPUs of a node)."""
    from gpufleet.spec.models import MigDeviceGroup

    out = []
    for model in result.models:
        for i, (layout, _) in enumerate(model.layouts, start=1):
            name = packed_config_name(model.gpu, i)
            group = MigDeviceGroup(gpus="all", profiles=dict(layout))
            out.append(NamedLayout(name, gpus[model.gpu], MigLayout(config_name=name, devices=[group])))
    return out


def dump_yaml(data: dict[str, Any]) -> str:
    from ruamel.yaml import YAML

    out = StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096  # no folded lines
    yaml.sort_base_mapping_type_on_output = False  # type: ignore[attr-defined]
    yaml.dump(data, out)
    return out.getvalue()


def operator_configmap(config: dict[str, Any], name: str, namespace: str) -> dict[str, Any]:
    """The ConfigMap the GPU Operator's ``migManager.config.name`` points at."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {CONFIGMAP_KEY: dump_yaml(config)},
    }


@dataclass(frozen=True)
class NodeMig:
    """What one node exposes to Kubernetes under a MIG layout."""

    strategy: Literal["single", "mixed"]
    resources: dict[str, int]  # extended resource -> count per node
    instances: dict[str, int]  # MIG profile -> instances per node


def node_mig(layout: MigLayout, gpus_per_node: int) -> NodeMig:
    """Instances per node, the device plugin's MIG strategy and the resources pods request."""
    instances: Counter[str] = Counter()
    covered = 0
    for group in layout.devices:
        n = gpus_per_node if group.gpus == "all" else len(group.gpus)
        covered += n
        for profile, count in group.profiles.items():
            instances[profile] += count * n
    whole = gpus_per_node - covered  # GPUs the layout leaves without MIG
    strategy: Literal["single", "mixed"] = "single" if len(instances) == 1 and whole == 0 else "mixed"
    return NodeMig(strategy, advertised(instances, whole, strategy), dict(instances))


def advertised(instances: Mapping[str, int], whole: int, strategy: str | None) -> dict[str, int]:
    """The resources a MIG node's device plugin advertises (``instances``: profile -> count, ``whole``: GPUs left
    without MIG) under its MIG ``strategy``: ``single`` counts the instances as ``nvidia.com/gpu``; ``mixed`` as
    ``nvidia.com/mig-<profile>``, beside the whole GPUs' ``nvidia.com/gpu``."""
    if strategy == "single":
        return {"nvidia.com/gpu": sum(instances.values())}
    resources = {f"nvidia.com/mig-{p}": c for p, c in sorted(instances.items())}
    return resources | ({"nvidia.com/gpu": whole} if whole else {})


def cluster_strategy(strategies: Iterable[str]) -> Literal["single", "mixed"] | None:
    """The GPU Operator's ``mig.strategy`` is cluster-wide: single only when every MIG node is single."""
    found = set(strategies)
    if not found:
        return None
    return "single" if found == {"single"} else "mixed"


def aks_instances(gpu: Gpu, profile: str, gpus: int) -> dict[str, int]:
    """AKS ``gpuInstanceProfile`` MIG<n>g: each GPU filled with the plain n-compute-slice profile."""
    if gpu.mig is None:
        raise ValueError(f"{gpu.name} has no MIG")
    base = gpu.mig.base_profile(int(profile.removeprefix("MIG").removesuffix("g")))
    if base is None:
        raise ValueError(f"{gpu.name} has no {profile} profile")
    return {base.name: base.max_count * gpus}
