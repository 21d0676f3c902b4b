"""The release table: which Kubernetes minors, GPU Operator releases, component versions and NVIDIA driver branches
go together, and until when each is supported (releases.yaml beside this module, every fact with its source).

This module types and indexes the facts and answers the questions the release rule asks (is this minor past its end
of life, does AKS offer it, which driver branches does this operator support today); the rule itself, which turns
the answers into errors at a stack's ``release`` keys, is :func:`gpufleet.spec.rules.check_release`.
"""

from __future__ import annotations

import datetime as _dt
import re
from functools import cached_property, lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog import read_catalog_yaml

_KUBE_RE = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
# The pins a GPU Operator release fixes, with the words a message uses for each (the keys of gpufleet:release).
COMPONENT_PINS: dict[str, str] = {
    "device_plugin": "device plugin",
    "container_toolkit": "container toolkit",
    "mig_parted": "MIG manager (mig-parted)",
    "dra_driver": "DRA driver",
    "nfd": "Node Feature Discovery",
}


def kube_version(text: str) -> tuple[int, int, int | None]:
    """``"1.36"`` -> ``(1, 36, None)``, ``"1.34.2"`` -> ``(1, 34, 2)``; no patch stands for the minor's latest."""
    m = _KUBE_RE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a Kubernetes version such as 1.36 or 1.34.2")
    return int(m[1]), int(m[2]), None if m[3] is None else int(m[3])


def kube_minor(text: str) -> str:
    """The minor of a Kubernetes version: ``"1.34.2"`` -> ``"1.34"``."""
    major, minor, _ = kube_version(text)
    return f"{major}.{minor}"


def kube_at_least(version: str, minimum: str) -> bool:
    """Whether ``version`` is ``minimum`` or later. A version without a patch stands for its minor's latest patch, so
    ``1.34`` meets ``1.34.2``; ``1.34.1`` does not."""
    have, need = kube_version(version), kube_version(minimum)
    if have[:2] != need[:2]:
        return have[:2] > need[:2]
    return have[2] is None or need[2] is None or have[2] >= need[2]


def same_version(a: str, b: str) -> bool:
    """Release versions compare without their ``v`` (the NFD chart writes ``0.19.0``, its image ``v0.19.0``)."""
    return a.strip().removeprefix("v") == b.strip().removeprefix("v")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MinimumKubernetes(_Frozen):
    version: str
    reason: str
    source: str


class KubernetesMinor(_Frozen):
    """An upstream Kubernetes minor: its patch releases end on ``end_of_life``."""

    version: str
    end_of_life: _dt.date
    source: str


class AksVersion(_Frozen):
    """A Kubernetes minor on AKS: offered from ``ga`` (the first day of the month AKS names) until ``end_of_life``."""

    kubernetes: str
    ga: _dt.date
    end_of_life: _dt.date
    lts_end_of_life: _dt.date | None = Field(default=None, description="with the LTS plan, which gpufleet does not set")


class AksCalendar(_Frozen):
    source: str
    regions: str = Field(description="what is known of the versions per region (AKS publishes no per-region list)")
    versions: tuple[AksVersion, ...]


class DriverBranch(_Frozen):
    branch: str
    designation: Literal["long-term support", "production", "new feature"]
    end_of_life: _dt.date
    source: str


class KubernetesRange(_Frozen):
    min: str
    max: str

    def __str__(self) -> str:
        return f"{self.min}-{self.max}"


class Components(_Frozen):
    """The version of each component a GPU Operator release ships."""

    device_plugin: str
    container_toolkit: str
    mig_parted: str
    dra_driver: str
    nfd: str
    driver_manager: str
    dcgm: str
    dcgm_exporter: str
    gpu_feature_discovery: str


class GpuClusterNeeds(_Frozen):
    """What the operator's GPUCluster (DRA) workflow needs beyond the operator itself."""

    min_kubernetes: str
    min_driver_branch: str


class GpuOperatorRelease(_Frozen):
    version: str
    kubernetes: KubernetesRange
    driver_branches: tuple[str, ...] = Field(description="the branches of NVIDIA's component matrix for it")
    default_driver: str
    components: Components
    gpu_cluster: GpuClusterNeeds | None = None
    source: str

    def supports_kubernetes(self, version: str) -> bool:
        minor = kube_version(version)[:2]
        return kube_version(self.kubernetes.min)[:2] <= minor <= kube_version(self.kubernetes.max)[:2]


class AmdGpuOperatorRelease(_Frozen):
    """An AMD GPU Operator chart release: the Kubernetes it supports, the NFD it carries, and the floor of its DRA
    driver (draDriver)."""

    version: str
    kubernetes: KubernetesRange
    nfd: str
    dra_min_kubernetes: str
    source: str

    def supports_kubernetes(self, version: str) -> bool:
        minor = kube_version(version)[:2]
        return kube_version(self.kubernetes.min)[:2] <= minor <= kube_version(self.kubernetes.max)[:2]


class DevicePluginRelease(_Frozen):
    version: str
    min_kubernetes: str
    nfd: str
    source: str


class DraDriverRelease(_Frozen):
    version: str
    min_kubernetes: str
    min_driver_branch: str
    source: str


