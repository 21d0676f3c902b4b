"""Planning a valid stack against the catalog: :func:`plan_stack` turns the spec into a :class:`StackPlan`. Pure: no
I/O. Each derived fact is decided here once (pool names and labels, MIG instances, the cluster's chart and its
values, host groups' node labels); the Pulumi program and the roles only map the result."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any, Literal

from gpufleet.azure.aks import SYSTEM_POOL_TAINT, aks_pool_name
from gpufleet.azure.aks_api import agent_pool_properties, pool_api
from gpufleet.azure.baseline import (
    AUDIT_LOG_CATEGORIES,
    AZURE_POLICY_ADDON,
    IMAGE_CLEANER_INTERVAL_HOURS,
    METRIC_CATEGORIES,
    PLATFORM_LOG_CATEGORIES,
    SECRETS_STORE_ADDON,
    SECRETS_STORE_CONFIG,
)
from gpufleet.catalog import Catalog, Gpu, VmSize
from gpufleet.catalog.aks import load_aks_catalog
from gpufleet.fleet.dcgm_diag import diag_level
from gpufleet.kube import amd_operator
from gpufleet.kube.gpu_software import (
    CHART_PINS,
    CLUSTER_POLICY,
    DEFAULT_DEVICE_PLUGIN_CONFIG,
    GPU_OPERATOR_CHART,
    ChartRelease,
    GpuWorkload,
    OperatorCr,
    chart_release,
    cluster_chart,
    deploys_nfd,
    dra_driver_version,
    for_aks,
    for_baremetal,
    gpu_workload,
    operator_cr,
    software_labels,
)
from gpufleet.kube.labels import (
    AKS_SPOT_LABEL,
    AKS_SPOT_TAINT,
    DEPLOY_DRIVER_LABEL,
    DEPLOY_OPERANDS_LABEL,
    GPU_MODEL_LABEL,
    POOL_LABEL,
)
from gpufleet.mig.amd_partitions import node_partitions
from gpufleet.mig.outputs import (
    DISABLED_CONFIG,
    NamedLayout,
    advertised,
    aks_instances,
    cluster_strategy,
    mig_parted_config,
    node_mig,
    stack_layouts,
)
from gpufleet.plan.model import (
    AddonPlan,
    AmdPartitionGroupPlan,
    AmdPartitionPlan,
    BaremetalPlan,
    ClusterPlan,
    EgressPlan,
    HostGroupPlan,
    MigPlan,
    MonitoringPlan,
    NodeCounts,
    PoolPlan,
    SharingPlan,
    StackPlan,
)
from gpufleet.spec.models import (
    AksManagedMig,
    AmdPartitions,
    GpuPool,
    GpuSoftware,
    HostGroup,
    MigDeviceGroup,
    MigLayout,
    Network,
    OperatorManagedMig,
    Security,
    Stack,
)


def _number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else round(float(value), 4)


def cluster_name(stack: Stack) -> str:
    assert stack.aks is not None
    return stack.aks.cluster.name or f"gpufleet-{stack.stage}-{stack.region}"


def stack_tags(stack: Stack) -> dict[str, str]:
    """The Azure tags of a stack's resources."""
    return {"gpufleet-stack": stack.name, "gpufleet-stage": stack.stage, "managed-by": "gpufleet"}


def sharing_plan(pool: GpuPool) -> SharingPlan:
    """A pool's GPU sharing; a sharing pool's nodes use the device-plugin config named ``<pool>-<mode>``."""
    mode = pool.sharing.mode
    if mode == "none":
        return SharingPlan(mode="none")
    return SharingPlan(mode=mode, replicas=pool.sharing.replicas, config_name=f"{pool.name}-{mode}")


def mig_plan(
    managed_by: Literal["aks", "operator", "host"],
    layout: MigLayout,
    gpus: int,
    *,
    config_name: str | None = None,
    gpu_instance_profile: str | None = None,
) -> MigPlan:
    """The MIG plan of ``layout`` on a node of ``gpus`` GPUs: its instances, strategy and resources."""
    node = node_mig(layout, gpus)
    return MigPlan(
        managed_by=managed_by,
        config_name=config_name,
        gpu_instance_profile=gpu_instance_profile,
        instances_per_node=node.instances,
        strategy=node.strategy,
        resources=node.resources,
        profiles=layout_profiles(layout),
        whole_gpus=gpus - sum(gpus if g.gpus == "all" else len(g.gpus) for g in layout.devices),
    )


