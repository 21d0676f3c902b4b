"""``gpufleet rightsize``: measured GPU use (Prometheus) -> a smaller MIG layout, fewer nodes, and the money saved, as
a reviewable edit of the stack file (docs/rightsize.md)."""

from __future__ import annotations

import datetime as dt
import difflib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

if TYPE_CHECKING:
    from gpufleet.fleet.rightsize import Proposal

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    StackArg,
    emit_json,
    err,
    out,
    planned_or_exit,
    print_table,
    shown,
    usage_error,
    write_output_or_exit,
)


def _at(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise usage_error(f"--at {text!r}: a time in RFC 3339 (2026-12-01T00:00:00Z) or Unix seconds") from None
    if moment.tzinfo is None:
        raise usage_error(f"--at {text!r}: say the time zone (Z or +01:00)")
    return moment.timestamp()


def rightsize(
    stack_ref: StackArg,
    prometheus: Annotated[
        str,
        typer.Option(
            "--prometheus",
            help="Base URL of the Prometheus that scrapes the stack's DCGM exporter (http or https, host, port, "
            "any path prefix). "
            "Auth from the environment: GPUFLEET_PROMETHEUS_TOKEN (bearer), or GPUFLEET_PROMETHEUS_USER and "
            "GPUFLEET_PROMETHEUS_PASSWORD (basic); TLS is verified (SSL_CERT_FILE names another CA bundle).",
        ),
    ],
    window: Annotated[
        str, typer.Option("--window", help="How far back to measure, a Prometheus duration: 7d, 36h, 1d12h.")
    ] = "7d",
    at: Annotated[
        str | None,
        typer.Option("--at", help="End of the window: RFC 3339 (2026-12-01T00:00:00Z) or Unix seconds; default now."),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("-o", "--output", help="Write the edited stack file here ('-': stdout); the stack is unchanged."),
    ] = None,
    write: Annotated[
        bool, typer.Option("--write", help="Edit the stack file in place (review it, then promote).")
    ] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Measured use -> proposal. Reads from Prometheus what each GPU and MIG instance of the stack's pools used over
    the window (the DCGM exporter's framebuffer and engine activity, aggregated by Prometheus), judges each workload
    (a pod's owner) over-provisioned, right or starved, proposes its MIG profile, each MIG pool's new layout on the
    fewest nodes (the fewest GPUs reconfigured: mig pack --current), the nodes to drain in order, the new node range
    and the monthly cost before and after (gpufleet cost's prices).

    The proposal is an edit of the stack file, shown as a diff; written only with -o FILE or --write, never applied:
    review it, then promote it as any change. Exit 1 when Prometheus cannot be asked or its data cannot be used (one
    line why). JSON: {stack, window, workloads:[...], pools:[...], cost:{before_usd_month, after_usd_month}, notes}.
    """
    from gpufleet.azure.cost import stack_cost
    from gpufleet.cli.common import project_root
    from gpufleet.cli.cost import priced_catalog_or_exit
    from gpufleet.fleet.prometheus import Prometheus, PrometheusError, parse_window
    from gpufleet.fleet.rightsize import RightsizeError, propose
    from gpufleet.fleet.usage import measure

    if write and output is not None:
        raise usage_error("give -o FILE or --write, not both")
    try:
        window_s = parse_window(window)
    except ValueError as exc:
        raise usage_error(f"--window: {exc}") from None
    end = _at(at)
    planned = planned_or_exit(stack_ref, root, as_json, "nothing measured")
    catalog = priced_catalog_or_exit(project_root(root))
    try:
        client = Prometheus(prometheus)
        if err.is_terminal and not as_json:
            with err.status(f"asking {shown(prometheus)}") as status:

                def progress(query: str) -> None:
                    status.update(f"asking {shown(prometheus)}: {query}")

                usage = measure(client, window, window_s, end, progress)
        else:
            usage = measure(client, window, window_s, end)
        proposal = propose(planned.stack, planned.plan, planned.catalog, stack_cost(planned.stack, catalog), usage)
    except (PrometheusError, RightsizeError) as exc:
        err.print(f"[red]error:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    _emit(proposal, Path(planned.loaded.file), as_json, write, output)


def _emit(proposal: Proposal, path: Path, as_json: bool, write: bool, output: Path | None) -> None:
    """The proposal (a table or JSON), the stack edit as a diff, and the edit written where asked."""
    from gpufleet.fleet.rightsize import edit_stack

    before = path.read_text(encoding="utf-8")
    after = edit_stack(before, proposal.pools)
    if as_json:
        emit_json(proposal.to_dict())
    else:
        _render(proposal)
        diff = "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), str(path), str(path)))
        out.print()
        if diff:
            out.print(f"[bold]the stack edit[/bold] ({shown(path.name)}):")
            out.print(diff, markup=False, end="")
        else:
            out.print("no change to the stack")
    if after == before:
        return
    if write:
        write_output_or_exit(after, path)
        err.print(f"wrote {shown(path)}: review it, then promote it")
    elif output is not None:
        write_output_or_exit(after, output)
        if str(output) != "-":
            err.print(f"wrote {shown(output)}")
    elif not as_json:
        out.print("not written: -o FILE writes the edited stack elsewhere, --write edits it in place")


def _gb(value: float) -> str:
    return f"{value:.1f}"


def _render(proposal: Proposal) -> None:
    from gpufleet.fleet.rightsize import MIB, layout_text

    out.print(f"[bold]{shown(proposal.stack)}[/bold], measured over {shown(proposal.window)}")
    table = Table(box=None, header_style="bold")
    for column in ("workload", "pool", "has", "p95 GB", "max GB", "active", "verdict", "proposal"):
        table.add_column(column, justify="right" if column.endswith("GB") or column == "active" else "left")
    for w in proposal.workloads:
        colour = {"over-provisioned": "yellow", "starved": "red"}.get(w.verdict, "green")
        suggestion = f"{w.proposed_instances} x {w.proposal}"
        if w.time_slicing_replicas:
            suggestion += f" (idle: time-slicing x{w.time_slicing_replicas})"
        table.add_row(
            shown(f"{w.namespace}/{w.owner}"),
            shown(w.pool),
            shown(f"{w.instances} x {w.has}"),
            _gb(w.p95_mib * MIB / 1e9),
            _gb(w.max_mib * MIB / 1e9),
            "-" if w.engine_active is None else f"{w.engine_active:.0%}",
            f"[{colour}]{w.verdict}[/{colour}]",
            shown(suggestion),
        )
    print_table(table)
    for p in proposal.pools:
        out.print()
        out.print(f"[bold]pool {shown(p.name)}[/bold] ({shown(p.gpu)}, {p.gpus_per_node} per node)")
        out.print(f"  MIG per node: {shown(layout_text(p.mig_before))} -> {shown(layout_text(p.mig_after))}")
        if p.config_after != p.config_before:
            out.print(f"  config name:  {shown(p.config_before)} -> {shown(p.config_after)}")
        out.print(f"  demand:       {_counts(p.demand_before)} -> {_counts(p.demand_after)}")
        out.print(f"  spare after:  {_counts(p.spare)}")
        out.print(f"  nodes:        {p.range_before} -> {p.range_after} (measured {p.nodes_measured})")
        freed = f"{p.gpus_freed} GPUs freed" if p.gpus_freed >= 0 else f"{-p.gpus_freed} GPUs added"
        out.print(f"  {freed}, {p.gpus_reconfigured} reconfigured ({p.gpus_changed_per_node} per kept node)")
        for number, step in enumerate(p.drains, start=1):
            out.print(f"  drain {number}: {shown(step.node)} ({step.action}, {step.instances_busy} busy instances)")
        if p.usd_month_before is not None and p.usd_month_after is not None:
            out.print(f"  $/month:      {p.usd_month_before:,.2f} -> {p.usd_month_after:,.2f}")
    if proposal.usd_month_before is not None and proposal.usd_month_after is not None:
        delta = proposal.usd_month_after - proposal.usd_month_before
        out.print(
            f"\nstack $/month: {proposal.usd_month_before:,.2f} -> {proposal.usd_month_after:,.2f} ({delta:+,.2f})"
        )
    else:
        out.print("\nstack $/month: no price for every pool (gpufleet cost says which)")
    for note in proposal.notes:
        out.print(f"note: {shown(note)}")


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{c} x {p}" for p, c in counts.items()) or "none"
