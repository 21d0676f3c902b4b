"""The Azure side of a stack: :class:`RegionalGpuCluster` (resource group, network and egress, Log Analytics, AKS
cluster with its system pool and the secure baseline, diagnostic setting), :class:`GpuPool` (one separate agent pool
per GPU pool: the SDK's typed ``AgentPool``, or the generic ARM resource at a newer API version, docs/kubernetes.md)
and :class:`NapPool` (a node auto-provisioning pool's Karpenter objects).

Only the system pool is inline in the ``ManagedCluster``: with GPU pools inline every edit puts all pools in
"Scaling", and mixing inline and separate pools breaks updates (pulumi-azure-native #4264, #2719). Enum-valued
inputs are converted through the SDK's own enums, so a value Azure would refuse fails here first.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_azure_native import containerservice as cs
from pulumi_azure_native import monitor, network, operationalinsights, resources

from gpufleet.azure.aks_api import AgentPoolProperties, PoolApi, agent_pool_properties
from gpufleet.kube.nap import nap_objects
from gpufleet.plan.model import ClusterPlan, PoolPlan


@dataclass(frozen=True)
class ClusterArgs:
    plan: ClusterPlan


class RegionalGpuCluster(pulumi.ComponentResource):
    """One region's AKS cluster: resource group, VNet + subnet (or the stack's existing subnet) with its egress (a NAT
    gateway, or the stack's route table), the Log Analytics workspace, the ``ManagedCluster`` with the system pool
    and the secure baseline of ``gpufleet:aks.cluster.security`` (as the plan decided it), and the cluster's
    diagnostic setting."""

    resource_group: resources.ResourceGroup
    subnet_id: pulumi.Output[str]
    cluster: cs.ManagedCluster
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: ClusterArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:azure:RegionalGpuCluster", name, None, opts)
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self)
        self.resource_group = resources.ResourceGroup(
            f"{name}-rg", resource_group_name=plan.resource_group, location=plan.location, tags=plan.tags, opts=child
        )
        nat_gateway_id, nat_ip = self._nat_gateway(name, plan, child)
        self.subnet_id = self._subnet(name, plan, child, nat_gateway_id)
        workspace_id = self._workspace(name, plan, child)
        security, scaler = plan.security, plan.autoscaler
        self.cluster = cs.ManagedCluster(
            name,
            resource_name_=name,
            resource_group_name=self.resource_group.name,
            location=plan.location,
            dns_prefix=name,
            kubernetes_version=plan.kubernetes,
            sku=cs.ManagedClusterSKUArgs(
                name=cs.ManagedClusterSKUName.BASE, tier=cs.ManagedClusterSKUTier(plan.sku_tier)
            ),
            identity=cs.ManagedClusterIdentityArgs(type=cs.ResourceIdentityType.SYSTEM_ASSIGNED),
            agent_pool_profiles=[system_pool_profile(plan, self.subnet_id)],
            enable_rbac=True,
            aad_profile=cs.ManagedClusterAADProfileArgs(managed=True, enable_azure_rbac=True)
            if security.entra_rbac
            else None,
            disable_local_accounts=not security.local_accounts,
            api_server_access_profile=api_server_profile(plan, nat_ip),
            oidc_issuer_profile=cs.ManagedClusterOIDCIssuerProfileArgs(enabled=security.oidc_issuer),
            security_profile=security_profile(plan, workspace_id),
            addon_profiles={
                a.name: cs.ManagedClusterAddonProfileArgs(enabled=a.enabled, config=dict(a.config) or None)
                for a in plan.addons
            },
            auto_upgrade_profile=cs.ManagedClusterAutoUpgradeProfileArgs(
                node_os_upgrade_channel=cs.NodeOSUpgradeChannel(security.node_os_upgrade_channel),
                upgrade_channel=cs.UpgradeChannel(security.cluster_upgrade_channel),
            ),
            auto_scaler_profile=cs.ManagedClusterPropertiesAutoScalerProfileArgs(
                expander=cs.Expander(scaler.expander),
                scan_interval=scaler.scan_interval,
                scale_down_delay_after_add=scaler.scale_down_delay_after_add,
                scale_down_unneeded_time=scaler.scale_down_unneeded_time,
                max_graceful_termination_sec=str(scaler.max_graceful_termination_seconds),
            ),
            network_profile=network_profile(plan),
            node_provisioning_profile=node_provisioning_profile(plan),
            tags=plan.tags,
            opts=child,
        )
        self._diagnostics(name, plan, workspace_id, child)
        # Entra ID clusters hand out exec-format kubeconfigs (kubelogin); others the plain user credential.
        credentials = cs.list_managed_cluster_user_credentials_output(
            resource_group_name=self.resource_group.name,
            resource_name=self.cluster.name,
            format="exec" if security.entra_rbac else None,
            opts=pulumi.InvokeOutputOptions(parent=self),
        )
        self.kubeconfig = pulumi.Output.secret(
            credentials.kubeconfigs.apply(lambda configs: base64.b64decode(configs[0].value).decode())
        )
        self.register_outputs({"cluster_id": self.cluster.id, "node_resource_group": self.cluster.node_resource_group})

    def _nat_gateway(
        self, name: str, plan: ClusterPlan, child: pulumi.ResourceOptions
    ) -> tuple[pulumi.Input[str] | None, pulumi.Output[str | None] | None]:
        """The NAT gateway the subnet gets (the one the program creates, or the stack's), and the created one's
        public address (None for the stack's own)."""
        egress = plan.egress
        if not egress.create_nat_gateway:
            return egress.nat_gateway_id, None
        address = network.PublicIPAddress(
            f"{name}-egress-ip",
            public_ip_address_name=f"pip-{name}-egress",
            resource_group_name=self.resource_group.name,
            location=plan.location,
            sku=network.PublicIPAddressSkuArgs(
                name=network.PublicIPAddressSkuName.STANDARD, tier=network.PublicIPAddressSkuTier.REGIONAL
            ),
            public_ip_allocation_method=network.IPAllocationMethod.STATIC,
            tags=plan.tags,
            opts=child,
        )
        gateway = network.NatGateway(
            f"{name}-nat",
            nat_gateway_name=f"ng-{name}",
            resource_group_name=self.resource_group.name,
            location=plan.location,
            sku=network.NatGatewaySkuArgs(name=network.NatGatewaySkuName.STANDARD),
            public_ip_addresses=[network.SubResourceArgs(id=address.id)],
            tags=plan.tags,
            opts=child,
        )
        return gateway.id, address.ip_address

    def _subnet(
        self, name: str, plan: ClusterPlan, child: pulumi.ResourceOptions, nat_gateway_id: pulumi.Input[str] | None
    ) -> pulumi.Output[str]:
        net, egress = plan.network, plan.egress
        if net.existing_subnet_id:
            return pulumi.Output.from_input(net.existing_subnet_id)
        assert net.vnet_cidr is not None and net.subnet_cidr is not None
        vnet = network.VirtualNetwork(
            f"{name}-vnet",
            virtual_network_name=f"vnet-{name}",
            resource_group_name=self.resource_group.name,
            location=plan.location,
            address_space=network.AddressSpaceArgs(address_prefixes=[net.vnet_cidr]),
            tags=plan.tags,
            # the subnet is its own resource: without this, an update of the VNet would remove it
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(ignore_changes=["subnets"])),
        )
        attach = egress.attach_to_subnet
        subnet = network.Subnet(
            f"{name}-nodes",
            subnet_name="nodes",
            resource_group_name=self.resource_group.name,
            virtual_network_name=vnet.name,
            address_prefix=net.subnet_cidr,
            nat_gateway=network.SubResourceArgs(id=nat_gateway_id) if attach and nat_gateway_id is not None else None,
            route_table=network.RouteTableArgs(id=egress.route_table_id) if attach and egress.route_table_id else None,
            opts=child,
        )
        return subnet.id

    def _workspace(self, name: str, plan: ClusterPlan, child: pulumi.ResourceOptions) -> pulumi.Output[str] | None:
        """The Log Analytics workspace for logs and Defender: the stack's, or one created here; None without one."""
        monitoring = plan.monitoring
        if monitoring is None:
            return None
        if monitoring.workspace_id is not None:
            return pulumi.Output.from_input(monitoring.workspace_id)
        workspace = operationalinsights.Workspace(
            f"{name}-logs",
            workspace_name=monitoring.workspace_name,
            resource_group_name=self.resource_group.name,
            location=plan.location,
            sku=operationalinsights.WorkspaceSkuArgs(name=operationalinsights.WorkspaceSkuNameEnum.PER_GB2018),
            retention_in_days=monitoring.retention_days,
            tags=plan.tags,
            opts=child,
        )
        return workspace.id

    def _diagnostics(
        self, name: str, plan: ClusterPlan, workspace_id: pulumi.Output[str] | None, child: pulumi.ResourceOptions
    ) -> None:
        """The cluster's diagnostic setting: the plan's log and metric categories to the workspace."""
        monitoring = plan.monitoring
        if monitoring is None or workspace_id is None:
            return
        if not monitoring.log_categories and not monitoring.metric_categories:
            return
        monitor.DiagnosticSetting(
            f"{name}-diagnostics",
            name="gpufleet",
            resource_uri=self.cluster.id,
            workspace_id=workspace_id,
            log_analytics_destination_type="Dedicated",  # resource-specific tables (AKSAudit, AKSControlPlane...)
            logs=[monitor.DiagnosticsLogSettingsArgs(category=c, enabled=True) for c in monitoring.log_categories],
            metrics=[
                monitor.DiagnosticsMetricSettingsArgs(category=c, enabled=True) for c in monitoring.metric_categories
            ]
            or None,
            opts=child,
        )


def system_pool_profile(plan: ClusterPlan, subnet_id: pulumi.Input[str]) -> cs.ManagedClusterAgentPoolProfileArgs:
    """The system pool, inline in the cluster."""
    system = plan.system_pool
    return cs.ManagedClusterAgentPoolProfileArgs(
        name=system.name,
        mode=cs.AgentPoolMode.SYSTEM,
        type=cs.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
        os_type=cs.OSType.LINUX,
        os_sku=cs.OSSKU(system.os_sku),
        vm_size=system.vm_size,
        count=system.count,
        availability_zones=list(system.zones) or None,
        node_taints=list(plan.system_pool_taints),
        vnet_subnet_id=subnet_id,
        enable_node_public_ip=plan.security.node_public_ip,
        enable_encryption_at_host=plan.system_pool_encryption_at_host,
        orchestrator_version=plan.kubernetes,
    )


def api_server_profile(
    plan: ClusterPlan, nat_ip: pulumi.Output[str | None] | None
) -> cs.ManagedClusterAPIServerAccessProfileArgs | None:
    """Who reaches the API server: the authorized ranges (with the created NAT gateway's address, from which the
    nodes reach it), or nobody outside the network (private)."""
    api = plan.security.api_server
    if api.private:
        return cs.ManagedClusterAPIServerAccessProfileArgs(enable_private_cluster=True)
    if not api.authorized_ip_ranges:
        return None
    ranges: pulumi.Input[list[str]] = list(api.authorized_ip_ranges)
    if plan.egress.authorize_nat_ip and nat_ip is not None:
        ranges = nat_ip.apply(lambda ip: [*api.authorized_ip_ranges, *([f"{ip}/32"] if ip else [])])
    return cs.ManagedClusterAPIServerAccessProfileArgs(authorized_ip_ranges=ranges)


def security_profile(
    plan: ClusterPlan, workspace_id: pulumi.Output[str] | None
) -> cs.ManagedClusterSecurityProfileArgs:
    """Workload identity, Defender (reporting to the workspace) and Image Cleaner; each on or explicitly off."""
    monitoring = plan.monitoring
    defender = monitoring is not None and monitoring.defender and workspace_id is not None
    return cs.ManagedClusterSecurityProfileArgs(
        workload_identity=cs.ManagedClusterSecurityProfileWorkloadIdentityArgs(enabled=plan.security.workload_identity),
        defender=cs.ManagedClusterSecurityProfileDefenderArgs(
            log_analytics_workspace_resource_id=workspace_id if defender else None,
            security_monitoring=cs.ManagedClusterSecurityProfileDefenderSecurityMonitoringArgs(enabled=defender),
        ),
        image_cleaner=cs.ManagedClusterSecurityProfileImageCleanerArgs(
            enabled=plan.image_cleaner_hours is not None, interval_hours=plan.image_cleaner_hours
        ),
    )


def node_provisioning_profile(plan: ClusterPlan) -> cs.ManagedClusterNodeProvisioningProfileArgs | None:
    """Node auto-provisioning for the stack's ``kind: nap`` pools, without AKS's default Karpenter NodePools (the
    cluster gets the nodes the stack describes, no general-purpose ones besides)."""
    if plan.node_provisioning != "Auto":
        return None
    return cs.ManagedClusterNodeProvisioningProfileArgs(
        mode=cs.NodeProvisioningMode.AUTO, default_node_pools=cs.NodeProvisioningDefaultNodePools.NONE
    )


def network_profile(plan: ClusterPlan) -> cs.ContainerServiceNetworkProfileArgs:
    """Azure CNI (overlay by default), the network policy engine and its dataplane, and the egress."""
    net = plan.network
    return cs.ContainerServiceNetworkProfileArgs(
        network_plugin=cs.NetworkPlugin.AZURE,
        network_plugin_mode=cs.NetworkPluginMode(net.plugin_mode) if net.plugin_mode else None,
        network_policy=cs.NetworkPolicy(net.policy),
        network_dataplane=cs.NetworkDataplane(plan.network_dataplane) if plan.network_dataplane else None,
        outbound_type=cs.OutboundType(plan.egress.outbound_type),
        pod_cidr=net.pod_cidr,
        service_cidr=net.service_cidr,
        dns_service_ip=str(net.dns_service_ip),
        load_balancer_sku=cs.LoadBalancerSku.STANDARD,
    )


@dataclass(frozen=True)
class GpuPoolArgs:
    plan: PoolPlan
    cluster: RegionalGpuCluster


def sdk_agent_pool(
    name: str, props: AgentPoolProperties, cluster: RegionalGpuCluster, opts: pulumi.ResourceOptions
) -> cs.AgentPool:
    """A pool the SDK's API (2025-09-01) can describe, as its typed ``AgentPool``: enum inputs through the SDK's enums,
    so a value the SDK does not know fails here first."""
    assert props.gpu_profile.nvidia is None, "gpuProfile.nvidia needs the preview API (the generic ARM resource)"
    upgrade, kubelet, linux = props.upgrade_settings, props.kubelet_config, props.linux_os_config
    return cs.AgentPool(
        name,
        agent_pool_name=name,
        resource_group_name=cluster.resource_group.name,
        resource_name_=cluster.cluster.name,
        mode=cs.AgentPoolMode(props.mode),
        type=cs.AgentPoolType(props.type),
        os_type=cs.OSType(props.os_type),
        os_sku=cs.OSSKU(props.os_sku),
        vm_size=props.vm_size,
        orchestrator_version=props.orchestrator_version,
        count=props.count,
        enable_auto_scaling=props.enable_auto_scaling,
        min_count=props.min_count,
        max_count=props.max_count,
        availability_zones=list(props.availability_zones) if props.availability_zones else None,
        node_taints=list(props.node_taints),
        node_labels=dict(props.node_labels),
        gpu_profile=cs.GPUProfileArgs(driver=cs.GPUDriver(props.gpu_profile.driver)),
        gpu_instance_profile=cs.GPUInstanceProfile(props.gpu_instance_profile) if props.gpu_instance_profile else None,
        scale_set_priority=cs.ScaleSetPriority(props.scale_set_priority),
        spot_max_price=props.spot_max_price,
        scale_set_eviction_policy=cs.ScaleSetEvictionPolicy(props.scale_set_eviction_policy)
        if props.scale_set_eviction_policy
        else None,
        kubelet_config=cs.KubeletConfigArgs(
            cpu_manager_policy=kubelet.cpu_manager_policy, topology_manager_policy=kubelet.topology_manager_policy
        )
        if kubelet
        else None,
        linux_os_config=cs.LinuxOSConfigArgs(transparent_huge_page_enabled=linux.transparent_huge_page_enabled)
        if linux
        else None,
        upgrade_settings=cs.AgentPoolUpgradeSettingsArgs(
            max_surge=upgrade.max_surge,
            max_unavailable=upgrade.max_unavailable,
            drain_timeout_in_minutes=upgrade.drain_timeout_in_minutes,
        ),
        vnet_subnet_id=cluster.subnet_id,
        enable_node_public_ip=props.enable_node_public_ip,
        enable_encryption_at_host=props.enable_encryption_at_host,
        tags=dict(props.tags),
        opts=opts,
    )


def arm_agent_pool(
    name: str, props: AgentPoolProperties, api: PoolApi, cluster: RegionalGpuCluster, opts: pulumi.ResourceOptions
) -> resources.Resource:
    """A pool that needs a newer AKS API than the SDK's, as the provider's generic ARM resource at that version: the
    typed model's ``properties`` (gpufleet.azure.aks_api), under the cluster (``managedClusters/<name>/agentPools``)."""
    return resources.Resource(
        name,
        resource_name_=name,
        resource_group_name=cluster.resource_group.name,
        resource_provider_namespace="Microsoft.ContainerService",
        parent_resource_path=cluster.cluster.name.apply(lambda cluster_name: f"managedClusters/{cluster_name}"),
        resource_type="agentPools",
        api_version=api.version,
        properties=props.to_arm(vnet_subnet_id=cluster.subnet_id),
        opts=opts,
    )


class GpuPool(pulumi.ComponentResource):
    """A GPU node pool as a separate agent pool: the SDK's typed ``AgentPool`` when its API has every field the pool
    needs, else the generic ARM resource at the API version the plan names (``PoolPlan.api``). Its AKS name carries a
    suffix of its immutable fields (:func:`gpufleet.azure.aks.aks_pool_name`): changing one of them makes a new pool
    before the old one goes."""

    agent_pool: cs.AgentPool | resources.Resource

    def __init__(self, name: str, args: GpuPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:azure:GpuPool", name, None, opts)
        plan, cluster = args.plan, args.cluster
        assert plan.api is not None, "an AKS node pool's plan names its API"
        props = agent_pool_properties(plan)
        child = pulumi.ResourceOptions(parent=self)
        if plan.api.generic:
            self.agent_pool = arm_agent_pool(plan.aks_name, props, plan.api, cluster, child)
        else:
            self.agent_pool = sdk_agent_pool(plan.aks_name, props, cluster, child)
        self.register_outputs({"aks_name": self.agent_pool.name})


@dataclass(frozen=True)
class NapPoolArgs:
    plan: PoolPlan
    cluster: ClusterPlan
    provider: k8s.Provider


class NapPool(pulumi.ComponentResource):
    """A ``kind: nap`` pool: its AKSNodeClass and Karpenter NodePool (gpufleet.kube.nap) on the cluster, through the
    cluster's Kubernetes provider; AKS's node auto-provisioning creates the nodes."""

    objects: list[k8s.apiextensions.CustomResource]

    def __init__(self, name: str, args: NapPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:azure:NapPool", name, None, opts)
        on_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.objects = []
        for obj in nap_objects(args.plan, args.cluster):
            depends = pulumi.ResourceOptions(depends_on=list(self.objects))  # the NodePool names its node class
            self.objects.append(
                k8s.apiextensions.CustomResource(
                    f"{name}-{obj['kind'].lower()}",
                    api_version=obj["apiVersion"],
                    kind=obj["kind"],
                    metadata=obj["metadata"],
                    spec=obj["spec"],
                    opts=pulumi.ResourceOptions.merge(on_cluster, depends),
                )
            )
        self.register_outputs({"objects": [o.metadata["name"] for o in self.objects]})
