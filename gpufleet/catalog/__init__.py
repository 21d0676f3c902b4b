"""The hardware catalog: GPUs (with MIG geometry), Azure GPU VM sizes, the general-purpose sizes an AKS system pool
may use, Azure regions.

Facts are data in the YAML files beside this module, each entry with its source in a comment; this module only
types and indexes them. Adding a GPU model or a VM size is a catalog entry, not a code change.

MIG profiles share their placement rules per *geometry* (``mig_geometries`` in gpus.yaml): a profile names its
kind (``1g``, ``1g+me``, ``1g-2m``, ``2g``...), and the loader expands compute slices, memory slices, max count
and allowed start positions from the geometry, so every model carries the full per-profile data.
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Sequence
from fractions import Fraction
from functools import cached_property, lru_cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from gpufleet.common.diagnostics import suggest

Vendor = Literal["nvidia", "amd"]
_PCI_RE = re.compile(r"^(?:0x)?([0-9a-f]{4}):(?:0x)?([0-9a-f]{4})$")
_MIG_FILTER_RE = re.compile(r"^0x([0-9a-f]{4})([0-9a-f]{4})$")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Architecture(_Frozen):
    name: str
    vendor: Vendor
    rank: int = Field(description="age order within the vendor, 0 = oldest")
    open_kernel_modules: bool = Field(description="NVIDIA's open GPU kernel modules support it")
    proprietary_kernel_modules: bool = Field(
        default=True, description="NVIDIA's proprietary kernel modules support it (Blackwell and later: no)"
    )


class NvSwitch(_Frozen):
    name: str
    pci_ids: tuple[str, ...]


class MigProfile(_Frozen):
    """One GPU instance profile of one GPU model (names collide across models: always key by model)."""

    name: str
    kind: str = Field(description="geometry kind: 1g, 1g+me, 1g-2m, 2g, 2g+me, 3g, 4g, 7g, 1g+gfx, 1g+me.all, 1g-me...")
    compute_slices: int
    memory_slices: int
    max_count: int
    starts: tuple[int, ...] = Field(description="allowed start positions on the memory-slice axis")
    usable_gib: float | None = Field(default=None, description="memory nvidia-smi reports for the instance")
    sms: int | None = None
    media_extensions: bool = Field(
        default=False, description="+me: holds the GPU's optical-flow accelerator (OFA); +me.all instances too"
    )
    all_media_engines: bool = Field(
        default=False, description="+me.all: every media engine of the GPU (NVDEC, NVENC, NVJPG, OFA) in this instance"
    )
    no_media_engines: bool = Field(default=False, description="-me: no media engine at all (pure compute)")
    graphics: bool = Field(default=False, description="+gfx: graphics APIs inside the instance (GB20x)")

    @property
    def plain(self) -> bool:
        """No variant suffix: the default instance of its size (not +me, +me.all, -me or +gfx)."""
        return not (self.media_extensions or self.all_media_engines or self.no_media_engines or self.graphics)

    @property
    def placement(self) -> str:
        """NVIDIA's notation, e.g. ``{0,2,4}:2``."""
        return "{" + ",".join(str(s) for s in self.starts) + "}:" + str(self.memory_slices)


class MigGeometry(_Frozen):
    compute_slices: int
    memory_slices: int = Field(description="placement units of nvidia-smi's {starts}:size notation")
    media_extension_instances: int = Field(description="instances with media extensions (+me) one GPU can hold")
    profiles: tuple[MigProfile, ...]
    min_driver_branch: int | None = Field(
        default=None, description="oldest NVIDIA driver branch with MIG on this model (e.g. 570); None: not published"
    )

    @cached_property
    def by_name(self) -> dict[str, MigProfile]:
        return {p.name: p for p in self.profiles}

    def profile(self, name: str) -> MigProfile | None:
        return self.by_name.get(name)

    def base_profile(self, compute_slices: int) -> MigProfile | None:
        """The plain profile with this many compute slices (no +me/+me.all/-me/+gfx variant, fewest memory slices)."""
        candidates = [p for p in self.profiles if p.compute_slices == compute_slices and p.plain]
        return min(candidates, key=lambda p: p.memory_slices, default=None)


