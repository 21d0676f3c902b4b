"""``gpufleet cost STACK...|--all``: what each stack's AKS node pools cost, from the price tables (a user's refreshed
ones before the shipped one). The figures are :mod:`gpufleet.azure.cost`'s; this module only loads stacks, prints and
exits. :func:`priced_catalog_or_exit` is the price lookup of every command that shows a price (cost, plan, size,
promote)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    emit_json,
    err,
    out,
    print_diagnostics,
    print_table,
    project_root,
    resolve_or_exit,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    from decimal import Decimal

    from gpufleet.azure.cost import PoolCost, StackCost
    from gpufleet.catalog import Catalog, Price


def priced_catalog_or_exit(project: Path | None) -> Catalog:
    """The catalog priced with the user's price tables before the shipped one (``<project>/azure_prices.yaml``, then
    ``~/.config/gpufleet/azure_prices.yaml``: :func:`gpufleet.azure.prices.priced_catalog`); exit 1 with every problem
    of a table that cannot be used, at its file and line."""
    from gpufleet.azure.prices import PriceTableError, priced_catalog

    try:
        return priced_catalog(project)
    except PriceTableError as exc:
        err.print("[red]invalid price table[/red]: nothing priced (fix it, or move it away to use the shipped prices)")
        print_diagnostics(err, exc.diagnostics, "  ")
        raise typer.Exit(EXIT_INVALID) from None


def provenance(price: Price) -> str:
    """Where a price comes from, markup-safe: its table, its date and its source."""
    return f"{shown(price.table)}, as of {price.as_of.isoformat()}; source: {shown(price.source)}"


def cost(
    stacks: Annotated[
        list[str] | None,
        typer.Argument(help="Stack names (prod-westeurope) or stack files."),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every stack file (Pulumi.<stage>-<region>.yaml).")] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """What each node pool of a stack costs, per hour at its minimum, current and maximum node count, per month (730
    hours) at minimum and maximum, its idle cost and what spot saves; warnings for GPU pools that stay on in
    non-production stages. Prices: the project's azure_prices.yaml, then ~/.config/gpufleet/azure_prices.yaml (both
    written by gpufleet azure prices), then the shipped catalog/azure_prices.yaml; each pool says which table and
    date its price comes from. A size without a price shows "no price", never 0.

    JSON: one object for one STACK, a list with several or --all. Exit 1 when a stack is invalid (others shown).
    """
    from gpufleet.azure.cost import stack_cost
    from gpufleet.spec.files import stack_files
    from gpufleet.spec.load import load_stack

    if every and stacks:
        raise usage_error("name stacks or give --all, not both")
    if not every and not stacks:
        raise usage_error("name a stack (e.g. prod-westeurope) or give --all")
    project = project_root(root)
    if every:
        files = stack_files(project)
        if not files:
            raise usage_error(f"no stack files (Pulumi.<stage>-<region>.yaml) in {project}")
    else:
        files = [resolve_or_exit(ref, project) for ref in stacks or []]
    catalog = priced_catalog_or_exit(project)
    results: list[dict[str, Any]] = []
    invalid = False
    for number, file in enumerate(files):
        loaded = load_stack(file)
        if loaded.stack is None:
            invalid = True
            results.append({"stack": loaded.name, "ok": False, "errors": [d.to_dict() for d in loaded.diagnostics]})
            if not as_json:
                err.print(f"[red]invalid stack[/red] {shown(loaded.name)}: no cost computed")
                print_diagnostics(err, loaded.diagnostics, "  ")
            continue
        figures = stack_cost(loaded.stack, catalog)
        results.append(figures.to_dict())
        if not as_json:
            if number:
                out.print()
            render_stack_cost(figures)
    if as_json:
        emit_json(results[0] if len(results) == 1 and not every else results)
    if invalid:
        raise typer.Exit(EXIT_INVALID)


def _hourly(value: Decimal | None) -> str:
    """A table cell: the amount without its currency (the table's title names it)."""
    from gpufleet.azure.cost import money

    return money(value, "")


def _monthly(value: Decimal | None) -> str:
    from gpufleet.azure.cost import money

    return money(value, "", cents=False)


def _spot_line(p: PoolCost, currency: str) -> str | None:
    """What spot saves (a spot pool) or would save (the others) at the pool's maximum, when both prices are known."""
    from gpufleet.azure.cost import money

    saving = p.spot_savings_per_hour(p.nodes_max)
    if saving is None or p.nodes_max == 0:
        return None
    at = f"at {p.nodes_max} node(s)"
    if p.spot:
        return f"spot saves {money(saving, currency)}/h against pay-as-you-go {at}"
    return f"on spot it would cost {money(saving, currency)}/h less {at} (and could be evicted)"


def render_stack_cost(figures: StackCost) -> None:
    """One table per stack: a row per pool and the total of the priced pools; then each pool's size and price
    (source, date), what spot and reservations would change, notes and warnings. Fits 80 columns."""
    from gpufleet.azure.cost import HOURS_PER_MONTH, money

    cur = figures.currency
    out.print(
        f"[bold]{shown(figures.stack)}[/bold]  stage {shown(figures.stage)}, region {shown(figures.region)}:"
        f" {cur} per hour and per month ({HOURS_PER_MONTH} hours); nodes min/now/max"
    )
    if not figures.pools:
        for note in figures.notes:
            out.print(f"  {shown(note)}")
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("pool")
    for title in ("nodes", "min/h", "now/h", "max/h", "min/month", "max/month", "idle/h"):
        table.add_column(title, justify="right")
    for p in figures.pools:
        nodes = f"{p.nodes_min}/{p.nodes_now}/{p.nodes_max}"
        if p.priced:
            cells = [
                _hourly(p.per_hour(p.nodes_min)),
                _hourly(p.per_hour(p.nodes_now)),
                _hourly(p.per_hour(p.nodes_max)),
                _monthly(p.per_month(p.nodes_min)),
                _monthly(p.per_month(p.nodes_max)),
                _hourly(p.idle_per_hour),
            ]
        else:
            cells = [f"[yellow]{p.missing}[/yellow]", *["-"] * 5]
        table.add_row(shown(p.name), nodes, *cells)
    total = figures.totals
    table.add_section()
    table.add_row(
        "[bold]total[/bold]" if total.complete else "[bold]total[/bold]*",
        "",
        _hourly(total.per_hour_min),
        _hourly(total.per_hour_now),
        _hourly(total.per_hour_max),
        _monthly(total.per_month_min),
        _monthly(total.per_month_max),
        _hourly(total.idle_per_hour),
    )
    print_table(table)
    if not total.complete:
        out.print(f"  * without {shown(', '.join(total.unpriced))}: no price")
    for p in figures.pools:
        kind = "spot" if p.spot else "pay-as-you-go"
        if p.price is None:
            price = "no price"
        else:
            rate = money(p.usd_per_node_hour, cur) + "/h per node" if p.priced else str(p.missing)
            price = f"{kind} {rate} ({provenance(p.price)})"
        out.print(f"  {shown(p.name)}: {shown(p.vm_size)}, {price}")
        if spot := _spot_line(p, cur):
            out.print(f"    {spot}")
        reserved = [(term, p.reserved_per_month(term)) for term in ("1y", "3y")]
        if p.nodes_min and any(v is not None for _, v in reserved):
            terms = ", ".join(f"{money(v, cur, cents=False)} ({term})" for term, v in reserved if v is not None)
            out.print(
                f"    its {p.nodes_min} always-on node(s) reserved: {terms} a month, instead of"
                f" {money(p.per_month(p.nodes_min), cur, cents=False)}"
            )
    for note in figures.notes:
        out.print(f"  {shown(note)}")
    for warning in figures.warnings:
        out.print(f"  [yellow]warning:[/yellow] {shown(warning)}")


def pool_cost_line(p: PoolCost, figures: StackCost) -> str:
    """``plan``'s one line per pool (markup-safe): per hour and per month from min to max nodes, the rate, the idle
    cost; or why there is no figure."""
    from gpufleet.azure.cost import HOURS_PER_MONTH, money

    cur = figures.currency
    if not p.priced:
        tables = ", ".join(figures.price_tables)
        return f"cost: {p.missing} for {shown(p.vm_size)} in {shown(figures.region)} ({shown(tables)})"

    def span(low: Decimal | None, high: Decimal | None, cents: bool) -> str:
        ends = [money(low, cur, cents=cents), money(high, cur, cents=cents)]
        return ends[0] if ends[0] == ends[1] else "-".join(ends)

    hourly = span(p.per_hour(p.nodes_min), p.per_hour(p.nodes_max), True)
    monthly = span(p.per_month(p.nodes_min), p.per_month(p.nodes_max), False)
    basis = "spot" if p.spot else "pay-as-you-go"
    nodes = str(p.nodes_min) if p.nodes_min == p.nodes_max else f"{p.nodes_min}-{p.nodes_max}"
    return (
        f"cost {hourly}/h, {monthly}/month ({HOURS_PER_MONTH} h), {nodes} node(s) at {basis}"
        f" {money(p.usd_per_node_hour, cur)}/h; idle {money(p.idle_per_hour, cur)}/h"
    )


def pool_price_line(p: PoolCost) -> str | None:
    """``plan``'s line under a pool's cost line (markup-safe): where its price comes from; None without a price."""
    return None if p.price is None else f"price: {provenance(p.price)}"
