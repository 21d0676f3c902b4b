"""The program ``pulumi up`` runs for a stack: load and validate ``Pulumi.<stack>.yaml`` with gpufleet's loader
(the one ``gpufleet validate`` uses), plan it, then build the components and export the outputs.

An invalid stack stops here with the validator's ``file:line: key.path: message`` lines, before any resource is
registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from gpufleet.catalog import load_catalog
from gpufleet.gpu_software import chart_release
from gpufleet.plan import StackPlan, plan_stack
from gpufleet.spec import StackNotFound, load_stack, resolve_stack
from gpufleet.spec.models import Stack
from infra.aks import ClusterArgs, GpuPool, GpuPoolArgs, RegionalGpuCluster
from infra.gpu_software import GpuSoftware, GpuSoftwareArgs

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class InvalidStack(pulumi.RunError):
    """The stack file is missing or invalid: nothing was registered."""


def load(stack_name: str, root: Path = PROJECT_ROOT) -> tuple[Stack, StackPlan]:
    """The validated stack ``stack_name`` (``Pulumi.<stack_name>.yaml`` in ``root``) and its plan."""
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
    return loaded.stack, plan_stack(loaded.stack, catalog)


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
            "nodes": p.nodes,
            "mig_instances_per_node": (p.mig or {}).get("instances_per_node"),
        }
        for p in plan.pools
    ]


def build(stack: Stack, plan: StackPlan) -> Program:
    assert stack.aks is not None and plan.cluster is not None
    cluster = RegionalGpuCluster(plan.cluster["name"], ClusterArgs(stack=stack, plan=plan))
    pools = [
        GpuPool(
            spec.name,
            GpuPoolArgs(
                pool=spec,
                plan=pool_plan,
                cluster=cluster,
                kubernetes_version=stack.release.kubernetes,
                node_public_ip=stack.aks.cluster.security.node_public_ip,
            ),
        )
        for spec, pool_plan in zip(stack.aks.gpu_pools, plan.pools, strict=True)
    ]
    release = chart_release(plan, stack.aks.gpu_software)
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
    stack, plan = load(stack_name or pulumi.get_stack(), root)
    return build(stack, plan)