# AMD Instinct partition modes (gpus.yaml, amd_partition_geometries): compute partitions and memory (NPS) partitions
AmdComputeMode = Literal["SPX", "DPX", "QPX", "CPX"]
AmdMemoryMode = Literal["NPS1", "NPS2", "NPS4"]
AMD_COMPUTE_MODES: tuple[AmdComputeMode, ...] = ("SPX", "DPX", "QPX", "CPX")
AMD_MEMORY_MODES: tuple[AmdMemoryMode, ...] = ("NPS1", "NPS2", "NPS4")


class AmdPartitionPair(_Frozen):
    """One compute x memory partition mode of an AMD GPU model: how many logical GPUs it makes and the memory of
    each (derived: the model's memory split evenly, as the driver does), and whether AMD lists it for the model
    (``documented``) or only the driver's rule for its GC version allows it."""

    compute: AmdComputeMode
    memory: AmdMemoryMode
    logical_gpus: int = Field(ge=1, description="logical GPUs (XCPs) one physical GPU becomes")
    memory_gib: float = Field(gt=0, description="memory per logical GPU (derived, before driver reservations)")
    documented: bool

    @property
    def name(self) -> str:
        """``CPX+NPS4``: the pair as AMD's docs write it."""
        return f"{self.compute}+{self.memory}"

    @property
    def resource_suffix(self) -> str:
        """``cpx_nps4``: the device plugin's ``mixed`` resource name part and the node labeller's label value."""
        return f"{self.compute}_{self.memory}".lower()


class AmdPartitioning(_Frozen):
    """An AMD Instinct model's partition modes (gpus.yaml ``amd_partition_geometries``, expanded per model)."""

    geometry: str = Field(description="the GC version whose driver rule applies, e.g. gc-9.4.3")
    xcds: int = Field(ge=1)
    compute_modes: tuple[AmdComputeMode, ...]
    memory_modes: tuple[AmdMemoryMode, ...]
    pairs: tuple[AmdPartitionPair, ...]

    def pair(self, compute: str, memory: str) -> AmdPartitionPair | None:
        """The pair ``compute`` x ``memory``; None when the model cannot run it."""
        return next((p for p in self.pairs if p.compute == compute and p.memory == memory), None)

    def memory_modes_of(self, compute: str) -> tuple[str, ...]:
        """The NPS modes ``compute`` runs with on this model."""
        return tuple(p.memory for p in self.pairs if p.compute == compute)

    def compute_modes_of(self, memory: str) -> tuple[str, ...]:
        """The compute modes that run with ``memory`` on this model."""
        return tuple(p.compute for p in self.pairs if p.memory == memory)


