"""The program ``pulumi up`` runs for a stack: load and validate ``Pulumi.<stack>.yaml`` with gpufleet's loader
(the one ``gpufleet validate`` uses), plan it, then build the components and export the outputs.

An invalid stack stops here with the validator's ``file:line: key.path: message`` lines, before any resource is
registered; so does a stack whose cluster fails a high or medium rule of the AKS secure baseline it does not waive
(:mod:`gpufleet.azure.baseline`, the judgement ``gpufleet audit`` prints).
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from pulumi_command import local

from gpufleet.azure.baseline import audit
from gpufleet.baremetal.bmc import ExpectedHardware
from gpufleet.baremetal.inventory import from_hosts, host_entry
from gpufleet.baremetal.metal3 import hosts_from_stack
from gpufleet.catalog import Catalog, load_catalog
from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan
from gpufleet.spec.files import StackNotFound, resolve_stack
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import BaremetalHost
from infra.aks import ClusterArgs, GpuPool, GpuPoolArgs, NapPool, NapPoolArgs, RegionalGpuCluster
from infra.baremetal import secret_config
from infra.baremetal.metal3 import Metal3Hosts, Metal3HostsArgs, passwords_from_config
from infra.baremetal.provider import BareMetalHost, BootSpec, HostInputs, SshSpec
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
    bm = loaded.stack.baremetal
    if loaded.stack.aks is None and (bm is None or not bm.hosts):
        raise InvalidStack(
            f"stack {stack_name} has no gpufleet:aks and no gpufleet:baremetal.hosts: nothing for Pulumi to create;"
            " its bare-metal hosts are converged with Ansible (ansible/site.yml, inventory from gpufleet inventory)"
        )
    plan = plan_stack(loaded.stack, catalog)
    # the secure baseline is the default: a cluster with unwaived high or medium failures is not built
    blocking = audit(plan).blocking if plan.cluster is not None else []
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

    cluster: RegionalGpuCluster | None = None
    pools: list[GpuPool] = field(default_factory=list)
    nap_pools: list[NapPool] = field(default_factory=list)  # kind nap: Karpenter objects on the cluster
    software: GpuSoftware | None = None
    hosts: list[BareMetalHost] = field(default_factory=list)  # engine redfish: one per stack host
    metal3: Metal3Hosts | None = None  # engine metal3
    converge: local.Command | None = None  # baremetal.converge: ansible/site.yml run by pulumi up


def pool_outputs(plan: StackPlan) -> list[dict[str, Any]]:
    return [
        {
            "name": p.name,
            "kind": p.kind,
            "aks_name": p.aks_name,
            "vm_size": p.vm_size,
            "gpu_model": p.gpu_model,
            "gpus_per_node": p.gpus_per_node,
            "nodes": {"count": p.nodes.count, "min": p.nodes.min, "max": p.nodes.max},
            "mig_instances_per_node": p.mig.instances_per_node if p.mig else None,
        }
        for p in plan.pools
    ]


def host_inputs(host: BaremetalHost, catalog: Catalog) -> HostInputs:
    """A stack host as the Redfish provider's typed inputs (the password is passed apart, as a secret)."""
    expected = host.expected
    gpu = catalog.find_gpu(expected.gpu_model) if expected.gpu_model else None
    return HostInputs(
        name=host.name,
        host_group=host.host_group,
        bmc_address=host.bmc.address,
        bmc_username=host.bmc.username,
        bmc_password_key=host.bmc.password.secret,
        bmc_verify_tls=host.bmc.verify_tls,
        system_id=host.system_id,
        serial=host.serial,
        boot=BootSpec(
            source=host.boot.source,
            mode=host.boot.mode,
            image_url=host.boot.image_url,
            image_checksum=host.boot.image_checksum,
        ),
        power=host.power,
        ssh=SshSpec(address=host.ssh.address, port=host.ssh.port),
        boot_mac=host.boot_mac,
        expected=ExpectedHardware(
            gpu_model=gpu.name if gpu else None,
            gpu_count=expected.gpu_count,
            numa_nodes=expected.numa_nodes,
            memory_gib=expected.memory_gib,
        ),
        wipe_disks_on_delete=host.wipe_disks_on_delete,
    )


