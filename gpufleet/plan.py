"""What a valid stack describes, resolved against the catalog: pools with their GPUs, CPUs, memory, MIG
instances and derived Kubernetes labels; bare-metal host groups with their tuning profile. Pure: no I/O.

The Pulumi program and the Ansible roles take derived values (labels, the AKS driver setting, instance counts)
from here, so they are computed once.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any

from gpufleet.aks import SYSTEM_POOL_TAINT, aks_pool_name
from gpufleet.catalog import Catalog, Gpu, VmSize
from gpufleet.labels import (
    AKS_SPOT_LABEL,
    AKS_SPOT_TAINT,
    DEPLOY_DRIVER_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_MODEL_LABEL,
    GPU_PRESENT_LABEL,
    MIG_CONFIG_LABEL,
    POOL_LABEL,
)
from gpufleet.mig.outputs import aks_instances, cluster_strategy, mig_parted_config, node_mig, stack_layouts
from gpufleet.spec.models import AksManagedMig, GpuPool, MigDeviceGroup, MigLayout, OperatorManagedMig, Stack

# The charts gpufleet installs (their names in NVIDIA's repositories)
GPU_OPERATOR_CHART = "gpu-operator"
DEVICE_PLUGIN_CHART = "nvidia-device-plugin"


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else round(float(value), 4)


@dataclass
class PoolPlan:
    name: str
    aks_name: str  # the node pool's name in AKS (gpufleet.aks.aks_pool_name)
    vm_size: str
    series: str
    gpu_model: str
    gpus_per_node: int | float
    gpu_partition: str | None
    vcpus: int
    memory_gib: float
    infiniband: bool
    nodes: dict[str, int]
    autoscaling: bool
    spot: bool
    zones: list[str]
    os_sku: str
    driver: str
    aks_gpu_driver: str
    taints: list[str]
    labels: dict[str, str]
    mig: dict[str, Any] | None
    sharing: dict[str, Any]
    upgrade: dict[str, Any]
    gpus_total: dict[str, int | float]


@dataclass
class HostGroupPlan:
    name: str
    gpu_model: str | None
    mig_capable: bool | None
    gpus_per_host: int | None
    tuning_profile: str
    tuning: dict[str, Any]
    mig: dict[str, Any] | None


@dataclass
class StackPlan:
    stack: str
    stage: str
    region: str
    release: dict[str, str]
    cluster: dict[str, Any] | None = None
    pools: list[PoolPlan] = field(default_factory=list)
    baremetal: dict[str, Any] | None = None
    host_groups: list[HostGroupPlan] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def host_group_of(self, group_names: Iterable[str]) -> HostGroupPlan | None:
        """A host's group: the first of the stack's host groups, in the stack's order, among the host's inventory
        groups (Ansible's ``group_names``); None when it is in none. Its tuning, MIG layout and node labels all come
        from this one group."""
        names = set(group_names)
        return next((g for g in self.host_groups if g.name in names), None)


def cluster_name(stack: Stack) -> str:
    assert stack.aks is not None
    return stack.aks.cluster.name or f"gpufleet-{stack.stage}-{stack.region}"


def cluster_chart(pools: list[GpuPool]) -> str:
    """The chart an AKS cluster's GPU software comes from: the GPU Operator when a pool leaves the driver
    (``driver: operator``, AKS ``gpuProfile.driver: None``) or a MIG layout (``mig.managed_by: operator``) to it;
    otherwise AKS installs driver and toolkit on every pool and the device plugin alone is enough."""
    operator = any(p.driver == "operator" or isinstance(p.mig, OperatorManagedMig) for p in pools)
    return GPU_OPERATOR_CHART if operator else DEVICE_PLUGIN_CHART


def pool_labels(pool: GpuPool, gpu: Gpu, cluster_has_operator_driver: bool, chart: str) -> dict[str, str]:
    """The node labels a pool carries: the stack's own plus those gpufleet derives (``chart``: the cluster's)."""
    labels = {POOL_LABEL: pool.name, GPU_MODEL_LABEL: gpu.name, **pool.labels}
    if chart == DEVICE_PLUGIN_CHART:
        labels[GPU_PRESENT_LABEL] = "true"
    if isinstance(pool.mig, OperatorManagedMig):
        labels[MIG_CONFIG_LABEL] = pool.mig.config_name
    if pool.sharing.mode != "none":
        labels[DEVICE_PLUGIN_CONFIG_LABEL] = f"{pool.name}-{pool.sharing.mode}"
    if cluster_has_operator_driver and pool.driver == "aks":
        labels[DEPLOY_DRIVER_LABEL] = "false"
    if pool.spot is not None:
        labels[AKS_SPOT_LABEL] = "spot"
    return labels


def _pool_plan(pool: GpuPool, size: VmSize, gpu: Gpu, operator_driver_in_cluster: bool, chart: str) -> PoolPlan:
    gpus = size.whole_gpus
    mig: dict[str, Any] | None = None
    if isinstance(pool.mig, AksManagedMig):
        per_gpu = aks_instances(gpu, pool.mig.profile, 1)
        node = node_mig(MigLayout(config_name="aks", devices=[MigDeviceGroup(profiles=per_gpu)]), gpus)
        mig = {"managed_by": "aks", "gpu_instance_profile": pool.mig.profile}
    elif isinstance(pool.mig, OperatorManagedMig):
        node = node_mig(pool.mig, gpus)
        mig = {"managed_by": "operator", "config_name": pool.mig.config_name}
    if mig is not None:
        mig |= {"instances_per_node": node.instances, "strategy": node.strategy, "resources": node.resources}
    if pool.autoscaling:
        nodes = {"count": pool.count, "min": pool.autoscaling.min, "max": pool.autoscaling.max}
    else:
        nodes = {"count": pool.count, "min": pool.count, "max": pool.count}
    sharing: dict[str, Any] = {"mode": pool.sharing.mode}
    if pool.sharing.replicas:
        sharing["replicas"] = pool.sharing.replicas
    upgrade = pool.effective_upgrade.model_dump(exclude_none=True)
    return PoolPlan(
        name=pool.name,
        aks_name=aks_pool_name(pool),
        vm_size=size.name,
        series=size.series,
        gpu_model=gpu.name,
        gpus_per_node=_number(size.gpu_count),
        gpu_partition=None if size.gpu_count.denominator == 1 else str(size.gpu_count),
        vcpus=size.vcpus,
        memory_gib=size.memory_gib,
        infiniband=size.infiniband,
        nodes=nodes,
        autoscaling=pool.autoscaling is not None,
        spot=pool.spot is not None,
        zones=list(pool.zones),
        os_sku=pool.os_sku,
        driver=pool.driver,
        aks_gpu_driver=pool.aks_gpu_driver,
        taints=[*pool.taints, *([AKS_SPOT_TAINT] if pool.spot else [])],
        labels=pool_labels(pool, gpu, operator_driver_in_cluster, chart),
        mig=mig,
        sharing=sharing,
        upgrade=upgrade,
        gpus_total={k: _number(size.gpu_count * v) for k, v in nodes.items()},
    )


def plan_stack(stack: Stack, catalog: Catalog) -> StackPlan:
    """Resolve a *valid* stack (see :func:`gpufleet.spec.load_stack`) against the catalog."""
    plan = StackPlan(stack=stack.name, stage=stack.stage, region=stack.region, release=stack.release.model_dump())
    if stack.aks is not None:
        cluster = stack.aks.cluster
        plan.cluster = {
            "name": cluster_name(stack),
            "kubernetes": stack.release.kubernetes,
            "sku_tier": cluster.sku_tier,
            "system_pool": cluster.system_pool.model_dump(),
            "system_pool_taints": [SYSTEM_POOL_TAINT],
            "network": cluster.network.model_dump(mode="json", exclude_none=True),
            "security": cluster.security.model_dump(),
        }
        operator_driver = any(p.driver == "operator" for p in stack.aks.gpu_pools)
        chart = plan.cluster["gpu_chart"] = cluster_chart(stack.aks.gpu_pools)
        for pool in stack.aks.gpu_pools:
            size = catalog.vm_size(pool.vm_size)
            assert size is not None, "plan_stack needs a validated stack"
            plan.pools.append(_pool_plan(pool, size, catalog.gpu(size.gpu), operator_driver, chart))
        operator_pools = [p for p in plan.pools if p.mig and p.mig["managed_by"] == "operator"]
        plan.cluster["mig_strategy"] = cluster_strategy(p.mig["strategy"] for p in operator_pools)
    pool_layouts, host_layouts = stack_layouts(stack, catalog)
    if plan.cluster is not None:
        # the GPU Operator's migManager.config: one mig-parted config for the cluster
        plan.cluster["mig_parted_config"] = mig_parted_config(pool_layouts) if pool_layouts else None
    if stack.baremetal is not None:
        bm = stack.baremetal
        plan.baremetal = {
            "inventory": bm.inventory,
            "rollout": bm.rollout.model_dump(),
            "mig_parted_config": mig_parted_config(host_layouts) if host_layouts else None,
        }
        for group in bm.host_groups:
            gpu = catalog.gpu(group.gpu_model) if group.gpu_model else None
            profile = stack.tuning_profile(group.tuning_profile)
            assert profile is not None, "plan_stack needs a validated stack"
            mig = None
            if group.mig is not None and group.gpus_per_host:
                node = node_mig(group.mig, group.gpus_per_host)
                mig = {
                    "config_name": group.mig.config_name,
                    "instances_per_host": node.instances,
                    "strategy": node.strategy,
                    "resources": node.resources,
                }
            elif group.mig is not None:
                mig = {"config_name": group.mig.config_name, "instances_per_host": None}
            plan.host_groups.append(
                HostGroupPlan(
                    name=group.name,
                    gpu_model=gpu.name if gpu else None,
                    mig_capable=gpu.mig_capable if gpu else None,
                    gpus_per_host=group.gpus_per_host,
                    tuning_profile=group.tuning_profile,
                    tuning=profile.model_dump(),
                    mig=mig,
                )
            )
    return plan


SPEC_SOURCE = "<gpufleet stack spec>"  # the "file" named in validation errors of a stack given as data


@functools.lru_cache(maxsize=8)
def _plan_spec_json(spec_json: str) -> StackPlan:
    from gpufleet.catalog import load_catalog
    from gpufleet.spec.load import NAMESPACE, validate_document

    spec = json.loads(spec_json)
    if not isinstance(spec, dict):
        raise ValueError(f"a gpufleet stack spec is a dict (lookup('gpufleet_stack', ...)), not {spec!r}")
    catalog = load_catalog()
    # the lookup's dict has every section, absent ones as None; a stack file leaves them out
    config = {f"{NAMESPACE}:{k}": v for k, v in spec.items() if v is not None}
    loaded = validate_document({"config": config}, SPEC_SOURCE, catalog=catalog)
    if loaded.stack is None:
        raise ValueError("invalid stack:\n" + "\n".join(str(d) for d in loaded.diagnostics))
    return plan_stack(loaded.stack, catalog)


def plan_spec(spec: Mapping[str, Any]) -> StackPlan:
    """The plan of a stack given as data (the ``gpufleet_stack`` lookup's dict), validated exactly as a stack file
    is; :class:`ValueError` with the validator's diagnostics when it is invalid. Cached per content."""
    return _plan_spec_json(json.dumps(spec, sort_keys=True))
