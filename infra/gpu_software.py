"""The cluster's GPU software as Helm releases: NVIDIA's (the GPU Operator, or the device plugin alone) and the AMD
GPU Operator's, each where the cluster has that vendor's pools.

The releases are the plan's (``ClusterPlan.gpu_software`` and ``ClusterPlan.amd_gpu_software``: chart, pinned version,
repository, namespace and its labels, values from :mod:`gpufleet.kube.gpu_software` and
:mod:`gpufleet.kube.amd_operator`, the code the bare-metal releases come from too). Both go the same way: a namespace
with the release's labels (privileged: the operands are), then the Helm release; the AMD one also gets its Device
Config Manager's ConfigMap, which its chart does not create (:func:`gpufleet.kube.amd_operator.dcm_config_map`), and
comes after NVIDIA's where both are (the cluster's one NFD, and its NodeFeatureRule CRD, may be NVIDIA's). The AMD
chart needs cert-manager where the operator installs the driver (KMM's webhook certificate): this program does not
install it; without it the release fails and rolls back, naming the missing Certificate and Issuer kinds.

The Kubernetes provider is built from the cluster's user credentials with ``cluster_identifier`` set to the cluster's
resource id, so a rotated kubeconfig updates the provider instead of replacing it (and every release with it); one
provider serves both releases.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.helm.v3 import Release, RepositoryOptsArgs

from gpufleet.kube.amd_operator import dcm_config_map
from gpufleet.kube.gpu_software import ChartRelease

RELEASE_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class GpuSoftwareArgs:
    release: ChartRelease | None  # NVIDIA's; None: the cluster has no NVIDIA pool
    kubeconfig: pulumi.Input[str]
    cluster_id: pulumi.Input[str]
    amd_release: ChartRelease | None = None  # the AMD GPU Operator's; None: no AMD pool


class GpuSoftware(pulumi.ComponentResource):
    """Namespaces and Helm releases on the cluster, through a provider of its own."""

    provider: k8s.Provider
    release: Release | None
    amd_release: Release | None

    def __init__(self, name: str, args: GpuSoftwareArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:kubernetes:GpuSoftware", name, None, opts)
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=args.kubeconfig,
            cluster_identifier=args.cluster_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        # NVIDIA's resources keep the names they always had (renaming one would replace the release)
        self.release = self._release(name, "ns", args.release, on_cluster) if args.release is not None else None
        self.amd_release = None
        if args.amd_release is not None:
            after = [self.release] if self.release is not None else []
            self.amd_release = self._release(name, "amd-ns", args.amd_release, on_cluster, after)
        outputs = {"release": self.release.status if self.release is not None else None}
        if self.amd_release is not None:
            outputs["amd_release"] = self.amd_release.status
        self.register_outputs(outputs)

    def _release(
        self,
        name: str,
        ns_name: str,
        spec: ChartRelease,
        on_cluster: pulumi.ResourceOptions,
        after: list[pulumi.Resource] | None = None,
    ) -> Release:
        namespace = k8s.core.v1.Namespace(
            f"{name}-{ns_name}",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=spec.namespace, labels=spec.namespace_labels),
            opts=on_cluster,
        )
        depends: list[pulumi.Resource] = [*(after or [])]
        config_map = dcm_config_map(spec)
        if config_map is not None:
            depends.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-amd-dcm",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=config_map["metadata"]["name"], namespace=namespace.metadata.name
                    ),
                    data=config_map["data"],
                    opts=on_cluster,
                )
            )
        return Release(
            f"{name}-{spec.chart}",
            name=spec.chart,
            chart=spec.chart,
            version=spec.version,
            repository_opts=RepositoryOptsArgs(repo=spec.repository),
            namespace=namespace.metadata.name,
            values=spec.values,
            atomic=True,  # a failed install or upgrade rolls back instead of leaving a half-applied release
            cleanup_on_fail=True,
            timeout=RELEASE_TIMEOUT_SECONDS,
            opts=pulumi.ResourceOptions.merge(on_cluster, pulumi.ResourceOptions(depends_on=depends)),
        )
