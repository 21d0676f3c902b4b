"""``gpufleet catalog``: what the catalog knows: GPU models and Azure GPU VM sizes, with filters, and one entry in
detail; and the release table (which Kubernetes, GPU Operator, component and driver versions go together)."""

from __future__ import annotations

import datetime as _dt
from fractions import Fraction
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    command,
    emit_json,
    err,
    group,
    out,
    print_table,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    from gpufleet.catalog import Catalog, Gpu, Price, VmSize
    from gpufleet.catalog.releases import GpuOperatorRelease
    from gpufleet.spec.rules import Context

catalog_app = group(
    "The catalog: GPU models, Azure VM sizes, releases.",
    help="What the catalog knows: GPU models (gpus), Azure GPU VM sizes (sizes), and which Kubernetes, GPU Operator,"
    " component and driver versions go together (releases).",
)

GpuMigOpt = Annotated[bool, typer.Option("--mig", help="Only the MIG-capable GPU models.")]
SizeMigOpt = Annotated[bool, typer.Option("--mig", help="Only the sizes on which AKS supports MIG.")]
ArchOpt = Annotated[
    str | None,
    typer.Option(
        "--family",
        help="Only one GPU architecture (Hopper, blackwell...), case-insensitive; an unknown one is a usage error "
        "(exit 2) listing the valid ones.",
    ),
]
SeriesOpt = Annotated[
    str | None,
    typer.Option(
        "--family",
        help="Only one VM series (ND_H100_v5, nc_a100_v4...), case-insensitive; an unknown one is a usage error "
        "(exit 2) listing the valid ones.",
    ),
]
RegionOpt = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="An Azure region (westeurope): only sizes offered there (sizes whose regions are not recorded are kept, "
        "marked as such) and each size's price there. An unknown region is a usage error (exit 2).",
    ),
]


def _gpu_count(count: Fraction) -> int | float:
    """GPUs per VM as a JSON number: an int when whole, else the fraction to 4 decimals (1/6 -> 0.1667)."""
    return int(count) if count.denominator == 1 else round(float(count), 4)


def _gpu_dict(gpu: Gpu) -> dict[str, Any]:
    return {
        "name": gpu.name,
        "vendor": gpu.vendor,
        "architecture": gpu.architecture,
        "memory_gib": gpu.memory_gib,
        "memory_bandwidth_gbs": gpu.memory_bandwidth_gbs,
        "nvlink_gbs": gpu.nvlink_gbs,
        "pci_ids": list(gpu.pci_ids),
        "product_names": list(gpu.product_names),
        "aliases": list(gpu.aliases),
        "mig": gpu.mig_capable,
        "mig_profiles": len(gpu.mig.profiles) if gpu.mig is not None else 0,
        # AMD Instinct compute x memory partitions (gpufleet amd profiles); [] for a GPU without them
        "amd_partitions": [
            {
                "pair": p.name,
                "compute": p.compute,
                "memory": p.memory,
                "logical_gpus": p.logical_gpus,
                "memory_gib": p.memory_gib,
                "documented": p.documented,
            }
            for p in (gpu.partitions.pairs if gpu.partitions is not None else ())
        ],
    }


def _price_dict(price: Price | None) -> dict[str, Any] | None:
    if price is None:
        return None
    return price.model_dump(mode="json", exclude={"vm_size", "region"})


def _size_dict(size: VmSize, catalog: Catalog, region: str | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": size.name,
        "series": size.series,
        "gpu": size.gpu,
        "gpu_count": _gpu_count(size.gpu_count),
        "vcpus": size.vcpus,
        "memory_gib": size.memory_gib,
        "infiniband": size.infiniband,
        "nvlink": size.nvlink,
        "aks_supported": size.aks_supported,
        "aks_mig": size.aks_mig,
        "aks_skip_gpu_driver": size.aks_skip_gpu_driver,
        "os_skus": list(size.os_skus),
        "regions": list(size.regions) if size.regions is not None else None,
        "confidential": size.confidential,
        "preview": size.preview,
        "retired_on": size.retired_on.isoformat() if size.retired_on else None,
        "replacements": list(size.replacements),
        "source": size.source,
    }
    if region is not None:
        data["region"] = region
        data["offered_in_region"] = size.offered_in(region)
        data["price"] = _price_dict(catalog.price(size.name, region))
    return data


