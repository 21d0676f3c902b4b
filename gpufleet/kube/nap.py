"""A ``kind: nap`` pool as the objects AKS node auto-provisioning (NAP, Karpenter) reads: an ``AKSNodeClass``
(karpenter.azure.com/v1beta1: image family, GPU driver mode, kubelet and OS settings, tags, encryption at host) and a
``NodePool`` (karpenter.sh/v1: the VM size, capacity type and zones as requirements, the pool's labels and taints,
a CPU limit of ``max_nodes`` VMs, and consolidation of empty nodes only). NAP itself is switched on in the cluster
(``nodeProvisioningProfile.mode: Auto``, :class:`gpufleet.plan.model.ClusterPlan` ``node_provisioning``).

The objects are plain data, as the API server takes them; tests check them against the provider's CRD schemas
(tests/fixtures/crds/karpenter/). Pure: no Pulumi, no Kubernetes client.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the plan's types, for type checking only
    from gpufleet.plan.model import ClusterPlan, PoolPlan

NODE_CLASS_API = "karpenter.azure.com/v1beta1"
NODE_POOL_API = "karpenter.sh/v1"
# Well-known labels of the AKS Karpenter provider (learn.microsoft.com/azure/aks/node-auto-provisioning-node-pools)
SKU_NAME_LABEL = "karpenter.azure.com/sku-name"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
OS_LABEL = "kubernetes.io/os"
# The AKSNodeClass tag that gives NAP nodes AKS's managed GPU stack (learn.microsoft.com/azure/aks/
# aks-managed-gpu-nodes, "Node Auto Provisioning node pool"; preview, like the managed stack itself).
MANAGED_GPU_TAG = "EnableManagedGPUExperience"
_TAINT = re.compile(r"(?P<key>[^=:]+)(=(?P<value>[^:]*))?:(?P<effect>\w+)")


def object_name(pool: PoolPlan) -> str:
    """The AKSNodeClass's and the NodePool's name: ``gpufleet-<pool>``."""
    return f"gpufleet-{pool.name}"


def node_class(pool: PoolPlan) -> dict[str, Any]:
    """The pool's AKSNodeClass: image family (the pool's os_sku), who installs the GPU driver (AKS: Driver; the GPU
    Operator: None), the kubelet policies and transparent hugepages of ``tuning``, tags, encryption at host."""
    spec: dict[str, Any] = {
        "imageFamily": pool.os_sku,
        "gpu": {"mode": "Driver" if pool.aks_gpu_driver == "Install" else "None"},
        "tags": {**pool.tags, **({MANAGED_GPU_TAG: "true"} if pool.gpu_management == "managed" else {})},
        "security": {"encryptionAtHost": pool.encryption_at_host},
    }
    if pool.kubelet_config:
        spec["kubelet"] = {
            "cpuManagerPolicy": pool.tuning.cpu_manager_policy,
            "topologyManagerPolicy": pool.tuning.topology_manager_policy,
        }
    if pool.tuning.transparent_hugepages is not None:
        spec["linuxOSConfig"] = {"transparentHugePageEnabled": pool.tuning.transparent_hugepages}
    return {"apiVersion": NODE_CLASS_API, "kind": "AKSNodeClass", "metadata": {"name": object_name(pool)}, "spec": spec}


def _taint(text: str) -> dict[str, str]:
    match = _TAINT.fullmatch(text)
    assert match is not None, f"not a taint: {text}"  # the spec validated it
    taint = {"key": match["key"], "effect": match["effect"]}
    if match["value"]:
        taint["value"] = match["value"]
    return taint


def _requirement(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def node_pool(pool: PoolPlan, cluster: ClusterPlan) -> dict[str, Any]:
    """The pool's Karpenter NodePool: nodes of its VM size only (spot or on-demand, in its zones), with its labels and
    taints; at most ``max_nodes`` of them (a CPU limit of that many VMs' vCPUs); a node is removed once empty for the
    cluster autoscaler profile's ``scale_down_unneeded_time`` (never to repack running GPU pods)."""
    requirements = [
        _requirement(SKU_NAME_LABEL, pool.vm_size),
        _requirement(CAPACITY_TYPE_LABEL, "spot" if pool.spot else "on-demand"),
        _requirement(OS_LABEL, "linux"),
    ]
    if pool.zones:
        requirements.append(_requirement(ZONE_LABEL, *(f"{cluster.location}-{z}" for z in pool.zones)))
    template_spec: dict[str, Any] = {
        "nodeClassRef": {"group": NODE_CLASS_API.split("/")[0], "kind": "AKSNodeClass", "name": object_name(pool)},
        "requirements": requirements,
    }
    if pool.taints:
        template_spec["taints"] = [_taint(t) for t in pool.taints]
    return {
        "apiVersion": NODE_POOL_API,
        "kind": "NodePool",
        "metadata": {"name": object_name(pool)},
        "spec": {
            "template": {"metadata": {"labels": dict(pool.labels)}, "spec": template_spec},
            "limits": {"cpu": str(pool.vcpus * pool.nodes.max)},
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": cluster.autoscaler.scale_down_unneeded_time,
            },
        },
    }


def nap_objects(pool: PoolPlan, cluster: ClusterPlan) -> list[dict[str, Any]]:
    """The AKSNodeClass and the NodePool of a ``kind: nap`` pool, in the order they are applied."""
    return [node_class(pool), node_pool(pool, cluster)]
