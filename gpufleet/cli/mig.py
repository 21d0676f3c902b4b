"""``gpufleet mig``: MIG profiles of a GPU model, does a set of instances fit one GPU, fleet packing."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

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
    print_diagnostics,
    print_table,
    shown,
    usage_error,
    write_output_or_exit,
)

mig_app = group("MIG profiles and layouts per GPU model.")


def _resolve_gpu(gpu: str, as_json: bool, empty: dict[str, Any]) -> Any:
    """A catalog GPU, or exit 1 naming the valid choices (JSON: ``empty`` with the reason)."""
    from gpufleet.catalog import UnknownGpu, load_catalog

    try:
        return load_catalog().gpu(gpu)
    except UnknownGpu as exc:
        if as_json:
            emit_json({"gpu": gpu, **empty, "reason": str(exc)})
        else:
            err.print(f"[red]error:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None


GpuArg = Annotated[
    str, typer.Argument(help="GPU: catalog name (H100-SXM5-80GB), PCI id (10de:2330) or nvidia-smi name.")
]


@command(mig_app, "profiles", "A GPU model's MIG profiles and every maximal layout.")
def mig_profiles(gpu: GpuArg, as_json: JsonOpt = False) -> None:
    """The MIG profiles of one GPU model (slices, placements {starts}:size on the memory-slice axis, max
    instances per GPU, usable memory) and every maximal layout. Exit 1 for an unknown GPU or one without MIG."""
    from gpufleet import mig
    from gpufleet.catalog import load_catalog

    model = _resolve_gpu(gpu, as_json, {"mig": False, "profiles": []})
    if model.mig is None:
        reason = load_catalog().no_mig_reason(model)
        if as_json:
            emit_json({"gpu": model.name, "mig": False, "profiles": [], "reason": reason})
        else:
            err.print(f"[red]error:[/red] {shown(reason)}")
        raise typer.Exit(EXIT_INVALID)

    geometry = model.mig
    layouts = mig.maximal_layouts(model)
    if as_json:
        emit_json(
            {
                "gpu": model.name,
                "mig": True,
                "compute_slices": geometry.compute_slices,
                "memory_slices": geometry.memory_slices,
                "min_driver_branch": geometry.min_driver_branch,
                "profiles": [p.model_dump(mode="json") for p in geometry.profiles],
                "maximal_layouts": [dict(lay) for lay in layouts],
            }
        )
        return
    table = Table(
        title=f"{model.name}: {geometry.compute_slices} compute slices, {geometry.memory_slices} memory slices"
    )
    # profile names are never cut (1g.24gb+me.all); placements wrap rather than lose their ends
    table.add_column("profile", no_wrap=True, min_width=max(len(p.name) for p in geometry.profiles))
    for col in ("compute", "memory", "placement {starts}:size", "max/GPU", "usable GiB", "SMs"):
        table.add_column(col, overflow="fold")
    for p in geometry.profiles:
        table.add_row(
            p.name,
            str(p.compute_slices),
            str(p.memory_slices),
            p.placement,
            str(p.max_count),
            f"{p.usable_gib:.2f}" if p.usable_gib is not None else "n/p",
            str(p.sms) if p.sms is not None else "n/p",
        )
    print_table(table)
    out.print("[dim]n/p: not published by NVIDIA for this model (see gpufleet/catalog/gpus.yaml)[/dim]")
    branch = f"R{geometry.min_driver_branch}" if geometry.min_driver_branch else "not published"
    out.print(f"oldest driver branch with MIG on {model.name}: {branch}")
    out.print(f"\n{len(layouts)} maximal layouts (no instance can be added to any of them):")
    for lay in layouts:
        out.print(f"  {mig.layout_str(lay)}")


def _parse_profiles(args: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for arg in args:
        name, _, count = arg.partition("=")
        if count and not (count.isascii() and count.isdigit()):
            raise usage_error(f"{arg!r}: write PROFILE or PROFILE=COUNT, e.g. 1g.10gb=2")
        if len(count) > 6:
            raise usage_error(f"{arg[:40]!r}...: a count of at most 6 digits (one GPU holds at most 7 instances)")
        counts[name] = counts.get(name, 0) + (int(count) if count else 1)
    return counts


@command(mig_app, "check", "Does a set of MIG instances fit one GPU, and where.")
def mig_check(
    gpu: GpuArg,
    profiles: Annotated[list[str], typer.Argument(help="Instances: PROFILE or PROFILE=COUNT, e.g. 3g.40gb=2 1g.10gb")],
    show: Annotated[bool, typer.Option("--show", help="Draw the memory slices with each instance's span.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Does this set of instances fit one GPU? Exit 0 with the placement (start slice of each instance),
    exit 1 with the reason."""
    from gpufleet import mig
    from gpufleet.catalog import load_catalog

    counts = _parse_profiles(profiles)
    model = _resolve_gpu(gpu, as_json, {"fits": False, "placements": []})
    catalog = load_catalog()
    result = mig.check(model, counts, owners={name: catalog.mig_profile_owners(name) for name in counts})
    if as_json:
        emit_json(result.to_dict())
    else:
        if result.fits:
            spans = ", ".join(f"{p.profile}@{p.start}" for p in result.placements)
            out.print(f"[green]fits[/green] one {model.name}: {spans}  [dim](start slice of each instance)[/dim]")
        else:
            out.print(f"[red]does not fit[/red]: {shown(result.reason)}")
        if show and model.mig is not None and (result.placements or result.partial or result.unplaced):
            out.print("\n".join(mig.diagram(model, result)), markup=False)
    if not result.fits:
        raise typer.Exit(EXIT_INVALID)


