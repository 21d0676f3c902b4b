"""Dynamic Resource Allocation for a stack's DRA pools and host groups (``advertiser: dra``, docs/kubernetes.md).

Pure: from the plan and the catalog to Kubernetes objects as plain data, which ``gpufleet render`` writes and the
tests validate (kubernetes-validate for ``resource.k8s.io/v1``, the chart's CRD for ComputeDomain).

- **DeviceClasses** as the GPU Operator's GPUCluster installs them (gpu-operator v26.7.0 manifests/state-dra-driver/
  0400-0430_deviceclass-*.yaml; the same names and CEL as the DRA driver's own chart, kubernetes-sigs/
  dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/templates/deviceclass-*.yaml, except that the
  operator's ``gpu.nvidia.com`` has no ``extendedResourceName``: on a GPUCluster, a pod's ``nvidia.com/gpu`` request
  finds no GPU). gpufleet does not install them; the render shows them, and checks that each claim template names one.
- **ResourceClaimTemplates** gpufleet generates, one per GPU model of the DRA pools and host groups that has whole
  GPUs, one per MIG profile of their layouts, so that a pod names ``gpu-h100-nvl-94gb-1g12gb`` instead of writing CEL.
  Each selects on the attributes the driver publishes: ``productName`` (NVML's name, the catalog's ``product_names``)
  and, for MIG devices, ``profile`` (cmd/gpu-kubelet-plugin/deviceinfo.go, mig.go). Names are the catalog model and
  the profile: profile names collide across models (``1g.10gb`` on an H100 80GB and on an A100 40GB), and so do short
  model names (H100 SXM5 and H100 PCIe both have 80 GB).
- a **ComputeDomain** example per pool or host group whose NVLink spans nodes (GB200/GB300 NVL72), with the channel
  claim template it makes (``numNodes: 0``, as the CRD's description recommends with the driver's default
  ``IMEXDaemonsWithDNSNames``).
- **Kueue**'s ``resources.deviceClassMappings`` (in the Configuration API of the catalog's Kueue release,
  gpufleet/catalog/releases.yaml ``kueue``: config.kueue.x-k8s.io/v1beta2 of Kueue v0.19): Kueue
  charges a claim to the logical resource its DeviceClass maps to (the ResourceClaimTemplate path of its DRA support,
  site/content/en/docs/concepts/dynamic_resource_allocation.md), so whole GPUs go to ``nvidia.com/gpu`` and MIG devices
  to ``nvidia.com/mig``: a quota counts devices per class, not per profile.

The claim templates and ComputeDomains carry no namespace: they are namespaced objects, and each namespace whose pods
claim GPUs needs its own copy (``kubectl apply -n TEAM -f``); gpufleet does not know the teams' namespaces yet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.catalog import Catalog
    from gpufleet.plan.model import MigPlan, StackPlan

RESOURCE_API = "resource.k8s.io/v1"
COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
GPU_DRIVER = "gpu.nvidia.com"  # the driver name, and the domain of its devices' attributes
COMPUTE_DOMAIN_DRIVER = "compute-domain.nvidia.com"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpufleet"}
TARGETS_ANNOTATION = "gpufleet.io/targets"  # the pools and host groups whose GPUs a claim template selects

GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
VFIO_CLASS = "vfio.gpu.nvidia.com"
CD_DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
CD_CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
# Kueue's logical resource per DeviceClass a claim template uses (a qualified name, as Kueue requires of it).
KUEUE_RESOURCES = {GPU_CLASS: "nvidia.com/gpu", MIG_CLASS: "nvidia.com/mig"}


def _attr(driver: str, name: str) -> str:
    return f"device.attributes['{driver}'].{name}"


def _type_is(driver: str, kind: str) -> str:
    return f"device.driver == '{driver}' && {_attr(driver, 'type')} == '{kind}'"


@dataclass(frozen=True)
class DeviceClass:
    """A DeviceClass the GPUCluster installs (``compute_domains``: only with ComputeDomains on)."""

    name: str
    expression: str
    compute_domains: bool = False

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": RESOURCE_API,
            "kind": "DeviceClass",
            "metadata": {"name": self.name},
            "spec": {"selectors": [{"cel": {"expression": self.expression}}]},
        }


DEVICE_CLASSES = (
    DeviceClass(GPU_CLASS, _type_is(GPU_DRIVER, "gpu")),
    DeviceClass(MIG_CLASS, _type_is(GPU_DRIVER, "mig")),
    DeviceClass(VFIO_CLASS, _type_is(GPU_DRIVER, "vfio")),
    DeviceClass(CD_DAEMON_CLASS, _type_is(COMPUTE_DOMAIN_DRIVER, "daemon"), compute_domains=True),
    DeviceClass(
        CD_CHANNEL_CLASS,
        f"{_type_is(COMPUTE_DOMAIN_DRIVER, 'channel')} && {_attr(COMPUTE_DOMAIN_DRIVER, 'id')} == 0",
        compute_domains=True,
    ),
)


def _name_part(text: str) -> str:
    """``H100-NVL-94GB`` -> ``h100-nvl-94gb``; ``1g.10gb+me`` -> ``1g10gb-me``: a piece of a DNS subdomain name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower().replace(".", "")).strip("-")


def _quoted(values: Iterable[str]) -> str:
    return ", ".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values)


