"""What Azure, AKS and the charts would check, applied to the resources the program registered under mocks.

Each check returns a list of problems (empty: the rule holds). The program's tests run every check on every
example stack; ``test_checks.py`` breaks each rule on purpose and expects its check to report it.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

import kubernetes_validate
from pulumi_azure_native import containerservice as cs

from gpufleet.catalog import Catalog
from gpufleet.kube.gpu_software import chart_version
from gpufleet.kube.labels import (
    AKS_SPOT_LABEL,
    AKS_SPOT_TAINT,
    DEPLOY_DRIVER_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    MIG_CONFIG_LABEL,
    POOL_LABEL,
)
from gpufleet.spec.models import AksManagedMig, OperatorManagedMig, Stack
from tests.aks_api_spec import definitions, field_definition
from tests.charts import PINNED, chart_keys, unknown_keys
from tests.infra.harness import NAT_IP, Registered

CLUSTER = "azure-native:containerservice:ManagedCluster"
AGENT_POOL = "azure-native:containerservice:AgentPool"
ARM_RESOURCE = "azure-native:resources:Resource"  # the generic ARM resource, at an explicit API version
SUBNET = "azure-native:network:Subnet"
NAT_GATEWAY = "azure-native:network:NatGateway"
PUBLIC_IP = "azure-native:network:PublicIPAddress"
WORKSPACE = "azure-native:operationalinsights:Workspace"
DIAGNOSTIC_SETTING = "azure-native:monitor:DiagnosticSetting"
RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
K8S_PROVIDER = "pulumi:providers:kubernetes"
KUBERNETES_VERSION = "1.33"  # the schema version ConfigMaps and Namespaces are validated against

# AKS Linux node pools: 1-12 lowercase letters and digits, starting with a letter.
AKS_POOL_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")
# Values AKS documents for fields the SDK types as plain strings (custom node configuration).
CPU_MANAGER_POLICIES = {"none", "static"}
TOPOLOGY_MANAGER_POLICIES = {"none", "best-effort", "restricted", "single-numa-node"}
THP_ENABLED = {"always", "madvise", "never"}

Allowed = type[Enum] | set[str]
POOL_ENUMS: dict[str, Allowed] = {
    "mode": cs.AgentPoolMode,
    "type": cs.AgentPoolType,
    "osType": cs.OSType,
    "osSKU": cs.OSSKU,
    "gpuInstanceProfile": cs.GPUInstanceProfile,
    "gpuProfile.driver": cs.GPUDriver,
    "scaleSetPriority": cs.ScaleSetPriority,
    "scaleSetEvictionPolicy": cs.ScaleSetEvictionPolicy,
    "kubeletConfig.cpuManagerPolicy": CPU_MANAGER_POLICIES,
    "kubeletConfig.topologyManagerPolicy": TOPOLOGY_MANAGER_POLICIES,
    "linuxOSConfig.transparentHugePageEnabled": THP_ENABLED,
}
CLUSTER_ENUMS: dict[str, Allowed] = {
    "sku.name": cs.ManagedClusterSKUName,
    "sku.tier": cs.ManagedClusterSKUTier,
    "identity.type": cs.ResourceIdentityType,
    "autoUpgradeProfile.nodeOSUpgradeChannel": cs.NodeOSUpgradeChannel,
    "autoUpgradeProfile.upgradeChannel": cs.UpgradeChannel,
    "autoScalerProfile.expander": cs.Expander,
    "networkProfile.networkPlugin": cs.NetworkPlugin,
    "networkProfile.networkPluginMode": cs.NetworkPluginMode,
    "networkProfile.loadBalancerSku": cs.LoadBalancerSku,
    "networkProfile.networkPolicy": cs.NetworkPolicy,
    "networkProfile.networkDataplane": cs.NetworkDataplane,
    "networkProfile.outboundType": cs.OutboundType,
}


# The enums of the properties the program sends through the generic ARM resource, as the AKS REST API publishes them
# at that resource's api version (tests/fixtures/aks-api); fields whose definitions are not vendored are held to the
# SDK's (API 2025-09-01).
ARM_POOL_ENUMS = ("osSKU", "gpuInstanceProfile", "gpuProfile.driver", "gpuProfile.nvidia.managementMode",
                  "gpuProfile.nvidia.migStrategy")  # fmt: skip


def agent_pools(resources: list[Registered]) -> list[Registered]:
    """Every agent pool the program registered, in one shape: the SDK's typed AgentPools as they are, and the generic
    ARM resources of type managedClusters/agentPools with their ``properties`` as the inputs (plus ``agentPoolName``,
    the resource's name, and ``apiVersion``)."""
    out = list(of_type(resources, AGENT_POOL))
    for r in of_type(resources, ARM_RESOURCE):
        i = r.inputs
        if (i.get("resourceProviderNamespace"), i.get("resourceType")) == ("Microsoft.ContainerService", "agentPools"):
            inputs = {
                **(i.get("properties") or {}),
                "agentPoolName": i.get("resourceName"),
                "apiVersion": i["apiVersion"],
            }
            out.append(Registered(r.type, r.name, inputs, r.provider))
    return out


def _arm_enum_problems(pool: Registered) -> list[str]:
    out = []
    version = pool.inputs["apiVersion"]
    for path in ARM_POOL_ENUMS:
        value = _get(pool.inputs, path)
        if value is None:
            continue
        if path.startswith("gpuProfile."):
            definition = field_definition(version, path)
        else:
            name = {"osSKU": "OSSKU", "gpuInstanceProfile": "GPUInstanceProfile"}[path]
            definition = definitions(version).get(name)
        allowed = (definition or {}).get("enum", [])
        if value not in allowed:
            out.append(f"AgentPool {pool.name} (API {version}): {path} {value!r} is not one of {allowed}")
    return out


def _get(obj: dict[str, Any], dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _allowed(allowed: Allowed) -> set[str]:
    return set(allowed) if isinstance(allowed, set) else {e.value for e in allowed}


def _enum_problems(where: str, inputs: dict[str, Any], enums: dict[str, Allowed]) -> list[str]:
    out = []
    for path, allowed in enums.items():
        value = _get(inputs, path)
        if value is not None and value not in _allowed(allowed):
            out.append(f"{where}: {path} {value!r} is not one of {sorted(_allowed(allowed))}")
    return out


def of_type(resources: list[Registered], typ: str) -> list[Registered]:
    return [r for r in resources if r.type == typ]


def the(resources: list[Registered], typ: str) -> Registered:
    (found,) = of_type(resources, typ)
    return found


NVIDIA_CHARTS = ("gpu-operator", "nvidia-device-plugin")


def nvidia_release(resources: list[Registered]) -> Registered | None:
    """NVIDIA's release of the stack (None: a cluster of AMD pools alone)."""
    found = [r for r in of_type(resources, RELEASE) if r.inputs.get("chart") in NVIDIA_CHARTS]
    assert len(found) <= 1, [r.name for r in found]
    return found[0] if found else None


def _nvidia_pools(resources: list[Registered]) -> list[Registered]:
    """The AgentPools of NVIDIA sizes (AMD pools' driver is the AMD GPU Operator's: tests/infra/test_amd_program.py)."""
    from gpufleet.catalog import load_catalog

    catalog = load_catalog()
    out = []
    for pool in agent_pools(resources):
        size = catalog.vm_size(str(_get(pool.inputs, "vmSize") or _get(pool.inputs, "properties.vmSize")))
        if size is None or catalog.gpu(size.gpu).vendor == "nvidia":
            out.append(pool)
    return out


def enum_problems(resources: list[Registered]) -> list[str]:
    """Every enum-valued input is one of the SDK's (or AKS's documented) values."""
    out = []
    for pool in agent_pools(resources):
        if pool.type == ARM_RESOURCE:
            out += _arm_enum_problems(pool)
            sdk_enums = {k: v for k, v in POOL_ENUMS.items() if k not in ARM_POOL_ENUMS}
            out += _enum_problems(f"AgentPool {pool.name}", pool.inputs, sdk_enums)
        else:
            out += _enum_problems(f"AgentPool {pool.name}", pool.inputs, POOL_ENUMS)
    for cluster in of_type(resources, CLUSTER):
        out += _enum_problems(f"ManagedCluster {cluster.name}", cluster.inputs, CLUSTER_ENUMS)
        for profile in cluster.inputs.get("agentPoolProfiles", []):
            out += _enum_problems(f"ManagedCluster {cluster.name} pool {profile.get('name')}", profile, POOL_ENUMS)
    return out


def pool_name_problems(resources: list[Registered]) -> list[str]:
    """AKS pool names are valid Linux pool names and unique in the cluster (the system pool included)."""
    names = [p.inputs.get("agentPoolName") for p in agent_pools(resources)]
    for cluster in of_type(resources, CLUSTER):
        names += [p.get("name") for p in cluster.inputs.get("agentPoolProfiles", [])]
    out = [f"pool name {n!r} is not an AKS Linux pool name" for n in names if not AKS_POOL_NAME.fullmatch(str(n))]
    out += [f"pool name {n!r} is used twice" for n in sorted({n for n in names if names.count(n) > 1})]
    return out


def count_problems(resources: list[Registered]) -> list[str]:
    """``count`` is always set (AKS requires it with autoscaling too) and lies within [min, max]; min/max only with
    autoscaling."""
    out = []
    for pool in agent_pools(resources):
        i, name = pool.inputs, pool.name
        if i.get("count") is None:
            out.append(f"AgentPool {name}: no count")
            continue
        if i.get("enableAutoScaling"):
            lo, hi = i.get("minCount"), i.get("maxCount")
            if lo is None or hi is None:
                out.append(f"AgentPool {name}: autoscaling without minCount/maxCount")
            elif not lo <= i["count"] <= hi:
                out.append(f"AgentPool {name}: count {i['count']} outside [{lo}, {hi}]")
        elif i.get("minCount") is not None or i.get("maxCount") is not None:
            out.append(f"AgentPool {name}: minCount/maxCount without autoscaling")
    return out


def inline_pool_problems(resources: list[Registered], catalog: Catalog) -> list[str]:
    """The ManagedCluster holds only the system pool inline, and it has no GPUs; GPU pools are AgentPools."""
    out = []
    for cluster in of_type(resources, CLUSTER):
        profiles = cluster.inputs.get("agentPoolProfiles", [])
        if len(profiles) != 1 or profiles[0].get("mode") != "System":
            names = [p.get("name") for p in profiles]
            out.append(f"ManagedCluster {cluster.name}: inline pools {names}, want only one System pool")
        for profile in profiles:
            size = catalog.vm_size(str(profile.get("vmSize")))
            if size is not None and size.gpu_count:
                out.append(f"ManagedCluster {cluster.name}: GPU pool {profile.get('name')} ({size.name}) is inline")
    return out


def spot_problems(resources: list[Registered]) -> list[str]:
    """Spot pools get no surge nodes and say how they are evicted; regular pools carry no spot settings."""
    out = []
    for pool in agent_pools(resources):
        i = pool.inputs
        if i.get("scaleSetPriority") == "Spot":
            if _get(i, "upgradeSettings.maxSurge") is not None:
                out.append(f"AgentPool {pool.name}: spot pool with upgradeSettings.maxSurge")
            if i.get("scaleSetEvictionPolicy") is None or i.get("spotMaxPrice") is None:
                out.append(f"AgentPool {pool.name}: spot pool without eviction policy or max price")
            if (
                AKS_SPOT_TAINT not in (i.get("nodeTaints") or [])
                or (i.get("nodeLabels") or {}).get(AKS_SPOT_LABEL) != "spot"
            ):
                out.append(
                    f"AgentPool {pool.name}: spot pool without AKS's own spot taint and label (a diff on every refresh)"
                )
        elif i.get("scaleSetEvictionPolicy") is not None or i.get("spotMaxPrice") is not None:
            out.append(f"AgentPool {pool.name}: spot settings on a regular pool")
    return out


def _pools_by_spec_name(resources: list[Registered]) -> dict[str, Registered]:
    return {p.inputs.get("tags", {}).get("gpufleet-pool"): p for p in agent_pools(resources)}


def taint_label_problems(resources: list[Registered], stack: Stack) -> list[str]:
    """Each pool has exactly the stack's taints, the stack's labels plus gpufleet's, and the MIG settings asked."""
    assert stack.aks is not None
    pools = _pools_by_spec_name(resources)
    out = []
    for spec in stack.aks.gpu_pools:
        if spec.kind == "nap":
            continue  # no agent pool: its NodePool carries the labels and taints (tests/infra/test_aks_preview.py)
        pool = pools.get(spec.name)
        if pool is None:
            out.append(f"pool {spec.name}: no AgentPool")
            continue
        taints, labels = pool.inputs.get("nodeTaints") or [], pool.inputs.get("nodeLabels") or {}
        expected = [*spec.taints, *([AKS_SPOT_TAINT] if spec.spot else [])]
        if taints != expected:
            out.append(f"pool {spec.name}: taints {taints}, the stack says {expected}")
        wanted = {**spec.labels, POOL_LABEL: spec.name}
        if isinstance(spec.mig, OperatorManagedMig):
            wanted[MIG_CONFIG_LABEL] = spec.mig.config_name
        if spec.sharing.mode != "none":
            wanted[DEVICE_PLUGIN_CONFIG_LABEL] = f"{spec.name}-{spec.sharing.mode}"
        missing = {k: v for k, v in wanted.items() if labels.get(k) != v}
        if missing:
            out.append(f"pool {spec.name}: labels {labels} lack {missing}")
        profile = spec.mig.profile if isinstance(spec.mig, AksManagedMig) else None
        if pool.inputs.get("gpuInstanceProfile") != profile:
            out.append(f"pool {spec.name}: gpuInstanceProfile {pool.inputs.get('gpuInstanceProfile')}, want {profile}")
    return out


def driver_problems(resources: list[Registered]) -> list[str]:
    """Who installs the driver agrees between the pools and the Helm values: the operator's driver (and toolkit)
    daemonsets are on exactly when a pool's AKS driver is None, and skip the pools where AKS installs it."""
    pools = sorted(_nvidia_pools(resources), key=lambda p: p.name)  # registration order is not fixed
    release = nvidia_release(resources)
    if release is None:
        return [f"NVIDIA pools {[p.name for p in pools]} and no NVIDIA release"] if pools else []
    values = release.inputs.get("values", {})
    operator_driver = [p for p in pools if _get(p.inputs, "gpuProfile.driver") == "None"]
    out = []
    if release.inputs.get("chart") == "nvidia-device-plugin":
        if operator_driver:
            out.append(f"pools {[p.name for p in operator_driver]} have no driver (AKS None) and no GPU Operator")
        return out
    for key in ("driver", "toolkit"):
        enabled = _get(values, f"{key}.enabled")
        if enabled is not bool(operator_driver):
            out.append(f"{key}.enabled is {enabled}; pools without an AKS driver: {[p.name for p in operator_driver]}")
    if operator_driver:
        for pool in pools:
            aks_driver = _get(pool.inputs, "gpuProfile.driver") != "None"
            skipped = (pool.inputs.get("nodeLabels") or {}).get(DEPLOY_DRIVER_LABEL) == "false"
            if aks_driver != skipped:
                out.append(f"AgentPool {pool.name}: AKS driver {aks_driver}, {DEPLOY_DRIVER_LABEL}=false {skipped}")
    return out


def helm_key_problems(resources: list[Registered]) -> list[str]:
    """Each release's values use only keys its chart has (its values.yaml and its subcharts')."""
    out = []
    for release in of_type(resources, RELEASE):
        chart = release.inputs.get("chart")
        if chart not in PINNED:
            out.append(f"no pinned chart {chart!r}")
            continue
        unknown = unknown_keys(release.inputs.get("values", {}), chart_keys(chart))
        out += [f"chart {chart} has no value {key}" for key in unknown]
    return out


def rendered_configmaps(release: Registered) -> list[dict[str, Any]]:
    """The ConfigMaps the chart creates from the values (the charts' templates: name and data as given; the
    device plugin chart names its map ``<release>-configs``)."""
    values, namespace = release.inputs.get("values", {}), release.inputs.get("namespace")
    found: list[tuple[str, Any]] = []
    if release.inputs.get("chart") == "gpu-operator":
        for key in ("migManager", "devicePlugin"):
            config = _get(values, f"{key}.config") or {}
            if config.get("create"):
                found.append((config.get("name"), config.get("data")))
    elif _get(values, "config.map"):
        found.append((f"{release.inputs.get('name')}-configs", _get(values, "config.map")))
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}
        for name, data in found
    ]