@command(mig_app, "pack", "Pack a MIG demand onto the fewest GPUs, or repack a fleet.")
def mig_pack(
    demand: Annotated[Path, typer.Option("--demand", help="Demand file (YAML): instances per profile per GPU model.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the mig-parted config here ('-': stdout).")
    ] = None,
    current: Annotated[
        Path | None,
        typer.Option("--current", help="Fleet file (YAML): the GPUs and the layouts they have now; repack it."),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Pack a fleet-wide demand onto the fewest GPUs (then the fewest distinct layouts), with the lower bound it
    proved, and emit one mig-parted config per layout. With --current, repack the fleet instead: meet the demand
    changing the fewest GPUs (each needs a drain), then using the fewest; print which GPUs change and why, the
    lower bound on changed GPUs, and the mig-parted config of the changed hosts."""
    import time

    from gpufleet import mig
    from gpufleet.catalog import load_catalog
    from gpufleet.mig.demand import load_demand
    from gpufleet.mig.outputs import mig_parted_config, packed_layouts

    if output is not None and str(output) != "-":
        if output.is_dir():
            raise usage_error(f"--output {output}: is a directory; name the file to write")
        if not output.resolve().parent.is_dir():
            raise usage_error(f"--output {output}: directory {output.resolve().parent} does not exist")
    catalog = load_catalog()
    loaded = load_demand(demand, catalog)
    if current is not None:
        _repack(current, loaded, output, as_json)
        return
    if not loaded.ok:
        if as_json:
            emit_json({"ok": False, "errors": [d.to_dict() for d in loaded.diagnostics]})
        else:
            print_diagnostics(err, loaded.diagnostics)
        raise typer.Exit(EXIT_INVALID)
    started = time.perf_counter()
    result = mig.pack([(m.gpu, m.profiles) for m in loaded.models])
    seconds = time.perf_counter() - started
    config = mig_parted_config(packed_layouts(result, {m.gpu.name: m.gpu for m in loaded.models}))
    if output is not None:
        _write_config(config, output)
    if as_json:
        emit_json(_pack_json(result, config, seconds))
    elif str(output) != "-":
        _print_pack(result, {m.gpu.name: m.notes for m in loaded.models}, seconds)
        if output is not None:
            out.print(f"mig-parted config ({len(config['mig-configs'])} named configs) written to {output}")


def _pack_json(result: Any, config: dict[str, Any], seconds: float) -> dict[str, Any]:
    """``mig pack --json``: per GPU model the GPUs, the bound, the layouts with their config names; the config."""
    from gpufleet.mig.outputs import packed_config_name

    models = []
    for m in result.models:
        layouts = [
            {"config": packed_config_name(m.gpu, i), "gpus": n, "mig_devices": dict(lay)}
            for i, (lay, n) in enumerate(m.layouts, start=1)
        ]
        models.append(
            {
                "gpu": m.gpu,
                "demand": m.demand,
                "gpus": m.gpus,
                "lower_bound": m.lower_bound,
                "gap": m.gap,
                "spare": m.spare,
                "layouts_proven": m.layouts_proven,
                "layouts": layouts,
            }
        )
    return {
        "ok": True,
        "gpus": result.gpus,
        "lower_bound": result.lower_bound,
        "gap": result.gap,
        "seconds": round(seconds, 4),
        "models": models,
        "mig_parted": config,
    }


def _print_pack(result: Any, notes: dict[str, list[str]], seconds: float) -> None:
    """Per GPU model its GPUs and bound, each layout with its GPU count, then the fleet's figures."""
    from gpufleet import mig
    from gpufleet.mig.outputs import packed_config_name

    layouts = 0
    for m in result.models:
        out.print(f"[bold]{m.gpu}[/bold]: {m.gpus} GPUs (lower bound {m.lower_bound}, gap {m.gap})")
        for note in notes[m.gpu]:
            out.print(f"  {note}", markup=False)
        for i, (lay, count) in enumerate(m.layouts, start=1):
            out.print(f"  {count:>6} x  {mig.layout_str(lay)}  [dim]config {packed_config_name(m.gpu, i)}[/dim]")
        layouts += len(m.layouts)
        if m.spare:
            out.print("  spare instances: " + ", ".join(f"{c} x {p}" for p, c in m.spare.items()))
        if not m.layouts_proven:
            out.print("  [dim]fewest layouts: best found (the search for fewer stopped at its budget)[/dim]")
    pct = 100 * result.gap / result.lower_bound if result.lower_bound else 0.0
    out.print(
        f"fleet: {result.gpus} GPUs, lower bound {result.lower_bound}, gap {result.gap} ({pct:.2f}%),"
        f" {layouts} layouts, packed in {seconds * 1000:.0f} ms"
    )


SHOWN_CHANGES = 40  # changed GPUs listed per model in the human output; --json lists all


def _write_config(config: dict[str, Any], output: Path) -> None:
    """The mig-parted config to ``output`` ('-': stdout), crash-safely; exit 1 with one line when it cannot be
    written."""
    from gpufleet.mig.outputs import dump_yaml

    write_output_or_exit(dump_yaml(config), output)


def _repack(current: Path, loaded: Any, output: Path | None, as_json: bool) -> None:
    """``mig pack --current FLEET --demand DEMAND``: both files validated (every error at file:line), then the
    repack, its figures, and the mig-parted config of the changed hosts."""
    import time

    from gpufleet.catalog import load_catalog
    from gpufleet.mig.current import load_current
    from gpufleet.mig.repack import repack, repack_config

    fleet = load_current(current, load_catalog())
    diagnostics = [*fleet.diagnostics, *loaded.diagnostics]
    if diagnostics:
        if as_json:
            emit_json({"ok": False, "errors": [d.to_dict() for d in diagnostics]})
        else:
            print_diagnostics(err, diagnostics)
        raise typer.Exit(EXIT_INVALID)
    started = time.perf_counter()
    result = repack([(m.gpu, m.gpus) for m in fleet.models], [(m.gpu, m.profiles) for m in loaded.models])
    seconds = time.perf_counter() - started
    gpus = {m.gpu.name: m.gpu for m in (*fleet.models, *loaded.models)}
    config = repack_config(result, {m.gpu.name: m.gpus for m in fleet.models}, gpus)
    if output is not None:
        _write_config(config.config, output)
    if as_json:
        emit_json(_repack_json(result, config, seconds))
    elif str(output) != "-":
        _print_repack(result, config, {m.gpu.name: m.notes for m in loaded.models}, seconds)
        if output is not None:
            out.print(f"mig-parted config ({len(config.config['mig-configs'])} named configs) written to {output}")


def _why(change: Any, shortfall: dict[str, int]) -> str:
    """Which demand a changed or added GPU serves: the instances the fleet lacks, else what it makes room for."""
    short = [f"{count} x {name}" for name, count in change.serves.items() if name in shortfall]
    if short:
        return "adds " + ", ".join(short) + " the fleet lacks"
    return "re-creates " + ", ".join(f"{c} x {n}" for n, c in change.serves.items()) + " on a GPU the demand keeps"


def _repack_json(result: Any, config: Any, seconds: float) -> dict[str, Any]:
    """``mig pack --current --json``: the fleet's counts, per model every changed, added and idle GPU."""
    models = []
    for m in result.models:
        models.append(
            {
                "gpu": m.gpu,
                "demand": m.demand,
                "fleet": m.fleet,
                "changed": m.changed,
                "unchanged": m.unchanged,
                "unchanged_serving": m.unchanged_used,
                "idle": len(m.idle),
                "added": m.added,
                "used": m.used,
                "lower_bound": m.lower_bound,
                "proven": m.proven,
                "shortfall": m.shortfall,
                "surplus": m.surplus,
                "spare": m.spare,
                "changes": [
                    {
                        "host": c.host,
                        "index": c.index,
                        "from": dict(c.before),
                        "to": dict(c.after),
                        "serves": c.serves,
                        "why": _why(c, m.shortfall),
                        "config": config.hosts[c.host],
                    }
                    for c in m.changes
                ],
                "additions": [
                    {"to": dict(c.after), "serves": c.serves, "why": _why(c, m.shortfall)} for c in m.additions
                ],
                "idle_gpus": [{"host": g.host, "index": g.index} for g in m.idle],
            }
        )
    return {
        "ok": True,
        "changed": result.changed,
        "unchanged": result.unchanged,
        "added": result.added,
        "lower_bound": result.lower_bound,
        "proven": result.proven,
        "seconds": round(seconds, 4),
        "models": models,
        "hosts": config.hosts,
        "mig_parted": config.config,
    }


def _print_repack(result: Any, config: Any, notes: dict[str, list[str]], seconds: float) -> None:
    """Per GPU model its counts and bound, what the fleet lacks and has beyond the demand, each changed GPU
    (host/index: from -> to, why), the additions; then the fleet's figures."""
    from collections import Counter

    from gpufleet import mig

    def counts(c: dict[str, int]) -> str:
        return ", ".join(f"{n} x {p}" for p, n in c.items()) or "nothing"

    for m in result.models:
        state = "optimal" if m.proven else "best found"
        out.print(
            f"[bold]{shown(m.gpu)}[/bold]: {m.fleet} GPUs, {m.changed} changed, {m.unchanged} unchanged"
            f" ({m.unchanged_used} serving, {len(m.idle)} idle), {m.added} added;"
            f" lower bound {m.lower_bound} changed ({state})"
        )
        for note in notes.get(m.gpu, []):
            out.print(f"  {note}", markup=False)
        out.print(
            f"  the fleet as it is lacks {counts(m.shortfall)}; has beyond the demand {counts(m.surplus)}", markup=False
        )
        for c in m.changes[:SHOWN_CHANGES]:
            before = mig.layout_str(c.before) or "no instances"
            line = f"  change {c.host}/{c.index}: {before} -> {mig.layout_str(c.after)}  ({_why(c, m.shortfall)})"
            out.print(line, markup=False)
        if m.changed > SHOWN_CHANGES:
            out.print(f"  ... and {m.changed - SHOWN_CHANGES} more changed GPUs (--json lists every one)", markup=False)
        for layout, count in Counter(c.after for c in m.additions).items():
            why = _why(next(c for c in m.additions if c.after == layout), m.shortfall)
            out.print(f"  add {count} x GPU: {mig.layout_str(layout)}  ({why})", markup=False)
        if m.idle:
            out.print(f"  {len(m.idle)} GPU(s) the demand does not need stay as they are (idle)", markup=False)
    labels = sorted(config.hosts.items())
    for host, name in labels[:SHOWN_CHANGES]:
        out.print(f"  label {host}: nvidia.com/mig.config={name}", markup=False)
    if len(labels) > SHOWN_CHANGES:
        out.print(f"  ... and {len(labels) - SHOWN_CHANGES} more hosts to label (--json: hosts)", markup=False)
    state = "optimal" if result.proven else "best found"
    out.print(
        f"fleet: {result.changed} changed, {result.unchanged} unchanged, {result.added} added,"
        f" lower bound {result.lower_bound} changed ({state})"
    )
    out.print(f"[dim]repacked in {seconds * 1000:.0f} ms[/dim]")