@dataclass(frozen=True)
class ClaimTemplate:
    """A ResourceClaimTemplate for one device of a GPU model: a whole GPU, or a MIG device of ``mig_profile``."""

    gpu_model: str
    product_names: tuple[str, ...]
    mig_profile: str | None = None
    targets: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        profile = f"-{_name_part(self.mig_profile)}" if self.mig_profile else ""
        return f"gpu-{_name_part(self.gpu_model)}{profile}"

    @property
    def device_class(self) -> str:
        return MIG_CLASS if self.mig_profile else GPU_CLASS

    @property
    def selector(self) -> str:
        """The CEL expression: the model's product name(s), and the MIG profile."""
        names = self.product_names
        product = _attr(GPU_DRIVER, "productName")
        expression = f"{product} == {_quoted(names)}" if len(names) == 1 else f"{product} in [{_quoted(names)}]"
        if self.mig_profile:
            expression += f" && {_attr(GPU_DRIVER, 'profile')} == {_quoted([self.mig_profile])}"
        return expression

    def manifest(self) -> dict[str, Any]:
        request = {
            "deviceClassName": self.device_class,
            "selectors": [{"cel": {"expression": self.selector}}],
            "allocationMode": "ExactCount",
            "count": 1,
        }
        return {
            "apiVersion": RESOURCE_API,
            "kind": "ResourceClaimTemplate",
            "metadata": {
                "name": self.name,
                "labels": dict(MANAGED_BY),
                "annotations": {TARGETS_ANNOTATION: ",".join(self.targets)},
            },
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
        }


@dataclass(frozen=True)
class ComputeDomainExample:
    """A ComputeDomain for a workload spanning the NVLink domain of ``target``'s nodes (one per workload in use)."""

    target: str

    @property
    def name(self) -> str:
        return f"{self.target}-nvlink"

    def manifest(self) -> dict[str, Any]:
        return {
            "apiVersion": COMPUTE_DOMAIN_API,
            "kind": "ComputeDomain",
            "metadata": {"name": self.name, "labels": dict(MANAGED_BY)},
            "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{self.name}-channel"}}},
        }


@dataclass(frozen=True)
class DraPlan:
    """What a stack's DRA targets need: the classes the GPUCluster installs, gpufleet's objects, Kueue's mappings."""

    targets: tuple[str, ...]
    claim_templates: tuple[ClaimTemplate, ...]
    compute_domains: tuple[ComputeDomainExample, ...] = ()
    device_classes: tuple[DeviceClass, ...] = ()

    def objects(self) -> list[dict[str, Any]]:
        """gpufleet's objects for each namespace whose pods claim GPUs: claim templates, ComputeDomain examples."""
        return [t.manifest() for t in self.claim_templates] + [c.manifest() for c in self.compute_domains]

    def device_class_objects(self) -> list[dict[str, Any]]:
        return [c.manifest() for c in self.device_classes]

    def kueue_mappings(self) -> list[dict[str, Any]]:
        """Kueue's ``resources.deviceClassMappings`` for the classes the claim templates use."""
        used = dict.fromkeys(t.device_class for t in self.claim_templates)
        return [{"name": KUEUE_RESOURCES[c], "deviceClassNames": [c]} for c in sorted(used)]

    def kueue_configuration(self) -> dict[str, Any]:
        """The part of Kueue's Configuration (its ``controller_manager_config.yaml``) to merge into yours."""
        from gpufleet.catalog.releases import load_releases

        return {
            "apiVersion": load_releases().kueue.config_api,
            "kind": "Configuration",
            "resources": {"deviceClassMappings": self.kueue_mappings()},
        }


def _templates_of(model: str, names: tuple[str, ...], mig: MigPlan | None) -> list[ClaimTemplate]:
    out = []
    if mig is None or mig.whole_gpus != 0:  # whole GPUs left (or maybe, where the GPU count is unknown)
        out.append(ClaimTemplate(model, names))
    if mig is not None:
        out += [ClaimTemplate(model, names, profile) for profile in mig.profiles]
    return out


def dra_plan(plan: StackPlan, catalog: Catalog) -> DraPlan | None:
    """The DRA objects of a stack's ``dra`` pools and host groups; None when it has none."""
    found: list[tuple[str, str, MigPlan | None, bool]] = [
        (p.name, p.gpu_model, p.mig, p.nvlink_multi_node) for p in plan.pools if p.advertiser == "dra"
    ]
    found += [
        (g.name, g.gpu_model, g.mig, g.nvlink_multi_node)
        for g in plan.host_groups
        if g.advertiser == "dra" and g.gpu_model is not None
    ]
    if not found:
        return None
    templates: dict[str, ClaimTemplate] = {}
    for target, model, mig, _ in found:
        for template in _templates_of(model, catalog.gpu(model).product_names, mig):
            seen = templates.get(template.name, template)
            templates[template.name] = ClaimTemplate(
                template.gpu_model, template.product_names, template.mig_profile, (*seen.targets, target)
            )
    domains = tuple(ComputeDomainExample(target) for target, _, _, multi in found if multi)
    return DraPlan(
        targets=tuple(target for target, _, _, _ in found),
        claim_templates=tuple(templates.values()),
        compute_domains=domains,
        device_classes=tuple(c for c in DEVICE_CLASSES if domains or not c.compute_domains),
    )