# What the API server requires of a ConfigMap's or a Namespace's name (the schema only says "string").
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def kubernetes_object_problems(resources: list[Registered]) -> list[str]:
    """The rendered ConfigMaps and the Namespace validate against the Kubernetes schema, and their names are what
    the API server accepts."""
    objects = [m for release in of_type(resources, RELEASE) for m in rendered_configmaps(release)]
    objects += [ns.inputs for ns in of_type(resources, NAMESPACE)]
    out = []
    for obj in objects:
        name = str(_get(obj, "metadata.name"))
        rule = DNS1123_LABEL if obj.get("kind") == "Namespace" else DNS1123_SUBDOMAIN
        if not rule.fullmatch(name) or len(name) > 253:
            out.append(f"{obj.get('kind')} {name}: not a valid name (DNS-1123)")
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            out.append(f"{obj.get('kind')} {_get(obj, 'metadata.name')}: {exc.message}")
    return out


def release_problems(resources: list[Registered], stack: Stack) -> list[str]:
    """The release is at the stack's pinned chart version, from the stack's repository, through a Kubernetes
    provider whose identity is the cluster (so a rotated kubeconfig does not replace it)."""
    assert stack.aks is not None
    settings = stack.aks.gpu_software
    repos = {
        "gpu-operator": settings.gpu_operator_repository,
        "nvidia-device-plugin": settings.device_plugin_repository,
        "gpu-operator-charts": settings.amd_gpu_operator_repository,
    }
    pins = {
        "gpu-operator-charts": stack.release.amd_gpu_operator,  # the AMD GPU Operator's pin
    }
    out = []
    providers = of_type(resources, K8S_PROVIDER)
    if len(providers) != 1 or not providers[0].inputs.get("clusterIdentifier"):
        out.append("no single Kubernetes provider with a clusterIdentifier")
    for release in of_type(resources, RELEASE):
        chart = str(release.inputs.get("chart"))
        pin = pins[chart] if chart in pins else chart_version(chart, stack.release.model_dump())
        if release.inputs.get("version") != pin:
            out.append(f"{chart} release version {release.inputs.get('version')}, pinned {pin}")
        if _get(release.inputs, "repositoryOpts.repo") != repos.get(chart):
            out.append(
                f"{chart} release repository {_get(release.inputs, 'repositoryOpts.repo')}, want {repos.get(chart)}"
            )
        if len(providers) == 1 and not (release.provider or "").rsplit("::", 1)[0].endswith(f"::{providers[0].name}"):
            out.append(f"the {chart} release uses provider {release.provider}, not {providers[0].name}")
    return out