def layout_profiles(layout: MigLayout) -> tuple[str, ...]:
    """The MIG profiles of a layout, in the order it names them first."""
    return tuple(dict.fromkeys(p for group in layout.devices for p in group.profiles))


def pool_mig(pool: GpuPool, gpu: Gpu, gpus: int) -> MigPlan | None:
    """A pool's MIG layout and the instances it gives each node (on a managed pool, with the strategy AKS's device
    plugin advertises them by)."""
    if isinstance(pool.mig, AksManagedMig):
        per_gpu = aks_instances(gpu, pool.mig.profile, 1)
        layout = MigLayout(config_name="aks", devices=[MigDeviceGroup(profiles=per_gpu)])
        plan = mig_plan("aks", layout, gpus, gpu_instance_profile=pool.mig.profile)
        if pool.mig_strategy is None:
            return plan
        resources = advertised(plan.instances_per_node or {}, plan.whole_gpus or 0, pool.mig_strategy)
        return dataclasses.replace(plan, strategy=pool.mig_strategy, resources=resources)
    if isinstance(pool.mig, OperatorManagedMig):
        return mig_plan("operator", pool.mig, gpus, config_name=pool.mig.config_name)
    return None


def nvlink_multi_node(gpu: Gpu, gpus_per_node: int | None) -> bool:
    """Whether NVLink joins a node's GPUs to other nodes' (multi-node NVLink, the DRA driver's ComputeDomains): the
    catalog's NVLink domain of the model is switched (an NVSwitch platform, not a bridge inside one server) and larger
    than a node's GPUs (GB200 NVL72: 72 GPUs, 4 per node). A node whose GPU count is unknown counts as one GPU."""
    domain = gpu.nvlink_domain_gpus or 0
    return bool(gpu.nvswitch_platforms) and domain > (gpus_per_node or 1)


def amd_partition_plan(gpu: Gpu, layout: AmdPartitions, gpus: int | None) -> AmdPartitionPlan:
    """The AMD partitions of nodes with ``gpus`` ``gpu`` GPUs (None: unknown) under a validated ``layout``."""
    node = node_partitions(gpu, layout, gpus) if gpus else None
    assert gpu.partitions is not None, "amd_partition_plan needs a validated layout"
    memory = {}
    for group in layout.devices:
        pair = gpu.partitions.pair(group.compute, layout.memory)
        assert pair is not None, "amd_partition_plan needs a validated layout"
        memory[pair.resource_suffix] = pair.memory_gib
    return AmdPartitionPlan(
        managed_by=layout.managed_by,
        profile=layout.profile,
        memory=layout.memory,
        groups=tuple(AmdPartitionGroupPlan(g.compute, g.gpus) for g in layout.devices),
        skipped_gpus=tuple(layout.skipped_gpus),
        logical_gpus=node.logical_gpus if node is not None else None,
        memory_gib=memory,
    )


def pool_labels(
    pool: GpuPool,
    gpu: Gpu,
    chart: str,
    sharing: SharingPlan,
    *,
    operator_driver_in_cluster: bool,
    cr: OperatorCr = CLUSTER_POLICY,
) -> dict[str, str]:
    """The node labels a pool carries: the stack's own, gpufleet's pool and model labels, the labels ``chart``'s
    software reads (:func:`gpufleet.kube.gpu_software.software_labels`; ``cr``: the operator's custom resource), the
    operator's driver opt-out for AKS-driver pools in a cluster where other pools leave the driver to the operator,
    and AKS's spot label. An AMD pool gets the AMD GPU Operator's labels
    (:func:`gpufleet.kube.amd_operator.node_labels`) and none of NVIDIA's software."""
    mig_config = pool.mig.config_name if isinstance(pool.mig, OperatorManagedMig) else None
    labels = {POOL_LABEL: pool.name, GPU_MODEL_LABEL: gpu.name, **pool.labels}
    aks_spot = {AKS_SPOT_LABEL: "spot"} if pool.spot is not None and pool.kind == "agentpool" else {}
    if gpu.vendor == "amd":
        parts = pool.amd_partitions
        dcm = parts.profile if parts is not None and parts.managed_by == "operator" else None
        return labels | amd_operator.node_labels(pool.advertiser, dcm) | aks_spot
    if pool.gpu_management == "managed":
        # AKS runs the device plugin and DCGM exporter there: none of the chart's GPU software may (one owner)
        labels[DEPLOY_OPERANDS_LABEL] = "false"
        return labels
    labels |= software_labels(
        chart,
        mig_config=mig_config,
        device_plugin_config=sharing.config_name,
        advertiser=pool.advertiser,
        operator_cr=cr,
    )
    if operator_driver_in_cluster and pool.driver == "aks":
        labels[DEPLOY_DRIVER_LABEL] = "false"
    return labels | aks_spot  # AKS's own spot label; NAP nodes carry karpenter.sh/capacity-type


