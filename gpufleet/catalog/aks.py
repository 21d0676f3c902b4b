"""The AKS API facts of the catalog (``aks.yaml``): the API versions gpufleet speaks, the node OS SKUs with the image
each gives per Kubernetes version, and the AgentPool fields only a newer API version has. Typed, loaded once."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog import read_catalog_yaml

ApiLevel = Literal["sdk", "stable", "preview"]
# azurelinux-2 is what os_sku AzureLinux gives before Kubernetes 1.32; Azure Linux 2.0 is retired, so no size
# supports it (azure_vm_sizes.yaml lists only the images below it).
NodeImage = Literal["ubuntu-22.04", "ubuntu-24.04", "azurelinux-2", "azurelinux-3"]


def minor(version: str) -> tuple[int, int]:
    """``"1.34"`` or ``"1.34.2"`` -> (1, 34)."""
    major, minor_, *_ = version.split(".")
    return int(major), int(minor_)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KubernetesRange(_Frozen):
    """Kubernetes minor versions, both ends included; an absent end is open."""

    min: str | None = None
    max: str | None = None

    def __contains__(self, version: str) -> bool:
        v = minor(version)
        return (self.min is None or minor(self.min) <= v) and (self.max is None or v <= minor(self.max))

    def __str__(self) -> str:
        if self.min and self.max:
            return f"Kubernetes {self.min} to {self.max}"
        if self.min:
            return f"Kubernetes {self.min} and later"
        return f"Kubernetes up to {self.max}" if self.max else "every Kubernetes version"


class OsImageRange(KubernetesRange):
    image: NodeImage


class OsSkuFacts(_Frozen):
    name: str
    images: tuple[OsImageRange, ...] = Field(min_length=1)
    kubernetes: KubernetesRange = Field(default_factory=KubernetesRange)
    api: ApiLevel

    def image(self, kubernetes: str) -> NodeImage | None:
        """The node OS image the SKU gives on ``kubernetes``; None when the SKU is not supported there."""
        if kubernetes not in self.kubernetes:
            return None
        return next((r.image for r in self.images if kubernetes in r), None)


class ApiField(_Frozen):
    path: str = Field(description="the field's path under the AgentPool's properties")
    api: ApiLevel
    feature: str


class AksApiVersions(_Frozen):
    sdk: str
    stable: str
    preview: str

    def version(self, level: ApiLevel) -> str:
        return {"sdk": self.sdk, "stable": self.stable, "preview": self.preview}[level]


class AksCatalog(_Frozen):
    api: AksApiVersions
    os_skus: tuple[OsSkuFacts, ...]
    fields: tuple[ApiField, ...]

    @model_validator(mode="after")
    def _ordered(self) -> AksCatalog:
        if not self.api.sdk < self.api.stable < self.api.preview:
            raise ValueError("api versions must grow: sdk < stable < preview")
        return self

    def os_sku(self, name: str) -> OsSkuFacts:
        return next(s for s in self.os_skus if s.name == name)

    def field(self, path: str) -> ApiField:
        return next(f for f in self.fields if f.path == path)


@lru_cache(maxsize=1)
def load_aks_catalog() -> AksCatalog:
    """The packaged AKS API facts, parsed once per process."""
    return AksCatalog.model_validate(read_catalog_yaml("aks.yaml"))
