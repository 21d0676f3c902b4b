"""``gpufleet azure``: Azure's live facts. ``azure prices`` reads the Azure Retail Prices API into a price table in the
catalog's shape (:mod:`gpufleet.azure.prices`); this module only checks the command line, prints and writes."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    command,
    emit_json,
    err,
    group,
    print_diagnostics,
    project_root,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    from gpufleet.azure.prices import PriceRead
    from gpufleet.catalog import Catalog, PriceTable

azure_app = group(
    "Azure's live facts: VM prices from the Retail Prices API.",
    help="Azure's live facts, read from Azure: VM prices from the Retail Prices API (no credentials needed).",
)

RegionsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--region",
        help="An Azure region (westeurope); repeat for more. Default: the regions of the project's stacks.",
    ),
]
SizesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--size",
        help="A VM size (Standard_ND96isr_H100_v5); repeat for more. Default: every size the catalog knows that is"
        " not retired (GPU and system pool sizes).",
    ),
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Write the table to this file (entries of an existing table for other sizes or regions are kept)."
        " Default: stdout.",
    ),
]


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {shown(message)}")
    return typer.Exit(EXIT_INVALID)


def _regions(given: list[str] | None, catalog: Catalog, root: Path | None) -> list[str]:
    """The regions asked for, checked against the catalog (exit 2 naming the valid ones); by default those of the
    project's stacks that are Azure regions."""
    from gpufleet.common.diagnostics import did_you_mean

    if given:
        for region in given:
            if region not in catalog.region_names:
                raise usage_error(f"unknown Azure region {region!r}; {did_you_mean(region, catalog.region_names)}")
        return list(dict.fromkeys(given))
    project = project_root(root)
    found = [r for r in _stack_regions(project) if r in catalog.region_names]
    if not found:
        raise usage_error(f"no stack in {project} names an Azure region: give --region REGION (e.g. westeurope)")
    return found


def _stack_regions(project: Path) -> list[str]:
    """The ``gpufleet:region`` of each stack file of the project, in file order, once each (read, not validated: an
    invalid stack still says where it runs)."""
    from gpufleet.common.yamldoc import plain, read_yaml
    from gpufleet.spec.files import stack_files

    regions = []
    for file in stack_files(project):
        doc, _errors = read_yaml(file)
        config = plain(doc).get("config") if isinstance(doc, dict) else None
        region = config.get("gpufleet:region") if isinstance(config, dict) else None
        if isinstance(region, str):
            regions.append(region)
    return list(dict.fromkeys(regions))


def _sizes(given: list[str] | None, catalog: Catalog) -> list[str]:
    """The sizes asked for in the catalog's spelling (exit 2 naming the valid ones); by default every size the catalog
    knows that is not retired."""
    from gpufleet.azure.prices import priceable_sizes
    from gpufleet.common.diagnostics import did_you_mean

    known = priceable_sizes(catalog)
    if given:
        unknown = [s for s in given if s.lower() not in known]
        if unknown:
            raise usage_error(
                f"unknown VM size {unknown[0]!r}; {did_you_mean(unknown[0], known.values())}"
                " (gpufleet catalog sizes lists the GPU sizes)"
            )
        return list(dict.fromkeys(known[s.lower()] for s in given))
    today = _dt.date.today()
    gpu = [s.name for s in catalog.vm_sizes if not s.retired(today)]
    return sorted({*gpu, *(s.name for s in catalog.system_vm_sizes)})


def _old_table(output: Path | None, catalog: Catalog) -> PriceTable | None:
    """The table at ``-o FILE`` being refreshed, or None for a new file; exit 1 when it is there but unusable."""
    from gpufleet.azure.prices import PriceTableError, read_price_table

    if output is None or not output.exists():
        return None
    try:
        return read_price_table(output, catalog, str(output))
    except PriceTableError as exc:
        err.print(f"[red]error:[/red] {shown(output)} is not a price table gpufleet can refresh: nothing written")
        print_diagnostics(err, exc.diagnostics, "  ")
        raise typer.Exit(EXIT_INVALID) from None