def pool_plan(
    stack: Stack,
    pool: GpuPool,
    size: VmSize,
    gpu: Gpu,
    chart: str,
    *,
    operator_driver: bool,
    cr: OperatorCr = CLUSTER_POLICY,
) -> PoolPlan:
    """One GPU pool (``chart``: the cluster's; ``operator_driver``: a pool of the cluster leaves the driver to the
    GPU Operator; ``cr``: the operator's custom resource)."""
    assert stack.aks is not None
    gpus = size.whole_gpus
    autoscaling = pool.autoscaling
    low, now, high = pool.node_range
    nodes = NodeCounts(count=now, min=low, max=high)
    whole = size.gpu_count.denominator == 1
    sharing = sharing_plan(pool)
    aks_spot = pool.spot is not None and pool.kind == "agentpool"
    amd = gpu.vendor == "amd"
    plan = PoolPlan(
        name=pool.name,
        aks_name=aks_pool_name(pool),
        vm_size=size.name,
        series=size.series,
        gpu_model=gpu.name,
        mig_capable=gpu.mig_capable and whole,
        gpus_per_node=_number(size.gpu_count),
        gpu_partition=None if whole else str(size.gpu_count),
        vcpus=size.vcpus,
        memory_gib=size.memory_gib,
        infiniband=size.infiniband,
        nodes=nodes,
        autoscaling=autoscaling is not None,
        spot=pool.spot is not None,
        spot_settings=pool.spot,
        zones=tuple(pool.zones),
        os_sku=pool.os_sku,
        kubernetes=stack.release.kubernetes,
        node_public_ip=stack.aks.cluster.security.node_public_ip,
        # AKS installs no AMD driver: an AMD pool's is the AMD GPU Operator's (gpuProfile.driver None)
        driver="operator" if amd else pool.driver,
        aks_gpu_driver=pool.aks_gpu_driver,
        taints=(*pool.taints, *([AKS_SPOT_TAINT] if aks_spot else [])),
        labels=pool_labels(pool, gpu, chart, sharing, operator_driver_in_cluster=operator_driver, cr=cr),
        mig=pool_mig(pool, gpu, gpus),
        sharing=sharing,
        upgrade=pool.effective_upgrade,
        tuning=pool.tuning,
        gpus_total={k: _number(size.gpu_count * getattr(nodes, k)) for k in ("count", "min", "max")},
        tags={**pool.tags, "gpufleet-pool": pool.name, "managed-by": "gpufleet"},
        encryption_at_host=stack.aks.cluster.security.encryption_at_host,
        advertiser=pool.advertiser,
        nvlink_multi_node=whole and nvlink_multi_node(gpu, gpus),
        kind=pool.kind,
        gpu_management=pool.gpu_management,
        vendor=gpu.vendor,
        amd_partitions=(
            amd_partition_plan(gpu, pool.amd_partitions, gpus or None) if pool.amd_partitions is not None else None
        ),
    )
    if pool.kind == "nap":
        return plan
    return dataclasses.replace(plan, api=pool_api(agent_pool_properties(plan), load_aks_catalog()))


# -- the secure baseline's settings (gpufleet.azure.baseline judges the result) -------------------------------------


def workspace_name(cluster: str) -> str:
    """The Log Analytics workspace the program creates for ``cluster``: ``log-<cluster>`` as a workspace name allows
    (4-63 letters, digits and '-', ending with a letter or digit)."""
    return ("log-" + cluster.replace("_", "-"))[:63].rstrip("-")


def egress_plan(network: Network, security: Security) -> EgressPlan:
    """The nodes' way out: a NAT gateway the program creates for its own subnet (the default), the stack's NAT
    gateway or route table, or the load balancer."""
    egress = network.egress
    create = egress.outbound_type == "userAssignedNATGateway" and egress.nat_gateway_id is None
    return EgressPlan(
        outbound_type=egress.outbound_type,
        create_nat_gateway=create,
        nat_gateway_id=egress.nat_gateway_id,
        route_table_id=egress.route_table_id,
        attach_to_subnet=network.existing_subnet_id is None and egress.outbound_type != "loadBalancer",
        # nodes reach the API server from the gateway's address: with authorized ranges, it must be one of them
        authorize_nat_ip=create and bool(security.api_server.authorized_ip_ranges),
    )