# -- the AKS secure baseline, read from the resources as PSRule for Azure reads a cluster's ARM properties ---------

# Written out here, apart from gpufleet.azure.baseline, so that a wrong constant there fails against these.
AUDIT_LOGS = ({"kube-audit", "kube-audit-admin"}, "guard")  # PSRule: kube-audit or kube-audit-admin, and guard
PLATFORM_LOGS = ("cluster-autoscaler", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
CONTROLLED_OUTBOUND = {"userDefinedRouting", "managedNATGateway", "userAssignedNATGateway"}


def _enabled_categories(resources: list[Registered], cluster_id: str) -> tuple[set[str], set[str]]:
    """The log and metric categories the diagnostic settings of ``cluster_id`` send to a Log Analytics workspace."""
    logs: set[str] = set()
    metrics: set[str] = set()
    for setting in of_type(resources, DIAGNOSTIC_SETTING):
        i = setting.inputs
        if i.get("resourceUri") != cluster_id or not i.get("workspaceId"):
            continue
        logs |= {x["category"] for x in i.get("logs") or [] if x.get("enabled")}
        metrics |= {x["category"] for x in i.get("metrics") or [] if x.get("enabled")}
    return logs, metrics


def baseline_results(resources: list[Registered], cluster_id: str) -> dict[str, bool]:
    """Each baseline rule, passed (True) or not, judged on the registered ManagedCluster, AgentPools and diagnostic
    settings (``cluster_id``: the cluster's id as the mocks return it)."""
    c = the(resources, CLUSTER).inputs
    pools = [p.inputs for p in agent_pools(resources)] + list(c.get("agentPoolProfiles") or [])
    logs, metrics = _enabled_categories(resources, cluster_id)
    addons = c.get("addonProfiles") or {}
    return {
        "Azure.AKS.AuthorizedIPs": bool(
            _get(c, "apiServerAccessProfile.enablePrivateCluster")
            or _get(c, "apiServerAccessProfile.authorizedIPRanges")
        ),
        "Azure.AKS.NetworkPolicy": _get(c, "networkProfile.networkPolicy") in {"azure", "calico", "cilium"},
        "Azure.AKS.LocalAccounts": c.get("disableLocalAccounts") is True,
        "Azure.AKS.ManagedAAD": _get(c, "aadProfile.managed") is True,
        "Azure.AKS.AzureRBAC": _get(c, "aadProfile.enableAzureRBAC") is True,
        "Azure.AKS.DefenderProfile": _get(c, "securityProfile.defender.securityMonitoring.enabled") is True
        and bool(_get(c, "securityProfile.defender.logAnalyticsWorkspaceResourceId")),
        "Azure.AKS.AzurePolicyAddOn": _get(addons, "azurepolicy.enabled") is True,
        "Azure.AKS.AuditLogs": bool(logs & AUDIT_LOGS[0]) and AUDIT_LOGS[1] in logs,
        "Azure.AKS.PlatformLogs": set(PLATFORM_LOGS) <= logs and "AllMetrics" in metrics,
        "gpufleet.AKS.EgressControl": _get(c, "networkProfile.outboundType") in CONTROLLED_OUTBOUND,
        "gpufleet.AKS.ImageCleaner": _get(c, "securityProfile.imageCleaner.enabled") is True,
        "Azure.AKS.SecretStore": _get(addons, "azureKeyvaultSecretsProvider.enabled") is True,
        "Azure.AKS.SecretStoreRotation": _get(addons, "azureKeyvaultSecretsProvider.enabled") is True
        and _get(addons, "azureKeyvaultSecretsProvider.config.enableSecretRotation") == "true",
        "gpufleet.AKS.EncryptionAtHost": bool(pools) and all(p.get("enableEncryptionAtHost") is True for p in pools),
    }


def baseline_wiring_problems(resources: list[Registered], cluster_id: str) -> list[str]:
    """What the baseline's settings need around the cluster: Defender and the diagnostic setting report to the one
    workspace; a created NAT gateway (with its public IP) is the nodes' subnet's, and its address is authorized on
    the API server; Cilium policies run on the Cilium dataplane; a route table for userDefinedRouting."""
    c = the(resources, CLUSTER).inputs
    out = []
    workspaces = {f"/mock/{WORKSPACE}/{w.name}" for w in of_type(resources, WORKSPACE)}
    defender_ws = _get(c, "securityProfile.defender.logAnalyticsWorkspaceResourceId")
    diag_ws = {d.inputs.get("workspaceId") for d in of_type(resources, DIAGNOSTIC_SETTING)}
    if workspaces and ({defender_ws} | diag_ws) - {None} - workspaces:
        out.append(
            f"Defender ({defender_ws}) or diagnostics ({diag_ws}) report elsewhere than the workspace {workspaces}"
        )
    for d in of_type(resources, DIAGNOSTIC_SETTING):
        if d.inputs.get("resourceUri") != cluster_id:
            out.append(f"DiagnosticSetting {d.name}: resourceUri {d.inputs.get('resourceUri')}, not the cluster")
    if _get(c, "networkProfile.networkPolicy") == "cilium" and _get(c, "networkProfile.networkDataplane") != "cilium":
        out.append("networkPolicy cilium without networkDataplane cilium")
    outbound = _get(c, "networkProfile.outboundType")
    subnets = of_type(resources, SUBNET)
    gateways = of_type(resources, NAT_GATEWAY)
    if outbound == "userAssignedNATGateway" and subnets:
        attached = {_get(s.inputs, "natGateway.id") for s in subnets}
        if None in attached:
            out.append("userAssignedNATGateway, but the nodes' subnet has no NAT gateway")
        for gateway in gateways:
            ips = [_get(x, "id") for x in gateway.inputs.get("publicIpAddresses") or []]
            if f"/mock/{NAT_GATEWAY}/{gateway.name}" not in attached or not ips:
                out.append(f"NatGateway {gateway.name}: not the subnet's, or without a public IP")
    if outbound == "userDefinedRouting" and subnets and any(not _get(s.inputs, "routeTable.id") for s in subnets):
        out.append("userDefinedRouting, but the nodes' subnet has no route table")
    ranges = _get(c, "apiServerAccessProfile.authorizedIPRanges") or []
    if ranges and of_type(resources, PUBLIC_IP) and f"{NAT_IP}/32" not in ranges:
        out.append(f"the nodes' egress address {NAT_IP} is not among the API server's authorized ranges {ranges}")
    return out