def build_baremetal(plan: StackPlan, program: Program) -> None:
    """The stack's BMC-managed hosts: one BareMetalHost each (engine redfish: the program drives the BMCs), or
    Metal3 BareMetalHosts on the management cluster (engine metal3); the Ansible inventory of the hosts as an
    output either way (``gpufleet inventory`` writes the same from the stack file)."""
    bm = plan.baremetal
    assert bm is not None
    if bm.engine == "metal3":
        assert bm.metal3 is not None
        hosts = hosts_from_stack(bm.hosts, bm.metal3.namespace)
        program.metal3 = Metal3Hosts(
            "metal3",
            Metal3HostsArgs(
                hosts=hosts,
                kubeconfig=secret_config(bm.metal3.kubeconfig.secret),
                passwords=passwords_from_config(hosts),
            ),
        )
        pulumi.export("baremetal_hosts", {name: r.status for name, r in program.metal3.hosts.items()})
    else:
        catalog = load_catalog()
        for host in bm.hosts:
            program.hosts.append(
                BareMetalHost(host.name, host_inputs(host, catalog), password=secret_config(host.bmc.password.secret))
            )
        pulumi.export(
            "baremetal_hosts",
            {h.name: {"power": r.power, "facts": r.facts} for h, r in zip(bm.hosts, program.hosts, strict=True)},
        )
    groups = [g.name for g in plan.host_groups]
    pulumi.export("inventory", from_hosts(groups, (host_entry(h) for h in bm.hosts)).to_dict())
    if bm.converge:
        program.converge = converge_command(plan, program)


def converge_command(plan: StackPlan, program: Program) -> local.Command:
    """``pulumi up`` converges the hosts it created (``baremetal.converge: true``): the stack's inventory written by
    ``gpufleet inventory``, then ``ansible/site.yml`` limited to those hosts; run again when a host's facts (a
    replaced box) or the release pins change. Commands from this virtualenv; names are validated identifiers."""
    bm = plan.baremetal
    assert bm is not None
    python = Path(sys.executable)
    inventory = f"build/inventories/{plan.stack}/hosts.yml"
    names = ",".join(h.name for h in bm.hosts)
    create = " && ".join(
        [
            shlex.join([str(python), "-m", "gpufleet", "inventory", plan.stack, "-o", inventory]),
            shlex.join(
                [
                    str(python.with_name("ansible-playbook")),
                    "ansible/site.yml",
                    "-i",
                    inventory,
                    "--limit",
                    names,
                    "-e",
                    f"gpufleet_stack={plan.stack}",
                ]
            ),
        ]
    )
    if program.metal3 is not None:
        depends: list[pulumi.Resource] = [r.host for r in program.metal3.hosts.values()]
        changes: list[Any] = [r.status for r in program.metal3.hosts.values()]
    else:
        depends = list(program.hosts)
        changes = [h.facts for h in program.hosts]
    return local.Command(
        "converge",
        local.CommandArgs(create=create, dir=str(PROJECT_ROOT), triggers=[plan.release, *changes]),
        opts=pulumi.ResourceOptions(depends_on=depends),
    )


def build(plan: StackPlan) -> Program:
    """The stack's resources, each mapped from its part of the plan."""
    program = Program()
    if plan.baremetal is not None and plan.baremetal.hosts:
        build_baremetal(plan, program)
    if plan.cluster is None:
        return program
    cluster = RegionalGpuCluster(plan.cluster.name, ClusterArgs(plan=plan.cluster))
    pools = [GpuPool(p.name, GpuPoolArgs(plan=p, cluster=cluster)) for p in plan.pools if p.kind == "agentpool"]
    release, amd = plan.cluster.gpu_software, plan.cluster.amd_gpu_software
    software = GpuSoftware(
        "gpu-software",
        GpuSoftwareArgs(release=release, kubeconfig=cluster.kubeconfig, cluster_id=cluster.cluster.id, amd_release=amd),
        # the daemonsets need GPU nodes to land on; the pools' labels must exist before the MIG manager (or the AMD
        # Device Config Manager) reads them
        opts=pulumi.ResourceOptions(depends_on=[p.agent_pool for p in pools]),
    )
    nap = [NapPool(p.name, NapPoolArgs(p, plan.cluster, software.provider)) for p in plan.pools if p.kind == "nap"]
    pulumi.export("cluster_name", cluster.cluster.name)
    pulumi.export("cluster_id", cluster.cluster.id)
    pulumi.export("node_resource_group", cluster.cluster.node_resource_group)
    pulumi.export("pools", pool_outputs(plan))
    for key, chart in (("gpu_software", release), ("amd_gpu_software", amd)):
        if chart is not None:  # NVIDIA's where the cluster has NVIDIA pools, AMD's where it has AMD pools
            pulumi.export(key, {"chart": chart.chart, "version": chart.version, "namespace": chart.namespace})
    pulumi.export("kubeconfig", cluster.kubeconfig)
    program.cluster, program.pools, program.software, program.nap_pools = cluster, pools, software, nap
    return program


def main(stack_name: str | None = None, root: Path = PROJECT_ROOT) -> Program:
    return build(load(stack_name or pulumi.get_stack(), root))