def monitoring_plan(security: Security, cluster: str) -> MonitoringPlan | None:
    """The workspace, the log and metric categories the cluster sends it, and Defender; None when nothing needs a
    workspace."""
    logs = security.logs
    categories = (*(AUDIT_LOG_CATEGORIES if logs.audit else ()), *(PLATFORM_LOG_CATEGORIES if logs.platform else ()))
    if not categories and not security.defender:
        return None
    return MonitoringPlan(
        workspace_id=logs.workspace_id,
        workspace_name=None if logs.workspace_id else workspace_name(cluster),
        retention_days=logs.retention_days,
        log_categories=categories,
        metric_categories=METRIC_CATEGORIES if logs.platform else (),
        defender=security.defender,
    )


def cluster_addons(security: Security) -> tuple[AddonPlan, ...]:
    """The AKS add-ons gpufleet manages, each on or off (off explicitly, so turning one off reaches the cluster)."""
    return (
        AddonPlan(AZURE_POLICY_ADDON, security.azure_policy, {}),
        AddonPlan(SECRETS_STORE_ADDON, security.secrets_store_csi, dict(SECRETS_STORE_CONFIG)),
    )


def cluster_plan(
    stack: Stack, catalog: Catalog, layouts: list[NamedLayout]
) -> tuple[ClusterPlan, tuple[PoolPlan, ...]]:
    """The AKS cluster of a stack with an ``aks`` section, its GPU pools, and the release of its GPU software
    (``layouts``: the operator-managed pools' MIG layouts)."""
    aks = stack.aks
    assert aks is not None
    spec = aks.cluster
    sized = []
    for pool in aks.gpu_pools:
        size = catalog.vm_size(pool.vm_size)
        assert size is not None, "plan_stack needs a validated stack"
        sized.append((pool, size, catalog.gpu(size.gpu)))
    # NVIDIA's chart is chosen from the NVIDIA pools alone; AMD pools get the AMD GPU Operator (docs/amd.md)
    nvidia = [pool for pool, _, gpu in sized if gpu.vendor == "nvidia"]
    operator_driver = any(p.driver == "operator" for p in nvidia)
    cr = operator_cr(p.advertiser for p in nvidia)
    operator_mig = any(isinstance(p.mig, OperatorManagedMig) for p in nvidia)
    chart = cluster_chart(operator_driver, operator_mig, dra=cr != CLUSTER_POLICY)
    pools = [pool_plan(stack, p, size, gpu, chart, operator_driver=operator_driver, cr=cr) for p, size, gpu in sized]
    nvidia_pools = [p for p in pools if p.vendor == "nvidia"]
    # the GPU Operator's migManager.config: one mig-parted config for the cluster
    mig_config = mig_parted_config(layouts) if layouts else None
    system_taints = (SYSTEM_POOL_TAINT,)
    pins = stack.release.model_dump()
    gpu_taints = [t for p in pools for t in p.taints]  # one NFD labels every GPU node: its worker tolerates them all
    software = for_aks(
        nvidia_pools,
        system_taints,
        mig_config,
        monitoring=aks.gpu_software.monitoring,
        dra_version=dra_driver_version(pins),
        gpu_taints=gpu_taints,
    )
    amd_pools = [p for p in pools if p.vendor == "amd"]
    amd_release = None
    if amd_pools:
        amd = amd_operator.for_aks(
            amd_pools,
            system_taints,
            driver_version=pins.get("amdgpu"),
            nfd=not (nvidia_pools and deploys_nfd(chart, software)),
            nfd_taints=gpu_taints,
            driver_image=aks.gpu_software.amd_driver_image,
            driver_image_secret=aks.gpu_software.amd_driver_image_secret,
        )
        amd_release = amd_operator.amd_chart_release(pins, aks.gpu_software, amd)
    name = cluster_name(stack)
    cluster = ClusterPlan(
        name=name,
        resource_group=f"rg-{name}",
        location=stack.region,
        kubernetes=stack.release.kubernetes,
        sku_tier=spec.sku_tier,
        system_pool=spec.system_pool,
        system_pool_taints=system_taints,
        network=spec.network,
        security=spec.security,
        network_dataplane="cilium" if spec.network.policy == "cilium" else None,
        egress=egress_plan(spec.network, spec.security),
        monitoring=monitoring_plan(spec.security, name),
        addons=cluster_addons(spec.security),
        image_cleaner_hours=IMAGE_CLEANER_INTERVAL_HOURS if spec.security.image_cleaner else None,
        system_pool_encryption_at_host=spec.security.encryption_at_host,
        autoscaler=spec.autoscaler_profile,
        tags=stack_tags(stack),
        gpu_chart=chart if nvidia_pools else None,
        mig_strategy=cluster_strategy(p.mig.strategy for p in pools if p.mig and p.mig.managed_by == "operator"),
        mig_parted_config=mig_config,
        gpu_software=(
            chart_release(chart, pins, aks.gpu_software, software, aks.gpu_software.namespace) if nvidia_pools else None
        ),
        operator_cr=cr if chart == GPU_OPERATOR_CHART and nvidia_pools else None,
        node_provisioning="Auto" if any(p.kind == "nap" for p in aks.gpu_pools) else "Manual",
        gpu_metrics=aks.gpu_software.monitoring,
        remediation=aks.remediation,
        amd_gpu_software=amd_release,
    )
    return cluster, tuple(pools)