def _header(read: PriceRead, kept: int) -> list[str]:
    from gpufleet.azure.prices import API_VERSION, TERM_HOURS

    lines = [
        f"Azure VM prices in {read.table.currency} per hour (Linux), written by `gpufleet azure prices` on"
        f" {read.as_of.isoformat()} from",
        f"{read.url} (api-version {API_VERSION}, primary meter regions). Per size and region:",
        "pay_as_you_go the Linux Consumption row; spot its Spot meter (not Low Priority); reserved_1y and reserved_3y",
        f"the Reservation rows' price for the whole term divided by {TERM_HOURS['1 Year']:,} and"
        f" {TERM_HOURS['3 Years']:,} hours. Each entry's source is",
        "the query that returns its rows, as_of the date it was read. gpufleet reads this file before its shipped",
        "table (gpufleet's docs/azure.md); a size or region without an entry keeps the shipped price, or has none.",
    ]
    if kept:
        lines.append(f"Kept from the file this one replaced: {kept} size/region pair(s) not read this time.")
    if read.unpriced:
        missing = ", ".join(f"{s} in {r}" for s, r in read.unpriced)
        lines += ["No price row:", *_wrapped(missing, 110)]
    return lines


def _wrapped(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)


def _read(sizes: list[str], regions: list[str], catalog: Catalog, quiet: bool) -> PriceRead:
    from gpufleet.azure.prices import PricesError, RetailPricesClient, base_url, read_prices

    client = RetailPricesClient(url=base_url())
    today = _dt.datetime.now(_dt.UTC).date()
    say = None if quiet else (lambda m: err.print(f"[dim]{shown(m)}[/dim]"))
    try:
        return read_prices(sizes, regions, client=client, today=today, currency=catalog.currency, progress=say)
    except PricesError as exc:
        raise _fail(f"{exc}; nothing written") from None


@command(azure_app, "prices", "VM prices from the Azure Retail Prices API, as a price table.")
def prices(
    region: RegionsOpt = None,
    size: SizesOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Read VM prices from the Azure Retail Prices API (https://prices.azure.com/api/retail/prices, no credentials;
    $GPUFLEET_AZURE_PRICES_URL replaces that URL) and write them as a price table in the catalog's shape, each entry
    with its source (the query) and the date read: Linux pay-as-you-go, spot, and 1- and 3-year reservations per
    hour. Put the file at the stack repository's root (azure_prices.yaml) or in ~/.config/gpufleet/: cost, plan,
    size and promote then price with it before the shipped table (docs/azure.md).

    A summary of what was read goes to stderr; --json prints the table
    and the summary as JSON instead (docs/azure.md). Exit 1 when the
    API cannot be read (nothing written), 2 for an unknown region or size.
    """
    from gpufleet.azure.prices import merged, summary_lines, table_text
    from gpufleet.catalog import load_catalog
    from gpufleet.common.atomic import write_atomic

    catalog = load_catalog()
    regions = _regions(region, catalog, root)
    sizes = _sizes(size, catalog)
    old = _old_table(output, catalog)
    read = _read(sizes, regions, catalog, quiet=as_json)
    table, kept = merged(read, old)
    text = table_text(table, _header(read, kept))
    if output is not None:
        try:
            write_atomic(output, text)
        except OSError as exc:
            raise _fail(f"cannot write {output}: {exc.strerror or exc}") from None
    if as_json:
        emit_json(_json(table, read, output))
        return
    if output is None:
        sys.stdout.write(text)
    for line in summary_lines(read):
        err.print(shown(line))
    if output is not None:
        what = f"{len(table.prices)} size/region pair(s)" + (f", {kept} kept from before" if kept else "")
        err.print(f"wrote {shown(output)}: {what}")


def _json(table: PriceTable, read: PriceRead, output: Path | None) -> dict[str, Any]:
    keys = ("vm_size", "region", "pay_as_you_go", "spot", "reserved_1y", "reserved_3y", "source", "as_of")
    found = sorted(table.expand(str(output)), key=lambda p: (p.vm_size, p.region))
    return {
        "file": None if output is None else str(output),
        "currency": table.currency,
        "prices": [{k: p.model_dump(mode="json")[k] for k in keys} for p in found],
        "read": read.to_dict(),
    }
