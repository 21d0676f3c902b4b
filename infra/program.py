"""The program ``pulumi up`` runs for a stack: load and validate ``Pulumi.<stack>.yaml`` with gpufleet's loader
(the one ``gpufleet validate`` uses), plan it, then build the components and export the outputs.

An invalid stack stops here with the validator's ``file:line: key.path: message`` lines, before any resource is
registered; so does a stack whose cluster fails a high or medium rule of the AKS secure baseline it does not waive
(:mod:`gpufleet.baseline`, the judgement ``gpufleet audit`` prints).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from gpufleet.baseline import audit
from gpufleet.catalog import load_catalog
from gpufleet.plan import StackPlan, plan_stack
from gpufleet.spec import StackNotFound, load_stack, resolve_stack
from infra.aks import ClusterArgs, GpuPool, GpuPoolArgs, RegionalGpuCluster
from infra.gpu_software import GpuSoftware, GpuSoftwareArgs

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class InvalidStack(pulumi.RunError):
    """The stack file is missing or invalid: nothing was registered."""


def load(stack_name: str, root: Path = PROJECT_ROOT) -> StackPlan:
    """The plan of the validated stack ``stack_name`` (``Pulumi.<stack_name>.yaml`` in ``root``)."""
    try:
        path = resolve_stack(stack_name, root)
    except StackNotFound as exc:
        raise InvalidStack(str(exc)) from None
    catalog = load_catalog()
    loaded = load_stack(path, catalog=catalog)
    if not loaded.ok or loaded.stack is None:
        lines = "\n".join(str(d) for d in loaded.diagnostics)
        raise InvalidStack(f"stack {stack_name} is invalid; nothing was changed:\n{lines}")
    if loaded.stack.aks is None:
        raise InvalidStack(
            f"stack {stack_name} has no gpufleet:aks; its bare-metal hosts are configured with Ansible"
            " (ansible/site.yml), not with Pulumi"
        )
    plan = plan_stack(loaded.stack, catalog)
    # the secure baseline is the default: a cluster with unwaived high or medium failures is not built
    blocking = audit(plan).blocking
    if blocking:
        lines = "\n".join(str(loaded.place(r.rule.setting, r.message)) for r in blocking)
        raise InvalidStack(
            f"stack {stack_name} fails the AKS secure baseline (gpufleet audit {stack_name}); nothing was"
            f" changed:\n{lines}"
        )
    return plan


@dataclass
class Program:
    """What the program built (the tests inspect it)."""

    cluster: RegionalGpuCluster
    pools: list[GpuPool]
    software: GpuSoftware


def pool_outputs(plan: StackPlan) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "aks_name": p.aks_name,
            "vm_size": p.vm_size,
            "gpu_model": p.gpu_model,
            "gpus_per_node": p.gpus_per_node,
            "nodes": {"count": p.nodes.count, "min": p.nodes.min, "max": p.nodes.max},
            "mig_instances_per_node": p.mig.instances_per_node if p.mig else None,
        }
        for p in plan.pools
    ]


def build(plan: StackPlan) -> Program:
    """The stack's resources, each mapped from its part of the plan."""
    assert plan.cluster is not None
    cluster = RegionalGpuCluster(plan.cluster.name, ClusterArgs(plan=plan.cluster))
    pools = [GpuPool(p.name, GpuPoolArgs(plan=p, cluster=cluster)) for p in plan.pools]
    release = plan.cluster.gpu_software
    software = GpuSoftware(
        "gpu-software",
        GpuSoftwareArgs(release=release, kubeconfig=cluster.kubeconfig, cluster_id=cluster.cluster.id),
        # the daemonsets need GPU nodes to land on; the pools' labels must exist before the MIG manager reads them
        opts=pulumi.ResourceOptions(depends_on=[p.agent_pool for p in pools]),
    )
    pulumi.export("cluster_name", cluster.cluster.name)
    pulumi.export("cluster_id", cluster.cluster.id)
    pulumi.export("node_resource_group", cluster.cluster.node_resource_group)
    pulumi.export("pools", pool_outputs(plan))
    pulumi.export("gpu_software", {"chart": release.chart, "version": release.version, "namespace": release.namespace})
    pulumi.export("kubeconfig", cluster.kubeconfig)
    return Program(cluster=cluster, pools=pools, software=software)


def main(stack_name: str | None = None, root: Path = PROJECT_ROOT) -> Program:
    return build(load(stack_name or pulumi.get_stack(), root))