def host_group_plan(stack: Stack, group: HostGroup, catalog: Catalog, cr: OperatorCr = CLUSTER_POLICY) -> HostGroupPlan:
    """A host group (``cr``: the custom resource of the stack's GPU Operator release)."""
    gpu = catalog.gpu(group.gpu_model) if group.gpu_model else None
    profile = stack.tuning_profile(group.tuning_profile)
    assert profile is not None, "plan_stack needs a validated stack"
    mig = None
    if group.mig is not None and group.gpus_per_host:
        mig = mig_plan("host", group.mig, group.gpus_per_host, config_name=group.mig.config_name)
    elif group.mig is not None:
        covers_all = any(g.gpus == "all" for g in group.mig.devices)
        mig = MigPlan(
            managed_by="host",
            config_name=group.mig.config_name,
            profiles=layout_profiles(group.mig),
            whole_gpus=0 if covers_all else None,
        )
    labels: dict[str, dict[str, str]] = {chart: {} for chart in CHART_PINS}
    workload: GpuWorkload | None = None
    vgpu = group.virtualization.vgpu if group.virtualization is not None else None
    if gpu is not None:
        # MIG-capable GPUs without a layout get all-disabled (what the mig role applies to them), so a stale label
        # cannot make the MIG manager split them; bare-metal groups have no sharing: the default device-plugin config.
        # A group whose GPUs go to VMs gets the GPU Operator's workload label instead (software_labels).
        workload = gpu_workload(group.virtualization)
        mig_config = mig.config_name if mig is not None else DISABLED_CONFIG if gpu.mig_capable else None
        vgpu_config = vgpu.device_config if vgpu is not None else None
        labels = {
            chart: software_labels(
                chart,
                mig_config=mig_config,
                device_plugin_config=DEFAULT_DEVICE_PLUGIN_CONFIG,
                workload=workload,
                vgpu_config=vgpu_config,
                advertiser=group.advertiser,
                operator_cr=cr,
            )
            for chart in CHART_PINS
        }
    amd_parts = (
        amd_partition_plan(gpu, group.amd_partitions, group.gpus_per_host)
        if gpu is not None and group.amd_partitions is not None
        else None
    )
    if gpu is not None and gpu.vendor == "amd":  # the AMD GPU Operator's labels, none of NVIDIA's charts
        dcm = amd_parts.profile if amd_parts is not None and amd_parts.managed_by == "operator" else None
        labels = {chart: {} for chart in CHART_PINS}
        labels[amd_operator.AMD_GPU_OPERATOR_CHART] = amd_operator.node_labels(group.advertiser, dcm)
    return HostGroupPlan(
        name=group.name,
        gpu_model=gpu.name if gpu else None,
        mig_capable=gpu.mig_capable if gpu else None,
        gpus_per_host=group.gpus_per_host,
        tuning_profile=group.tuning_profile,
        tuning=profile,
        mig=mig,
        node_labels=labels,
        gpu_workload=workload,
        virtualization=group.virtualization,
        advertiser=group.advertiser,
        nvlink_multi_node=gpu is not None and nvlink_multi_node(gpu, group.gpus_per_host),
        vendor=gpu.vendor if gpu is not None else None,
        amd_partitions=amd_parts,
    )


