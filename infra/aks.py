"""The Azure side of a stack: :class:`RegionalGpuCluster` (resource group, network, AKS cluster with its system pool)
and :class:`GpuPool` (one separate ``AgentPool`` per GPU pool).

Only the system pool is inline in the ``ManagedCluster``: with GPU pools inline every edit puts all pools in
"Scaling", and mixing inline and separate pools breaks updates (pulumi-azure-native #4264, #2719). Enum-valued
inputs are converted through the SDK's own enums, so a value Azure would refuse fails here first.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

import pulumi
from pulumi_azure_native import containerservice as cs
from pulumi_azure_native import network, resources

from gpufleet.plan import ClusterPlan, PoolPlan


@dataclass(frozen=True)
class ClusterArgs:
    plan: ClusterPlan


class RegionalGpuCluster(pulumi.ComponentResource):
    """One region's AKS cluster: resource group, VNet + subnet (or the stack's existing subnet), and the
    ``ManagedCluster`` with the system pool and the secure defaults of ``gpufleet:aks.cluster.security``."""

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
        self.subnet_id = self._subnet(name, plan, child)
        security, system, scaler, net = plan.security, plan.system_pool, plan.autoscaler, plan.network
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
            agent_pool_profiles=[
                cs.ManagedClusterAgentPoolProfileArgs(
                    name=system.name,
                    mode=cs.AgentPoolMode.SYSTEM,
                    type=cs.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
                    os_type=cs.OSType.LINUX,
                    os_sku=cs.OSSKU(system.os_sku),
                    vm_size=system.vm_size,
                    count=system.count,
                    availability_zones=list(system.zones) or None,
                    node_taints=list(plan.system_pool_taints),
                    vnet_subnet_id=self.subnet_id,
                    enable_node_public_ip=security.node_public_ip,
                    orchestrator_version=plan.kubernetes,
                )
            ],
            enable_rbac=True,
            aad_profile=cs.ManagedClusterAADProfileArgs(managed=True, enable_azure_rbac=True)
            if security.entra_rbac
            else None,
            disable_local_accounts=not security.local_accounts,
            oidc_issuer_profile=cs.ManagedClusterOIDCIssuerProfileArgs(enabled=security.oidc_issuer),
            security_profile=cs.ManagedClusterSecurityProfileArgs(
                workload_identity=cs.ManagedClusterSecurityProfileWorkloadIdentityArgs(
                    enabled=security.workload_identity
                )
            ),
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
            network_profile=cs.ContainerServiceNetworkProfileArgs(
                network_plugin=cs.NetworkPlugin.AZURE,
                network_plugin_mode=cs.NetworkPluginMode(net.plugin_mode) if net.plugin_mode else None,
                pod_cidr=net.pod_cidr,
                service_cidr=net.service_cidr,
                dns_service_ip=str(net.dns_service_ip),
                load_balancer_sku=cs.LoadBalancerSku.STANDARD,
            ),
            tags=plan.tags,
            opts=child,
        )
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

    def _subnet(self, name: str, plan: ClusterPlan, child: pulumi.ResourceOptions) -> pulumi.Output[str]:
        net = plan.network
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
        subnet = network.Subnet(
            f"{name}-nodes",
            subnet_name="nodes",
            resource_group_name=self.resource_group.name,
            virtual_network_name=vnet.name,
            address_prefix=net.subnet_cidr,
            opts=child,
        )
        return subnet.id


@dataclass(frozen=True)
class GpuPoolArgs:
    plan: PoolPlan
    cluster: RegionalGpuCluster


class GpuPool(pulumi.ComponentResource):
    """A GPU node pool as a separate ``AgentPool``. Its AKS name carries a suffix of its immutable fields
    (:func:`gpufleet.aks.aks_pool_name`): changing one of them makes a new pool before the old one goes."""

    agent_pool: cs.AgentPool

    def __init__(self, name: str, args: GpuPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:azure:GpuPool", name, None, opts)
        plan, cluster = args.plan, args.cluster
        tuning, upgrade, spot = plan.tuning, plan.upgrade, plan.spot_settings
        kubelet = None
        if plan.kubelet_config:
            kubelet = cs.KubeletConfigArgs(
                cpu_manager_policy=tuning.cpu_manager_policy, topology_manager_policy=tuning.topology_manager_policy
            )
        linux = None
        if tuning.transparent_hugepages is not None:
            linux = cs.LinuxOSConfigArgs(transparent_huge_page_enabled=tuning.transparent_hugepages)
        self.agent_pool = cs.AgentPool(
            plan.aks_name,
            agent_pool_name=plan.aks_name,
            resource_group_name=cluster.resource_group.name,
            resource_name_=cluster.cluster.name,
            mode=cs.AgentPoolMode.USER,
            type=cs.AgentPoolType.VIRTUAL_MACHINE_SCALE_SETS,
            os_type=cs.OSType.LINUX,
            os_sku=cs.OSSKU(plan.os_sku),
            vm_size=plan.vm_size,
            orchestrator_version=plan.kubernetes,
            count=plan.nodes.count,  # AKS requires it with autoscaling too
            enable_auto_scaling=plan.autoscaling,
            min_count=plan.nodes.min if plan.autoscaling else None,
            max_count=plan.nodes.max if plan.autoscaling else None,
            availability_zones=list(plan.zones) or None,
            node_taints=list(plan.taints),
            node_labels=dict(plan.labels),
            gpu_profile=cs.GPUProfileArgs(driver=cs.GPUDriver(plan.aks_gpu_driver)),
            gpu_instance_profile=cs.GPUInstanceProfile(plan.mig.gpu_instance_profile)
            if plan.mig and plan.mig.gpu_instance_profile
            else None,
            scale_set_priority=cs.ScaleSetPriority.SPOT if spot else cs.ScaleSetPriority.REGULAR,
            spot_max_price=spot.max_price if spot else None,
            scale_set_eviction_policy=cs.ScaleSetEvictionPolicy(spot.eviction_policy) if spot else None,
            kubelet_config=kubelet,
            linux_os_config=linux,
            upgrade_settings=cs.AgentPoolUpgradeSettingsArgs(
                max_surge=upgrade.max_surge,
                max_unavailable=upgrade.max_unavailable,
                drain_timeout_in_minutes=upgrade.drain_timeout_minutes,
            ),
            vnet_subnet_id=cluster.subnet_id,
            enable_node_public_ip=plan.node_public_ip,
            tags=plan.tags,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.register_outputs({"aks_name": self.agent_pool.name})