class KueueRelease(_Frozen):
    """The Kueue release gpufleet writes queue objects for (it installs no Kueue): its APIs."""

    version: str
    min_kubernetes: str
    api: str  # kueue.x-k8s.io/<version>: ResourceFlavor, ClusterQueue, LocalQueue
    config_api: str  # config.kueue.x-k8s.io/<version>: the Configuration
    source: str


class Operator(_Frozen):
    version: str
    api: str  # <group>/<version> of the custom resources gpufleet writes for it


class NodeRemediationRelease(_Frozen):
    """The engine that remediates Kubernetes nodes, whose configuration gpufleet writes (it installs none of it)."""

    node_problem_detector: str
    node_healthcheck: Operator
    self_node_remediation: Operator
    fence_agents_remediation: Operator
    namespace: str  # where the operators run, and the remediation templates live
    source: str


class ReleaseTable(_Frozen):
    minimum_kubernetes: MinimumKubernetes
    kubernetes: tuple[KubernetesMinor, ...]
    aks: AksCalendar
    driver_branches: tuple[DriverBranch, ...]
    gpu_operator: tuple[GpuOperatorRelease, ...]
    amd_gpu_operator: tuple[AmdGpuOperatorRelease, ...] = ()
    device_plugin: tuple[DevicePluginRelease, ...]
    dra_driver: tuple[DraDriverRelease, ...]
    kueue: KueueRelease
    node_remediation: NodeRemediationRelease

    @model_validator(mode="after")
    def _consistent(self) -> ReleaseTable:
        minors = [m.version for m in self.kubernetes]
        if minors != sorted(set(minors), key=kube_version):
            raise ValueError(f"kubernetes: minors must be unique and in order, not {', '.join(minors)}")
        for aks in self.aks.versions:
            if aks.kubernetes not in minors:
                raise ValueError(f"aks: Kubernetes {aks.kubernetes} is not a minor of the kubernetes list")
        branches = {b.branch for b in self.driver_branches}
        for op in self.gpu_operator:
            unknown = sorted(set(op.driver_branches) - branches)
            if unknown:
                raise ValueError(f"GPU Operator {op.version}: driver branches {', '.join(unknown)} have no lifecycle")
            for name, found in (
                ("device_plugin", self.find_device_plugin(op.components.device_plugin)),
                ("dra_driver", self.find_dra_driver(op.components.dra_driver)),
            ):
                if found is None:
                    raise ValueError(f"GPU Operator {op.version}: its {name} is not in the {name} list")
            plugin = self.find_device_plugin(op.components.device_plugin)
            if plugin is not None and not same_version(plugin.nfd, op.components.nfd):
                raise ValueError(f"GPU Operator {op.version}: NFD {op.components.nfd}, its device plugin {plugin.nfd}")
        return self

    # -- lookups -------------------------------------------------------------------------------------------
    @cached_property
    def _minors(self) -> dict[str, KubernetesMinor]:
        return {m.version: m for m in self.kubernetes}

    def minor(self, version: str) -> KubernetesMinor | None:
        """The table's entry for the minor of ``version`` (``1.36.4`` -> 1.36), or None."""
        return self._minors.get(kube_minor(version))

    def aks_version(self, version: str) -> AksVersion | None:
        minor = kube_minor(version)
        return next((a for a in self.aks.versions if a.kubernetes == minor), None)

    def aks_offered(self, today: _dt.date) -> list[str]:
        """The minors AKS offers on ``today``: GA and before their end of life."""
        return [a.kubernetes for a in self.aks.versions if a.ga <= today <= a.end_of_life]

    def driver_branch(self, branch: str) -> DriverBranch | None:
        return next((b for b in self.driver_branches if b.branch == branch), None)

    def find_gpu_operator(self, version: str) -> GpuOperatorRelease | None:
        return next((op for op in self.gpu_operator if same_version(op.version, version)), None)

    def find_amd_gpu_operator(self, version: str) -> AmdGpuOperatorRelease | None:
        return next((op for op in self.amd_gpu_operator if same_version(op.version, version)), None)

    def find_device_plugin(self, version: str) -> DevicePluginRelease | None:
        return next((p for p in self.device_plugin if same_version(p.version, version)), None)

    def find_dra_driver(self, version: str) -> DraDriverRelease | None:
        return next((d for d in self.dra_driver if same_version(d.version, version)), None)

    def branch_alive(self, branch: str, today: _dt.date) -> bool:
        """Whether NVIDIA still supports the branch on ``today`` (a branch without a lifecycle entry: no)."""
        entry = self.driver_branch(branch)
        return entry is not None and today <= entry.end_of_life

    def supported_branches(self, op: GpuOperatorRelease, today: _dt.date) -> list[str]:
        """The driver branches a stack may pin with ``op`` on ``today``: in its component matrix, not past their end
        of life, and new enough for the DRA driver it ships."""
        dra = self.find_dra_driver(op.components.dra_driver)
        floor = int(dra.min_driver_branch) if dra is not None else 0
        return [b for b in op.driver_branches if self.branch_alive(b, today) and int(b) >= floor]


@lru_cache(maxsize=1)
def load_releases() -> ReleaseTable:
    """The packaged release table, parsed once per process."""
    return ReleaseTable.model_validate(read_catalog_yaml("releases.yaml"))