def baremetal_releases(
    pins: Mapping[str, str],
    host_groups: Sequence[HostGroupPlan],
    mig_config: dict[str, Any] | None,
    *,
    driver_preinstalled: bool = True,
    toolkit_preinstalled: bool = True,
) -> dict[str, ChartRelease]:
    """The release of each chart ``ansible/playbooks/kubernetes.yml`` can install on a bare-metal cluster, from the
    charts' own repositories, each in the namespace named as the chart (the roles' defaults); driver and toolkit
    come from the host roles unless a flag says otherwise. With AMD host groups and the stack's
    ``release.amd_gpu_operator``, also the AMD GPU Operator's (in its default namespace, kube-amd-gpu), which brings its
    own NFD only where no NVIDIA host group is (the GPU Operator's NFD, the default chart's, then labels them all)."""
    software = for_baremetal(
        host_groups,
        mig_config,
        driver_preinstalled=driver_preinstalled,
        toolkit_preinstalled=toolkit_preinstalled,
        dra_version=dra_driver_version(pins),
    )
    releases = {chart: chart_release(chart, pins, GpuSoftware(), software, None) for chart in CHART_PINS}
    amd_groups = [g for g in host_groups if g.vendor == "amd"]
    if amd_groups and pins.get(amd_operator.AMD_RELEASE_PIN):
        amd = amd_operator.for_baremetal(
            amd_groups,
            driver_version=pins.get("amdgpu"),
            nfd=not any(g.vendor == "nvidia" for g in host_groups),
        )
        releases[amd_operator.AMD_GPU_OPERATOR_CHART] = amd_operator.amd_chart_release(pins, GpuSoftware(), amd)
    return releases


def baremetal_plan(stack: Stack, host_groups: tuple[HostGroupPlan, ...], layouts: list[NamedLayout]) -> BaremetalPlan:
    """The bare-metal side of a stack (``layouts``: its host groups' MIG layouts)."""
    bm = stack.baremetal
    assert bm is not None
    mig_config = mig_parted_config(layouts) if layouts else None
    return BaremetalPlan(
        inventory=bm.inventory,
        rollout=bm.rollout,
        mig_parted_config=mig_config,
        releases=baremetal_releases(stack.release.model_dump(), host_groups, mig_config),
        operator_cr=operator_cr(g.advertiser for g in host_groups if g.gpu_model is not None and g.vendor != "amd"),
        engine=bm.engine,
        hosts=tuple(bm.hosts),
        metal3=bm.metal3,
        converge=bm.converge,
        remediation=bm.remediation,
        dcgm_diag_level=diag_level(stack.stage, bm.verify.dcgm_diag_level),
        canaries=tuple(bm.verify.canaries),
    )


def baremetal_operator_cr(stack: Stack, catalog: Catalog) -> OperatorCr:
    """The custom resource of a bare-metal stack's GPU Operator: from its NVIDIA GPU host groups' advertisers."""
    assert stack.baremetal is not None
    return operator_cr(
        g.advertiser
        for g in stack.baremetal.host_groups
        if g.gpu_model is not None and (gpu := catalog.find_gpu(g.gpu_model)) is not None and gpu.vendor != "amd"
    )


def plan_stack(stack: Stack, catalog: Catalog) -> StackPlan:
    """Resolve a *valid* stack (see :func:`gpufleet.spec.load.load_stack`) against the catalog."""
    pool_layouts, host_layouts = stack_layouts(stack, catalog)
    cluster, pools = cluster_plan(stack, catalog, pool_layouts) if stack.aks is not None else (None, ())
    host_groups: tuple[HostGroupPlan, ...] = ()
    baremetal = None
    if stack.baremetal is not None:
        cr = baremetal_operator_cr(stack, catalog)
        host_groups = tuple(host_group_plan(stack, g, catalog, cr) for g in stack.baremetal.host_groups)
        baremetal = baremetal_plan(stack, host_groups, host_layouts)
    return StackPlan(
        stack=stack.name,
        stage=stack.stage,
        region=stack.region,
        release=stack.release.model_dump(exclude_none=True),
        cluster=cluster,
        pools=pools,
        baremetal=baremetal,
        host_groups=host_groups,
        teams=tuple(stack.teams),
    )