class Gpu(_Frozen):
    name: str
    source: str = Field(min_length=1, description="where the entry's facts come from (short; details in comments)")
    vendor: Vendor
    architecture: str
    memory_gib: float
    pci_ids: tuple[str, ...]
    pci_names: tuple[tuple[str, str | None], ...] = Field(
        default=(),
        description="(PCI id, its device name in the PCI ID database NVIDIA's KubeVirt GPU device plugin ships: the"
        " GPU Operator's sandbox device plugin names its resources from it; None: not in that database); a mapping"
        " in the YAML, pairs here so that the entry stays hashable",
    )
    product_names: tuple[str, ...] = Field(
        default=(),
        description="the model's names as nvidia-smi (NVML) prints them, and as the NVIDIA DRA driver publishes them"
        " (productName); empty where none is published",
    )
    aliases: tuple[str, ...] = ()
    form_factor: str | None = None
    nvswitch_platforms: tuple[str, ...] = ()
    mig: MigGeometry | None = None
    partitions: AmdPartitioning | None = Field(
        default=None, description="AMD Instinct compute x memory partitioning (the MIG counterpart); None: none"
    )
    vf_pci_ids: tuple[str, ...] = Field(default=(), description="SR-IOV virtual functions' PCI ids (AMD MxGPU)")
    gfx: str | None = Field(
        default=None, description="AMD's GFX target (gfx942), as ROCm and the node labeller name it"
    )
    compute_units: int | None = Field(default=None, ge=1, description="AMD compute units (CUs) of the whole GPU")
    proprietary_kernel_modules: bool | None = Field(
        default=None, description="overrides the architecture's (Grace Hopper: open modules only)"
    )
    memory_bandwidth_gbs: float | None = Field(
        default=None, gt=0, description="GPU memory (HBM/GDDR) bandwidth in GB/s (10^9 bytes per second)"
    )
    nvlink_gbs: float | None = Field(
        default=None, gt=0, description="NVLink bandwidth per GPU in GB/s, both directions together; None: PCIe only"
    )
    nvlink_domain_gpus: int | None = Field(
        default=None,
        ge=2,
        description="how many GPUs NVLink joins all-to-all on the part's platform (HGX board: 8, NVL72: 72, bridge: 2)",
    )

    @model_validator(mode="after")
    def _nvlink_domain(self) -> Gpu:
        if (self.nvlink_gbs is None) != (self.nvlink_domain_gpus is None):
            raise ValueError(f"{self.name}: nvlink_gbs and nvlink_domain_gpus go together (both or neither)")
        return self

    @field_validator("pci_names", mode="before")
    @classmethod
    def _pci_names_pairs(cls, v: Any) -> Any:
        return tuple(v.items()) if isinstance(v, dict) else v

    @model_validator(mode="after")
    def _pci_names_of_own_ids(self) -> Gpu:
        unknown = sorted(set(self.pci_name_of) - set(self.pci_ids))
        if unknown:
            raise ValueError(f"{self.name}: pci_names names {', '.join(unknown)}, not one of its pci_ids")
        return self

    @field_validator("pci_ids", "vf_pci_ids")
    @classmethod
    def _pci_ids_lowercase(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for pid in v:
            if not re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{4}", pid):
                raise ValueError(f"PCI id {pid!r} must be 'vvvv:dddd' in lowercase hex")
        return v

    @property
    def pci_name_of(self) -> dict[str, str | None]:
        """:attr:`pci_names` as a mapping; a PCI id it lacks was not looked up (unknown), unlike one mapped to None."""
        return dict(self.pci_names)

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None

    @property
    def mig_device_filters(self) -> tuple[str, ...]:
        """PCI ids in mig-parted's ``device-filter`` form: ``10de:2330`` -> ``0x233010DE``."""
        return tuple(f"0x{pid[5:].upper()}{pid[:4].upper()}" for pid in self.pci_ids)


# The node OS images AKS offers for Linux GPU pools (learn.microsoft.com/azure/aks/upgrade-os-version): the pool's
# os_sku picks one of them per Kubernetes version (aks.yaml, gpufleet.catalog.aks). Azure Linux 2.0, what os_sku
# AzureLinux gave before Kubernetes 1.32, is retired: no size lists it.
OsImage = Literal["ubuntu-22.04", "ubuntu-24.04", "azurelinux-3"]
OS_IMAGE_NAMES: dict[str, str] = {
    "ubuntu-22.04": "Ubuntu 22.04",
    "ubuntu-24.04": "Ubuntu 24.04",
    "azurelinux-2": "Azure Linux 2.0 (retired)",
    "azurelinux-3": "Azure Linux 3",
}


class VmSize(_Frozen):
    name: str
    series: str
    gpu: str
    gpu_count: Fraction = Field(description="GPUs per VM; fractional for partitioned GPUs (NVads A10 v5, NVv4)")
    vcpus: int
    memory_gib: float
    infiniband: bool
    nvlink: bool = Field(description="NVLink between the VM's GPUs (tensor parallelism > 1 without PCIe hops)")
    aks_supported: bool
    aks_mig: bool
    aks_managed_gpu: bool = Field(
        default=False, description="AKS can run its managed GPU stack (gpuProfile.nvidia.managementMode Managed)"
    )
    aks_skip_gpu_driver: bool = Field(
        default=False,
        description="AKS documents GPU pools of this size only with its driver install skipped (gpuProfile.driver"
        " None) and the GPU Operator installing the driver (confidential GPUs: its signed driver)",
    )
    os_skus: tuple[OsImage, ...] = Field(description="node OS images AKS supports for GPU pools of this size")
    regions: tuple[str, ...] | None = Field(
        default=None, description="regions offering the size; None: not recorded (no region check)"
    )
    confidential: bool = Field(default=False, description="confidential computing VM (AMD SEV-SNP, GPU TEE)")
    preview: bool = Field(default=False, description="Microsoft lists the series as preview")
    retired_on: _dt.date | None = None
    replacements: tuple[str, ...] = ()
    source: str

    @field_validator("gpu_count", mode="before")
    @classmethod
    def _fraction(cls, v: Any) -> Fraction:
        return Fraction(str(v))

    @model_validator(mode="after")
    def _skipped_driver_is_an_aks_size_without_the_managed_stack(self) -> VmSize:
        if self.aks_skip_gpu_driver and (not self.aks_supported or self.aks_managed_gpu):
            raise ValueError(
                f"{self.name}: aks_skip_gpu_driver needs aks_supported and no aks_managed_gpu (AKS's managed GPU"
                " stack installs the driver)"
            )
        return self

    @property
    def azure_linux(self) -> bool:
        """AKS runs Azure Linux (os_sku AzureLinux / AzureLinux3) on this size."""
        return "azurelinux-3" in self.os_skus

    def offered_in(self, region: str) -> bool | None:
        """Whether the size is offered in ``region``; None when the catalog records no regions for it."""
        return None if self.regions is None else region in self.regions

    def retired(self, today: _dt.date) -> bool:
        return self.retired_on is not None and self.retired_on <= today

    @property
    def whole_gpus(self) -> int:
        """Whole physical GPUs the VM sees (0 for a fraction of one)."""
        return int(self.gpu_count) if self.gpu_count.denominator == 1 else 0


class SystemVmSize(_Frozen):
    """A general-purpose size (no GPU) for an AKS system pool."""

    name: str
    series: str
    vcpus: int
    memory_gib: float
    burstable: bool = Field(default=False, description="B-series: CPU credits (AKS advises against system pools)")
    source: str


# The name of the price table shipped in this package (catalog/azure_prices.yaml), as prices and messages give it.
SHIPPED_PRICES = "catalog/azure_prices.yaml"


class _Figures(_Frozen):
    pay_as_you_go: float | None = Field(default=None, gt=0)
    spot: float | None = Field(default=None, gt=0)
    reserved_1y: float | None = Field(default=None, gt=0, description="1-year reservation, per hour")
    reserved_3y: float | None = Field(default=None, gt=0, description="3-year reservation, per hour")


class PriceFigures(_Figures):
    """One size's figures in one region of a price table file, per hour (Linux); one left out is unknown."""

    @model_validator(mode="after")
    def _some_figure(self) -> PriceFigures:
        if all(v is None for v in (self.pay_as_you_go, self.spot, self.reserved_1y, self.reserved_3y)):
            # the "gpufleet" error type: the message reaches a user as written (gpufleet.common.yamldoc)
            raise PydanticCustomError(
                "gpufleet", "no figure: give pay_as_you_go, spot, reserved_1y or reserved_3y, or leave the region out"
            )
        return self


class Price(_Figures):
    """What one VM size costs in one region, in USD per hour (Linux): None is no published price (never 0); and where
    the figures come from: ``table``, the price table holding them (a user's file, or :data:`SHIPPED_PRICES`), and
    the entry's ``source`` and ``as_of`` (the date they were read)."""

    vm_size: str
    region: str
    source: str
    as_of: _dt.date
    table: str = Field(default=SHIPPED_PRICES, description="the table the price came from: a path or SHIPPED_PRICES")


class PriceEntry(_Frozen):
    """One entry of a price table file: a size, where its figures come from, its figures per region."""

    vm_size: str = Field(min_length=1)
    source: str = Field(min_length=1)
    as_of: _dt.date
    regions: dict[str, PriceFigures] = Field(min_length=1)


class PriceTable(_Frozen):
    """A price table file (``azure_prices.yaml``: the shipped one, or a user's from ``gpufleet azure prices``):
    ``currency``, and ``prices: [{vm_size, source, as_of, regions: {<region>: {pay_as_you_go, spot, reserved_1y,
    reserved_3y}}}]`` (a figure left out is unknown)."""

    currency: str = "USD"
    prices: tuple[PriceEntry, ...] = ()

    def expand(self, table: str) -> tuple[Price, ...]:
        """One :class:`Price` per size and region, each naming ``table`` as where it came from."""
        return tuple(
            Price(
                vm_size=entry.vm_size,
                region=region,
                source=entry.source,
                as_of=entry.as_of,
                table=table,
                **figures.model_dump(),
            )
            for entry in self.prices
            for region, figures in entry.regions.items()
        )


class Region(_Frozen):
    name: str
    display_name: str


_NVIDIA_NAME_RE = re.compile(r"^(?:nvidia\b|rtx\b|tesla\b|quadro\b|(?:gb|gh|pg|[abhltv])[\s-]?\d)", re.IGNORECASE)
_AMD_NAME_RE = re.compile(
    r"^(?:amd[\s_-]*)?(?:(?:radeon[\s_-]*)?instinct[\s_-]*)?(?:mi[\s_-]?\d|radeon)", re.IGNORECASE
)


def query_vendor(identifier: str) -> Vendor | None:
    """The vendor a GPU name looks like it is from, by its shape: ``MI300X``/``AMD ...``/``Radeon ...`` -> amd;
    ``NVIDIA ...`` or letters A/B/H/L/T/V, GB/GH/RTX/PG followed by digits (``B300``, ``GH200``, ``RTX 6000``)
    -> nvidia; PCI ids by their vendor part; None when the shape says nothing."""
    key = identifier.strip()
    if m := _PCI_RE.match(key.lower()):
        return {"10de": "nvidia", "1002": "amd"}.get(m.group(1))
    if m := _MIG_FILTER_RE.match(key.lower()):
        return {"10de": "nvidia", "1002": "amd"}.get(m.group(2))
    if _AMD_NAME_RE.match(key):
        return "amd"
    if _NVIDIA_NAME_RE.match(key):
        return "nvidia"
    return None


class UnknownGpu(LookupError):
    """An identifier that names no catalog GPU; the message lists what would be valid."""


class Catalog(_Frozen):
    architectures: tuple[Architecture, ...]
    nvswitches: tuple[NvSwitch, ...]
    gpus: tuple[Gpu, ...]
    vm_sizes: tuple[VmSize, ...]
    regions: tuple[Region, ...]
    system_vm_sizes: tuple[SystemVmSize, ...] = ()
    prices: tuple[Price, ...] = ()
    currency: str = "USD"
    price_tables: tuple[str, ...] = Field(
        default=(SHIPPED_PRICES,), description="the tables ``prices`` were taken from, the first one's price first"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Catalog:
        arch_names = {a.name for a in self.architectures}
        seen: dict[str, str] = {}
        for gpu in self.gpus:
            if gpu.architecture not in arch_names:
                raise ValueError(f"{gpu.name}: unknown architecture {gpu.architecture!r}")
            for ident in (gpu.name, *gpu.product_names, *gpu.aliases, *gpu.pci_ids):
                key = ident.lower()
                if key in seen and seen[key] != gpu.name:
                    raise ValueError(f"identifier {ident!r} names both {seen[key]} and {gpu.name}")
                seen[key] = gpu.name
        gpu_names = {g.name for g in self.gpus}
        size_names = {s.name for s in self.vm_sizes}
        for size in self.vm_sizes:
            if size.gpu not in gpu_names:
                raise ValueError(f"{size.name}: unknown GPU {size.gpu!r}")
            for r in size.replacements:
                if r not in size_names:
                    raise ValueError(f"{size.name}: replacement {r!r} is not a catalog size")
        region_names = {r.name for r in self.regions}
        for size in self.vm_sizes:
            unknown = sorted(set(size.regions or ()) - region_names)
            if unknown:
                raise ValueError(f"{size.name}: unknown regions {', '.join(unknown)}")
            if size.aks_supported and not size.os_skus:
                raise ValueError(f"{size.name}: supported by AKS on no OS image (os_skus is empty)")
        for system in self.system_vm_sizes:
            if system.name in size_names:
                raise ValueError(f"{system.name}: listed both as a GPU size and as a system pool size")
        priced: set[tuple[str, str]] = set()
        priceable = size_names | {s.name for s in self.system_vm_sizes}
        for price in self.prices:
            if price.vm_size not in priceable:
                raise ValueError(f"price for {price.vm_size!r}: not a catalog GPU or system pool size")
            if price.region not in region_names:
                raise ValueError(f"price for {price.vm_size} in {price.region!r}: not a catalog region")
            if (price.vm_size, price.region) in priced:
                raise ValueError(f"two prices for {price.vm_size} in {price.region}")
            priced.add((price.vm_size, price.region))
        return self

    # -- indexes -------------------------------------------------------------------------------------------
    @cached_property
    def _gpu_index(self) -> dict[str, Gpu]:
        index: dict[str, Gpu] = {}
        for gpu in self.gpus:
            for ident in (gpu.name, *gpu.product_names, *gpu.aliases, *gpu.pci_ids):
                index[ident.lower()] = gpu
        return index

    @cached_property
    def _size_index(self) -> dict[str, VmSize]:
        return {s.name.lower(): s for s in self.vm_sizes}

    @cached_property
    def _system_size_index(self) -> dict[str, SystemVmSize]:
        return {s.name.lower(): s for s in self.system_vm_sizes}

    @cached_property
    def _price_index(self) -> dict[tuple[str, str], Price]:
        return {(p.vm_size.lower(), p.region): p for p in self.prices}

    @cached_property
    def _arch_index(self) -> dict[str, Architecture]:
        return {a.name: a for a in self.architectures}

    @cached_property
    def region_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.regions)

    @cached_property
    def gpus_by_pci_id(self) -> dict[str, dict[str, Any]]:
        """``vendor:device`` (``10de:2330``) -> ``{"model": name, "mig": bool}`` for every catalog GPU: the host facts'
        GPU catalog (``gpufleet.host.hostfacts.read_host`` and the ``gpu_topology`` module take it as plain data)."""
        return {pid: {"model": g.name, "mig": g.mig_capable} for g in self.gpus for pid in g.pci_ids}

    # -- lookups -------------------------------------------------------------------------------------------
    def find_gpu(self, identifier: str) -> Gpu | None:
        """Resolve a canonical name, an ``nvidia-smi`` product name, or a PCI id (``10de:2330`` or
        mig-parted's ``0x233010DE``); case-insensitive. None when nothing matches."""
        key = identifier.strip().lower()
        if m := _PCI_RE.match(key):
            key = f"{m.group(1)}:{m.group(2)}"
        elif m := _MIG_FILTER_RE.match(key):
            key = f"{m.group(2)}:{m.group(1)}"
        return self._gpu_index.get(key)

    def gpu(self, identifier: str) -> Gpu:
        """Like :meth:`find_gpu` but raises :class:`UnknownGpu` naming the valid choices."""
        found = self.find_gpu(identifier)
        if found is None:
            raise UnknownGpu(f"unknown GPU {identifier!r}; {self.gpu_hint(identifier)}")
        return found

    def gpu_family(self, identifier: str) -> list[Gpu]:
        """The GPUs a short family name such as ``H100`` or ``a100`` could mean: every model whose canonical name
        starts with it followed by ``-`` (``H100-SXM5-80GB``, ``H100-PCIE-80GB``...). Empty when it names none."""
        key = identifier.strip().lower()
        if not key or "-" in key:
            return []
        return [g for g in self.gpus if g.name.lower().startswith(key + "-")]

    def gpu_hint(self, identifier: str) -> str:
        """What to tell a user whose identifier names no GPU: the models of an ambiguous family name
        (``H100``), else ``did you mean`` the closest model *of the same vendor* (an NVIDIA-shaped name never
        gets an AMD part, ``MI...`` never an NVIDIA one), then the valid names of that vendor."""
        family = self.gpu_family(identifier)
        if len(family) > 1:
            return f"{identifier.strip()!r} names {len(family)} GPUs, pick one: " + ", ".join(g.name for g in family)
        if len(family) == 1:
            return f"did you mean {family[0].name!r}?"
        vendor = query_vendor(identifier)
        pool = [g for g in self.gpus if vendor is None or g.vendor == vendor]
        by_ident = {ident.lower(): g.name for g in pool for ident in (g.name, *g.product_names, *g.aliases)}
        close = suggest(identifier.strip(), by_ident, n=1)
        names = sorted(g.name for g in pool)
        shown = ", ".join(names[:30]) + (f", … ({len(names) - 30} more)" if len(names) > 30 else "")
        if close:
            return f"did you mean {by_ident[close[0].lower()]!r}? valid: {shown}"
        return f"valid: {shown}"

    def vm_size(self, name: str) -> VmSize | None:
        return self._size_index.get(name.lower())

    def system_vm_size(self, name: str) -> SystemVmSize | None:
        """A general-purpose size for the system pool (case-insensitive), or None."""
        return self._system_size_index.get(name.lower())

    def price(self, vm_size: str, region: str) -> Price | None:
        """The price of a size in a region, or None when the catalog has none (callers show "no price", never 0)."""
        return self._price_index.get((vm_size.lower(), region))

    def with_price_tables(self, tables: Sequence[tuple[str, PriceTable]]) -> Catalog:
        """This catalog with the prices of ``tables`` (name, table) in front of its own: per size and region, the
        first table that prices it wins, whole (its figures, source and date), else this catalog's price. Each table
        must be in this catalog's currency and name only its sizes and regions (the reader of a user's table checks
        that at the file's lines, :func:`gpufleet.azure.prices.read_price_table`)."""
        chosen: dict[tuple[str, str], Price] = {}
        for name, table in tables:
            for price in table.expand(name):
                chosen.setdefault((price.vm_size.lower(), price.region), price)
        kept = tuple(p for p in self.prices if (p.vm_size.lower(), p.region) not in chosen)
        fields = {field: getattr(self, field) for field in type(self).model_fields}
        return Catalog(
            **{
                **fields,
                "prices": (*chosen.values(), *kept),
                "price_tables": (*(name for name, _ in tables), *self.price_tables),
            }
        )

    def architecture(self, gpu: Gpu) -> Architecture:
        return self._arch_index[gpu.architecture]

    def kernel_modules(self, gpu: Gpu) -> tuple[bool, bool]:
        """Whether NVIDIA's (open, proprietary) kernel modules support ``gpu``: its architecture's, unless the
        model says otherwise (Grace Hopper supports only the open ones)."""
        arch = self.architecture(gpu)
        proprietary = gpu.proprietary_kernel_modules
        if proprietary is None:
            proprietary = arch.proprietary_kernel_modules
        return arch.open_kernel_modules, proprietary

    def no_mig_reason(self, gpu: Gpu) -> str:
        """Why ``gpu`` cannot be partitioned, naming the models that can."""
        capable = ", ".join(g.name for g in self.gpus if g.mig_capable)
        return f"{gpu.name} ({gpu.architecture}) has no MIG; MIG-capable GPUs: {capable}"

    def mig_profile_owners(self, profile: str) -> list[str]:
        """The models that have a MIG profile of this name (names collide across models)."""
        return [g.name for g in self.gpus if g.mig is not None and g.mig.profile(profile) is not None]


# -- loading -------------------------------------------------------------------------------------------------


def read_catalog_yaml(name: str) -> Any:
    """One of the catalog's own YAML files (``gpus.yaml``...), parsed by libyaml: every gpufleet process and test
    loads the catalog, and libyaml reads it 15 times faster than ruamel's pure-Python parser (0.01 s against 0.2 s).
    The files are ours and plain (no YAML 1.1 booleans such as ``no``); a test holds both parsers to the same result
    on every file, so a 1.1-only reading cannot slip in."""
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    text = resources.files(__package__).joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=loader)


