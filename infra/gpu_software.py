"""The cluster's GPU software: the NVIDIA GPU Operator, or the NVIDIA device plugin alone, as a Helm release.

The release is the plan's (``ClusterPlan.gpu_software``: chart, pinned version, repository, namespace and its
labels, values from :mod:`gpufleet.kube.gpu_software`, the code the bare-metal releases come from too). The Kubernetes
provider is built from the cluster's user credentials with ``cluster_identifier`` set to the cluster's resource id,
so a rotated kubeconfig updates the provider instead of replacing it (and every release with it).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
from pulumi_kubernetes.helm.v3 import Release, RepositoryOptsArgs

from gpufleet.kube.gpu_software import ChartRelease

RELEASE_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class GpuSoftwareArgs:
    release: ChartRelease
    kubeconfig: pulumi.Input[str]
    cluster_id: pulumi.Input[str]


class GpuSoftware(pulumi.ComponentResource):
    """Namespace and Helm release on the cluster, through a provider of its own."""

    provider: k8s.Provider
    release: Release

    def __init__(self, name: str, args: GpuSoftwareArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:kubernetes:GpuSoftware", name, None, opts)
        spec = args.release
        self.provider = k8s.Provider(
            f"{name}-k8s",
            kubeconfig=args.kubeconfig,
            cluster_identifier=args.cluster_id,
            opts=pulumi.ResourceOptions(parent=self),
        )
        on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=spec.namespace,
                labels=spec.namespace_labels,
            ),
            opts=on_cluster,
        )
        self.release = Release(
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
            opts=on_cluster,
        )
        self.register_outputs({"release": self.release.status})