def _family(value: str, valid: list[str], what: str) -> str:
    """The canonical spelling of ``value`` among ``valid`` (case-insensitive), else a usage error listing them."""
    for v in valid:
        if v.lower() == value.lower():
            return v
    raise usage_error(f"unknown {what} {value!r}; valid: {', '.join(valid)}")


def _unknown(message: str, as_json: bool) -> typer.Exit:
    """An entry the catalog does not have: one line (JSON: ``{"error": ...}``), exit 1."""
    if as_json:
        emit_json({"error": message})
    else:
        err.print(f"[red]error:[/red] {shown(message)}")
    return typer.Exit(EXIT_INVALID)


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _detail(rows: dict[str, Any], title: str) -> None:
    table = Table(title=shown(title), show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for key, value in rows.items():
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value) or "-"
        elif isinstance(value, bool):
            value = _yes(value)
        elif value is None:
            value = "-"
        table.add_row(key, shown(value))
    print_table(table)


@command(catalog_app, "gpus", "The GPU models the catalog knows.")
def catalog_gpus(
    name: Annotated[
        str | None,
        typer.Argument(help="Show one GPU in detail: its catalog name, an alias (nvidia-smi name) or a PCI id."),
    ] = None,
    mig: GpuMigOpt = False,
    family: ArchOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The GPU models the catalog knows: vendor, architecture, memory, bandwidth, NVLink, PCI ids, aliases, MIG, AMD
    partitions (the compute x memory pairs: gpufleet amd profiles GPU).
    With NAME, that one GPU (exact on name, aliases and PCI ids; otherwise "did you mean" and exit 1)."""
    from gpufleet.catalog import UnknownGpu, load_catalog

    catalog = load_catalog()
    if name is not None:
        try:
            gpu = catalog.gpu(name)
        except UnknownGpu as exc:
            raise _unknown(str(exc), as_json) from None
        data = _gpu_dict(gpu)
        if gpu.mig is not None:
            data["mig_profile_names"] = [p.name for p in gpu.mig.profiles]
        data["vm_sizes"] = [s.name for s in catalog.vm_sizes if s.gpu == gpu.name]
        if as_json:
            emit_json(data)
        else:
            basis = {True: "", False: " (driver rule)"}
            pairs = [
                f"{p['pair']}: {p['logical_gpus']} x {p['memory_gib']:g} GiB{basis[p['documented']]}"
                for p in data["amd_partitions"]
            ]
            _detail({**data, "amd_partitions": pairs}, f"GPU {gpu.name}")
        return

    gpus = list(catalog.gpus)
    if family is not None:
        arch = _family(family, [a.name for a in catalog.architectures], "GPU architecture")
        gpus = [g for g in gpus if g.architecture == arch]
    if mig:
        gpus = [g for g in gpus if g.mig_capable]
    if as_json:
        emit_json([_gpu_dict(g) for g in gpus])
        return
    table = Table(title=f"{len(gpus)} GPU models")
    table.add_column("name", no_wrap=True, min_width=max((len(g.name) for g in gpus), default=4))
    for col in ("vendor", "arch", "GiB", "GB/s", "NVLink GB/s", "PCI ids", "aliases", "MIG", "AMD partitions"):
        table.add_column(col)
    for g in gpus:
        table.add_row(
            g.name,
            g.vendor,
            g.architecture,
            f"{g.memory_gib:g}",
            f"{g.memory_bandwidth_gbs:g}" if g.memory_bandwidth_gbs else "-",
            f"{g.nvlink_gbs:g}" if g.nvlink_gbs else "-",
            ", ".join(g.pci_ids),
            shown(", ".join((*g.product_names, *g.aliases))) or "-",
            f"yes ({len(g.mig.profiles)} profiles)" if g.mig is not None else "no",
            f"yes ({len(g.partitions.pairs)} pairs)" if g.partitions is not None else "-",
        )
    print_table(table)


@command(catalog_app, "sizes", "The Azure GPU VM sizes the catalog knows.")
def catalog_sizes(
    name: Annotated[str | None, typer.Argument(help="Show one VM size in detail (Standard_ND96isr_H100_v5).")] = None,
    mig: SizeMigOpt = False,
    region: RegionOpt = None,
    family: SeriesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The Azure GPU VM sizes the catalog knows: series, GPU and count, vCPUs, memory, AKS and AKS-MIG support, OS
    images, regions, retirement, and with --region the price there ("no price" when none is recorded, never 0). With
    NAME, that one size (exact, case-insensitive; otherwise "did you mean" and exit 1)."""
    from gpufleet.catalog import load_catalog
    from gpufleet.common.diagnostics import did_you_mean

    catalog = load_catalog()
    if region is not None and region not in catalog.region_names:
        raise usage_error(f"unknown Azure region {region!r}; {did_you_mean(region, catalog.region_names, 8)}")
    if name is not None:
        size = catalog.vm_size(name)
        if size is None:
            names = [s.name for s in catalog.vm_sizes]
            raise _unknown(f"unknown VM size {name!r}; {did_you_mean(name, names)}", as_json)
        data = _size_dict(size, catalog, region)
        if as_json:
            emit_json(data)
        else:
            _detail(data, f"VM size {size.name}")
        return

    sizes = list(catalog.vm_sizes)
    if family is not None:
        series = _family(family, list(dict.fromkeys(s.series for s in sizes)), "VM series")
        sizes = [s for s in sizes if s.series == series]
    if mig:
        sizes = [s for s in sizes if s.aks_mig]
    if region is not None:
        sizes = [s for s in sizes if s.offered_in(region) is not False]
    if as_json:
        emit_json([_size_dict(s, catalog, region) for s in sizes])
        return

    table = Table(title=f"{len(sizes)} Azure GPU VM sizes" + (f" in {region}" if region else ""))
    table.add_column("name", no_wrap=True, min_width=max((len(s.name) for s in sizes), default=4))
    columns = ["series", "GPU", "GPUs", "vCPUs", "GiB", "AKS", "AKS MIG", "OS images", "regions", "retired"]
    if region is not None:
        columns.append(f"$/h {region}")
    for col in columns:
        table.add_column(col)
    for s in sizes:
        row = [
            s.name,
            s.series,
            s.gpu,
            str(s.gpu_count),
            str(s.vcpus),
            f"{s.memory_gib:g}",
            "yes, driver: operator" if s.aks_skip_gpu_driver else _yes(s.aks_supported),
            _yes(s.aks_mig),
            ", ".join(s.os_skus) or "-",
            "not recorded" if s.regions is None else (", ".join(s.regions) or "none"),
            s.retired_on.isoformat() if s.retired_on else "-",
        ]
        if region is not None:
            price = catalog.price(s.name, region)
            row.append(f"{price.pay_as_you_go:g}" if price and price.pay_as_you_go else "no price")
        table.add_row(*row)
    print_table(table)
    if region is not None and any(s.regions is None for s in sizes):
        out.print("[dim]regions 'not recorded': the catalog does not say whether the size is offered there[/dim]")


def _month(day: _dt.date) -> str:
    return f"{day:%Y-%m}"


def _operator_dict(op: GpuOperatorRelease, ctx: Context) -> dict[str, Any]:
    from gpufleet.spec.rules import kubernetes_choices

    return {
        **op.model_dump(mode="json"),
        "supported_today": {
            "kubernetes_baremetal": kubernetes_choices(op, ctx, aks=False, baremetal=True),
            "kubernetes_aks": kubernetes_choices(op, ctx, aks=True, baremetal=False),
            "driver_branches": ctx.releases.supported_branches(op, ctx.today),
        },
    }


def _releases_dict(ctx: Context) -> dict[str, Any]:
    table = ctx.releases
    minors = []
    for minor in table.kubernetes:
        aks = table.aks_version(minor.version)
        minors.append(
            {
                **minor.model_dump(mode="json"),
                "aks": None if aks is None else aks.model_dump(mode="json", exclude={"kubernetes"}),
            }
        )
    return {
        "as_of": ctx.today.isoformat(),
        "minimum_kubernetes": table.minimum_kubernetes.model_dump(mode="json"),
        "kubernetes": minors,
        "aks": {"source": table.aks.source, "regions": table.aks.regions, "offered": table.aks_offered(ctx.today)},
        "driver_branches": [
            {**b.model_dump(mode="json"), "supported": table.branch_alive(b.branch, ctx.today)}
            for b in table.driver_branches
        ],
        "gpu_operator": [_operator_dict(op, ctx) for op in table.gpu_operator],
        "device_plugin": [p.model_dump(mode="json") for p in table.device_plugin],
        "dra_driver": [d.model_dump(mode="json") for d in table.dra_driver],
    }


@command(catalog_app, "releases", "The release table: which versions go together.")
def catalog_releases(as_json: JsonOpt = False) -> None:
    """The release table `gpufleet validate` holds every stack's gpufleet:release to: Kubernetes minors with their
    upstream and AKS end of life, NVIDIA driver branches with theirs, and each GPU Operator release with the Kubernetes
    range and driver branches it supports, the components it ships, and what a stack may pin with it today."""
    from gpufleet.catalog import load_catalog
    from gpufleet.spec.rules import Context

    ctx = Context(catalog=load_catalog(), today=_dt.date.today())
    data = _releases_dict(ctx)
    if as_json:
        emit_json(data)
        return
    table = ctx.releases
    minors = Table(title=f"Kubernetes minors (gpufleet needs {table.minimum_kubernetes.version} or later)")
    for col in ("version", "end of life", "AKS GA", "AKS end of life", "AKS LTS end of life"):
        minors.add_column(col, no_wrap=True)
    for minor in table.kubernetes:
        aks = table.aks_version(minor.version)
        cells = ["-"] * 3
        if aks is not None:
            cells = [_month(aks.ga), str(aks.end_of_life), str(aks.lts_end_of_life or "-")]
        minors.add_row(minor.version, str(minor.end_of_life), *cells)
    print_table(minors)
    branches = Table(title="NVIDIA driver branches")
    for col in ("branch", "designation", "end of life", f"supported on {ctx.today}"):
        branches.add_column(col, no_wrap=True)
    for b in table.driver_branches:
        branches.add_row(b.branch, b.designation, str(b.end_of_life), _yes(table.branch_alive(b.branch, ctx.today)))
    print_table(branches)
    for op in data["gpu_operator"]:
        today = op.pop("supported_today")
        rows = {
            "Kubernetes (NVIDIA validated)": f"{op['kubernetes']['min']}-{op['kubernetes']['max']}",
            f"Kubernetes a bare-metal stack may pin on {ctx.today}": today["kubernetes_baremetal"],
            f"Kubernetes an AKS stack may pin on {ctx.today}": today["kubernetes_aks"],
            "driver branches (component matrix)": op["driver_branches"],
            f"driver branches supported on {ctx.today}": today["driver_branches"],
            "default driver": op["default_driver"],
            **{f"ships {key}": value for key, value in op["components"].items()},
            "source": op["source"],
        }
        _detail(rows, f"GPU Operator {op['version']}")
    out.print(f"[dim]AKS per region: {shown(table.aks.regions)}[/dim]")