def _expand_gpus(raw: dict[str, Any]) -> list[dict[str, Any]]:
    geometries = raw["mig_geometries"]
    gpus = []
    for entry in raw["gpus"]:
        entry = dict(entry)
        mig = entry.get("mig")
        if mig is not None:
            geometry = geometries[mig["geometry"]]
            profiles = []
            for name, spec in mig["profiles"].items():
                kind = geometry["kinds"][spec["kind"]]
                profiles.append(
                    {
                        "name": name,
                        "kind": spec["kind"],
                        "compute_slices": kind["compute"],
                        "memory_slices": kind["memory"],
                        "max_count": kind["max"],
                        "starts": kind["starts"],
                        "media_extensions": kind.get("media_extensions", False),
                        "all_media_engines": kind.get("all_media_engines", False),
                        "no_media_engines": kind.get("no_media_engines", False),
                        "graphics": kind.get("graphics", False),
                        "usable_gib": spec.get("usable_gib"),
                        "sms": spec.get("sms"),
                    }
                )
            entry["mig"] = {
                "compute_slices": geometry["compute_slices"],
                "memory_slices": geometry["memory_slices"],
                "media_extension_instances": geometry["media_extension_instances"],
                "profiles": profiles,
                "min_driver_branch": mig.get("min_driver_branch"),
            }
        if entry.get("partitions") is not None:
            entry["partitions"] = _expand_amd_partitions(raw["amd_partition_geometries"], entry)
        gpus.append(entry)
    return gpus


def _expand_amd_partitions(geometries: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """A model's ``partitions: {geometry, documented}`` -> :class:`AmdPartitioning`'s fields: every pair of the
    geometry with its logical GPUs, memory per logical GPU and whether AMD documents it for the model."""
    spec = entry["partitions"]
    geometry = geometries[spec["geometry"]]
    documented = spec.get("documented", [])
    pairs = []
    for compute, memories in geometry["pairs"].items():
        logical = geometry["compute"][compute]
        for memory in memories:
            name = f"{compute}+{memory}"
            pairs.append(
                {
                    "compute": compute,
                    "memory": memory,
                    "logical_gpus": logical,
                    "memory_gib": round(entry["memory_gib"] / logical, 3),
                    "documented": documented == "all" or name in documented,
                }
            )
    unknown = sorted(set(documented) - {f"{p['compute']}+{p['memory']}" for p in pairs}) if documented != "all" else []
    if unknown:
        raise ValueError(
            f"{entry['name']}: documented partition pairs {unknown} are not in geometry {spec['geometry']}"
        )
    return {
        "geometry": spec["geometry"],
        "xcds": geometry["xcds"],
        "compute_modes": tuple(geometry["compute"]),
        "memory_modes": tuple(geometry["memory"]),
        "pairs": pairs,
    }


def _expand_sizes(raw: dict[str, Any]) -> list[dict[str, Any]]:
    sizes = []
    for series in raw["series"]:
        shared = {k: v for k, v in series.items() if k not in ("sizes", "name")}
        for size in series["sizes"]:
            sizes.append({**shared, "series": series["name"], **size})
    return sizes


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The packaged catalog, parsed once per process."""
    gpus_raw = read_catalog_yaml("gpus.yaml")
    prices = PriceTable.model_validate(read_catalog_yaml("azure_prices.yaml") or {})
    return Catalog(
        architectures=tuple(gpus_raw["architectures"]),
        nvswitches=tuple(gpus_raw["nvswitches"]),
        gpus=tuple(_expand_gpus(gpus_raw)),
        vm_sizes=tuple(_expand_sizes(read_catalog_yaml("azure_vm_sizes.yaml"))),
        regions=tuple(read_catalog_yaml("azure_regions.yaml")["regions"]),
        system_vm_sizes=tuple(_expand_sizes(read_catalog_yaml("azure_system_vm_sizes.yaml"))),
        prices=prices.expand(SHIPPED_PRICES),
        currency=prices.currency,
    )
