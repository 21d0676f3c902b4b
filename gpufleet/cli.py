"""The ``gpufleet`` command line: thin over the library (typer + rich), ``--json`` on every command.

Exit codes: 0 success, 1 the input is wrong (an invalid stack, an unknown GPU), 2 usage errors (bad options,
a stack name that names no file).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gpufleet import __version__

EXIT_INVALID = 1
EXIT_USAGE = 2

app = typer.Typer(
    name="gpufleet",
    help="GPU fleets as code: validated stacks, hardware-aware planners, Pulumi for AKS, Ansible for bare metal.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
mig_app = typer.Typer(help="MIG profiles and layouts per GPU model.", no_args_is_help=True)
app.add_typer(mig_app, name="mig")
lab_app = typer.Typer(
    help="The local bare-metal lab: Debian VMs with two NUMA nodes, an SR-IOV device and a Redfish BMC each.",
    no_args_is_help=True,
)
app.add_typer(lab_app, name="lab")
topology_app = typer.Typer(
    help="Host topology: NUMA nodes, CPU pinning, hugepages, SR-IOV, kubelet.", no_args_is_help=True
)
app.add_typer(topology_app, name="topology")

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
RootOpt = Annotated[
    Path | None,
    typer.Option("--root", help="Project root holding the stack files (default: the nearest Pulumi.yaml upward)."),
]


def _emit_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def _usage_error(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(EXIT_USAGE)


def _version(value: bool) -> None:
    if value:
        out.print(f"gpufleet {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """GPU fleets as code."""


# -- validate ------------------------------------------------------------------------------------------------


@app.command()
def validate(
    stacks: Annotated[
        list[str] | None,
        typer.Argument(help="Stack names (prod-westeurope) or stack files. Default: every Pulumi.<stack>.yaml."),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Validate stack files: every error as file:line: key.path: message, nothing applied.

    Exit 0 when all stacks are valid, 1 when any is invalid.
    """
    from gpufleet.spec import StackNotFound, find_project_root, load_stack, resolve_stack, stack_files

    project = root or find_project_root()
    if stacks:
        try:
            files = [resolve_stack(ref, project) for ref in stacks]
        except StackNotFound as exc:
            raise _usage_error(str(exc)) from None
    else:
        files = stack_files(project)
        if not files:
            raise _usage_error(f"no stack files (Pulumi.<stage>-<region>.yaml) in {project}")

    results = [load_stack(f) for f in files]
    if as_json:
        _emit_json([{"stack": r.name, "ok": r.ok, "errors": [d.to_dict() for d in r.diagnostics]} for r in results])
    else:
        for r in results:
            if r.ok:
                out.print(f"[green]ok[/green]      {r.name}  [dim]{r.file}[/dim]")
            else:
                out.print(f"[red]invalid[/red] {r.name}  [dim]{r.file}[/dim]")
                for d in r.diagnostics:
                    out.print(f"  {d}", markup=False)
        bad = [r for r in results if not r.ok]
        errors = sum(len(r.diagnostics) for r in bad)
        if bad:
            out.print(f"{len(bad)} of {len(results)} stack(s) invalid, {errors} error(s)")
        else:
            out.print(f"{len(results)} stack(s) valid")
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_INVALID)


# -- plan ----------------------------------------------------------------------------------------------------


def _load_or_exit(stack: str, root: Path | None, as_json: bool, consequence: str) -> Any:
    """The validated stack named ``stack`` (a name or a file); exit 2 when no such stack, 1 with every error when
    it is invalid (``consequence`` says what was not done)."""
    from gpufleet.spec import StackNotFound, find_project_root, load_stack, resolve_stack

    try:
        path = resolve_stack(stack, root or find_project_root())
    except StackNotFound as exc:
        raise _usage_error(str(exc)) from None
    loaded = load_stack(path)
    if loaded.stack is None:
        if as_json:
            _emit_json({"stack": loaded.name, "ok": False, "errors": [d.to_dict() for d in loaded.diagnostics]})
        else:
            err.print(f"[red]invalid stack[/red] {escape(loaded.name)}: {consequence}")
            for d in loaded.diagnostics:
                err.print(f"  {d}", markup=False)
        raise typer.Exit(EXIT_INVALID)
    return loaded.stack


@app.command()
def plan(
    stack: Annotated[str, typer.Argument(help="Stack name (prod-westeurope) or stack file.")],
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """What a stack describes, resolved against the hardware catalog: pools (GPU model, GPUs, vCPUs, RAM per
    node, MIG instances per node, derived labels) and bare-metal host groups."""
    from gpufleet.catalog import load_catalog
    from gpufleet.plan import plan_stack

    loaded = _load_or_exit(stack, root, as_json, "nothing planned")
    result = plan_stack(loaded, load_catalog())
    if as_json:
        _emit_json(result.to_dict())
        return
    _render_plan(result)


# -- render --------------------------------------------------------------------------------------------------


@app.command()
def render(
    stack: Annotated[str, typer.Argument(help="Stack name (prod-westeurope) or stack file.")],
    output: Annotated[
        Path | None,
        typer.Option(
            "--output", "-o", help="Write <chart>.yaml, nodes.yaml and summary.json here (created; parent must exist)."
        ),
    ] = None,
    chart: Annotated[
        str | None,
        typer.Option(
            help="Bare-metal stacks: the chart kubernetes.yml installs (gpu-operator, the default, or "
            "nvidia-device-plugin). An AKS stack's pools decide its chart."
        ),
    ] = None,
    charts_dir: Annotated[
        Path | None,
        typer.Option(
            "--charts-dir",
            help="Where the pinned charts are (default: $GPUFLEET_CHARTS_DIR, else ~/.cache/gpufleet/charts).",
        ),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Render the stack's GPU charts with helm (`helm template`, exactly the values the stack installs) and say
    where each GPU DaemonSet will run: on which pools / host groups, and why not on the others.

    Exit 0 when every GPU DaemonSet reaches every pool it must serve, 1 when one does not (the files are still
    written, for review), when the stack is invalid, or when a chart is missing or helm fails (nothing written).
    """
    from gpufleet import charts
    from gpufleet.catalog import load_catalog
    from gpufleet.plan import DEVICE_PLUGIN_CHART, GPU_OPERATOR_CHART, plan_stack

    if chart not in (None, GPU_OPERATOR_CHART, DEVICE_PLUGIN_CHART):
        raise _usage_error(f"--chart {escape(repr(chart))}: use {GPU_OPERATOR_CHART} or {DEVICE_PLUGIN_CHART}")
    loaded = _load_or_exit(stack, root, as_json, "nothing rendered")
    catalog = load_catalog()
    plan_ = plan_stack(loaded, catalog)
    if chart is not None and plan_.cluster is not None and chart != plan_.cluster["gpu_chart"]:
        raise _usage_error(
            f"--chart {chart}: stack {escape(plan_.stack)} is an AKS cluster whose pools decide its chart "
            f"({plan_.cluster['gpu_chart']}); --chart is for bare-metal stacks"
        )
    try:
        result = charts.render(
            loaded,
            plan_,
            catalog,
            directory=charts_dir,
            baremetal_chart=chart or GPU_OPERATOR_CHART,
            progress=lambda m: err.print(f"[dim]{escape(m)}[/dim]"),
        )
        written = charts.write(result, output) if output is not None else []
    except charts.ChartError as exc:
        err.print(f"[red]error:[/red] stack {escape(plan_.stack)}: {escape(str(exc))}")
        raise typer.Exit(EXIT_INVALID) from None
    if as_json:
        _emit_json(result.to_dict())
    else:
        _render_summary(result, written)
    if result.problems:
        raise typer.Exit(EXIT_INVALID)


def _render_summary(result: Any, written: list[Path]) -> None:
    if not result.charts:
        out.print(f"stack {escape(result.stack)} installs no GPU software (no GPU pools or GPU host groups)")
    for c in result.charts:
        kinds = ", ".join(f"{n} {k}" for k, n in c.kinds().items())
        out.print(
            f"[bold]{escape(c.release.chart)} {escape(c.release.version)}[/bold]: {len(c.objects)} objects ({kinds})"
        )
    for cov in result.coverage:
        runs = ", ".join(cov.runs_on) or "nothing"
        style = "red" if cov.kind == "Deployment" and not cov.runs_on else "bold"
        out.print(f"  {cov.kind} [{style}]{escape(cov.name)}[/{style}] runs on {escape(runs)}")
        for m in cov.misses:
            line = f"not on {escape(m.target)}: {escape(m.why)}"
            out.print(f"    {line}" if m.intended else f"    [red]{line}[/red]")
    for path in written:
        out.print(f"wrote {escape(str(path))}")
    for problem in result.problems:
        err.print(f"[red]error:[/red] {escape(problem)}")
    if result.charts and not result.problems:
        out.print("every GPU DaemonSet runs on every pool / host group it must serve")


def _render_plan(result: Any) -> None:
    """One block per pool / host group: readable at 80 columns and in logs."""
    out.print(f"[bold]{result.stack}[/bold]  stage {result.stage}, region {result.region}")
    out.print("release: " + ", ".join(f"{k} {v}" for k, v in result.release.items()))
    if result.cluster:
        c = result.cluster
        sp = c["system_pool"]
        out.print(
            f"\n[bold]AKS cluster {c['name']}[/bold]: Kubernetes {c['kubernetes']}, {c['sku_tier']} tier,"
            f" system pool {sp['name']} {sp['count']} x {sp['vm_size']}"
        )
        for p in result.pools:
            gpus = f"{p.gpu_partition} of a" if p.gpu_partition else f"{p.gpus_per_node} x"
            ib = ", InfiniBand" if p.infiniband else ""
            shape = f"{gpus} {p.gpu_model}, {p.vcpus} vCPU, {p.memory_gib:g} GiB{ib}"
            out.print(f"\n  [bold]{p.name}[/bold] (AKS node pool {p.aks_name})  {p.vm_size}: {shape}")
            n = p.nodes
            scale = f" (autoscaling {n['min']}-{n['max']})" if p.autoscaling else ""
            zones = f", zones {','.join(p.zones)}" if p.zones else ""
            spot = ", spot" if p.spot else ""
            total = p.gpus_total
            out.print(f"    nodes {n['count']}{scale}{zones}{spot}; GPUs {total['min']}-{total['max']}")
            out.print(f"    driver {p.driver} (AKS gpuProfile.driver {p.aks_gpu_driver}), os {p.os_sku}")
            if p.mig:
                inst = ", ".join(f"{k} x {prof}" for prof, k in p.mig["instances_per_node"].items())
                tag = p.mig.get("gpu_instance_profile") or p.mig.get("config_name")
                out.print(f"    MIG ({p.mig['managed_by']}-managed, {tag}): {inst} per node")
            if p.sharing["mode"] != "none":
                out.print(f"    sharing {p.sharing['mode']}, {p.sharing['replicas']} pods per GPU")
            out.print("    labels " + ", ".join(f"{k}={v}" for k, v in p.labels.items()), markup=False)
            out.print("    taints " + (", ".join(p.taints) or "none"), markup=False)
            out.print("    upgrade " + ", ".join(f"{k} {v}" for k, v in p.upgrade.items()))
    if result.baremetal:
        bm = result.baremetal
        out.print(
            f"\n[bold]bare metal[/bold]: inventory {bm['inventory']}, rollout serial {bm['rollout']['serial']},"
            f" max_fail_percentage {bm['rollout']['max_fail_percentage']}"
        )
        for g in result.host_groups:
            gpu = f"{g.gpus_per_host or '?'} x {g.gpu_model}" if g.gpu_model else "no GPU"
            out.print(f"\n  [bold]{g.name}[/bold]  {gpu}, tuning profile {g.tuning_profile}")
            out.print("    tuning " + ", ".join(f"{k}={v}" for k, v in g.tuning.items()))
            if g.mig:
                inst = g.mig["instances_per_host"]
                detail = ": " + ", ".join(f"{k} x {prof}" for prof, k in inst.items()) + " per host" if inst else ""
                out.print(f"    MIG {g.mig['config_name']}{detail}")


# -- mig -----------------------------------------------------------------------------------------------------


def _resolve_gpu(gpu: str, as_json: bool, empty: dict[str, Any]) -> Any:
    """A catalog GPU, or exit 1 naming the valid choices (JSON: ``empty`` with the reason)."""
    from gpufleet.catalog import UnknownGpu, load_catalog

    try:
        return load_catalog().gpu(gpu)
    except UnknownGpu as exc:
        if as_json:
            _emit_json({"gpu": gpu, **empty, "reason": str(exc)})
        else:
            err.print(f"[red]error:[/red] {exc}", markup=False)
        raise typer.Exit(EXIT_INVALID) from None


GpuArg = Annotated[
    str, typer.Argument(help="GPU: catalog name (H100-SXM5-80GB), PCI id (10de:2330) or nvidia-smi name.")
]


@mig_app.command("profiles")
def mig_profiles(gpu: GpuArg, as_json: JsonOpt = False) -> None:
    """The MIG profiles of one GPU model (slices, placements {starts}:size on the memory-slice axis, max
    instances per GPU, usable memory) and every maximal layout. Exit 1 for an unknown GPU or one without MIG."""
    from gpufleet import mig
    from gpufleet.catalog import load_catalog

    model = _resolve_gpu(gpu, as_json, {"mig": False, "profiles": []})
    if model.mig is None:
        reason = load_catalog().no_mig_reason(model)
        if as_json:
            _emit_json({"gpu": model.name, "mig": False, "profiles": [], "reason": reason})
        else:
            err.print(f"[red]error:[/red] {reason}")
        raise typer.Exit(EXIT_INVALID)

    geometry = model.mig
    layouts = mig.maximal_layouts(model)
    if as_json:
        _emit_json(
            {
                "gpu": model.name,
                "mig": True,
                "compute_slices": geometry.compute_slices,
                "memory_slices": geometry.memory_slices,
                "profiles": [p.model_dump(mode="json") for p in geometry.profiles],
                "maximal_layouts": [dict(lay) for lay in layouts],
            }
        )
        return
    table = Table(
        title=f"{model.name}: {geometry.compute_slices} compute slices, {geometry.memory_slices} memory slices"
    )
    for col in ("profile", "compute", "memory", "placement {starts}:size", "max/GPU", "usable GiB", "SMs"):
        table.add_column(col)
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
    out.print(table)
    out.print("[dim]n/p: not published by NVIDIA for this model (see gpufleet/catalog/gpus.yaml)[/dim]")
    out.print(f"\n{len(layouts)} maximal layouts (no instance can be added to any of them):")
    for lay in layouts:
        out.print(f"  {mig.layout_str(lay)}")


def _parse_profiles(args: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for arg in args:
        name, _, count = arg.partition("=")
        if count and not count.isdigit():
            raise _usage_error(f"{arg!r}: write PROFILE or PROFILE=COUNT, e.g. 1g.10gb=2")
        counts[name] = counts.get(name, 0) + (int(count) if count else 1)
    return counts


@mig_app.command("check")
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
        _emit_json(result.to_dict())
    else:
        if result.fits:
            spans = ", ".join(f"{p.profile}@{p.start}" for p in result.placements)
            out.print(f"[green]fits[/green] one {model.name}: {spans}  [dim](start slice of each instance)[/dim]")
        else:
            out.print(f"[red]does not fit[/red]: {result.reason}", markup=True)
        if show and model.mig is not None and (result.placements or result.partial or result.unplaced):
            out.print("\n".join(mig.diagram(model, result)), markup=False)
    if not result.fits:
        raise typer.Exit(EXIT_INVALID)


@mig_app.command("pack")
def mig_pack(
    demand: Annotated[Path, typer.Option("--demand", help="Demand file (YAML): instances per profile per GPU model.")],
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write the mig-parted config here ('-': stdout).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Pack a fleet-wide demand onto the fewest GPUs (then the fewest distinct layouts), with the lower bound it
    proved, and emit one mig-parted config per layout."""
    import time

    from gpufleet import mig
    from gpufleet.catalog import load_catalog
    from gpufleet.mig_demand import load_demand
    from gpufleet.mig_outputs import dump_yaml, mig_parted_config, packed_config_name, packed_layouts

    catalog = load_catalog()
    loaded = load_demand(demand, catalog)
    if not loaded.ok:
        if as_json:
            _emit_json({"ok": False, "errors": [d.to_dict() for d in loaded.diagnostics]})
        else:
            for d in loaded.diagnostics:
                err.print(str(d), markup=False)
        raise typer.Exit(EXIT_INVALID)
    started = time.perf_counter()
    result = mig.pack([(m.gpu, m.profiles) for m in loaded.models])
    seconds = time.perf_counter() - started
    config = mig_parted_config(packed_layouts(result, {m.gpu.name: m.gpu for m in loaded.models}))
    if output is not None:
        text = dump_yaml(config)
        if str(output) == "-":
            sys.stdout.write(text)
        else:
            output.write_text(text)
    if as_json:
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
        _emit_json(
            {
                "ok": True,
                "gpus": result.gpus,
                "lower_bound": result.lower_bound,
                "gap": result.gap,
                "seconds": round(seconds, 4),
                "models": models,
                "mig_parted": config,
            }
        )
        return
    if str(output) == "-":
        return
    notes = {m.gpu.name: m.notes for m in loaded.models}
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
    if output is not None:
        out.print(f"mig-parted config ({len(config['mig-configs'])} named configs) written to {output}")


# -- topology ------------------------------------------------------------------------------------------------


def _tuning_profile(name: str, stack: str | None, root: Path | None) -> Any:
    """A named tuning profile: from ``stack``, or the one definition the project's stacks agree on."""
    from gpufleet.spec import StackNotFound, find_project_root, load_stack, resolve_stack, stack_files
    from gpufleet.spec.models import DEFAULT_TUNING_PROFILE, TuningProfile

    project = root or find_project_root()
    if stack is not None:
        try:
            files = [resolve_stack(stack, project)]
        except StackNotFound as exc:
            raise _usage_error(str(exc)) from None
    else:
        files = stack_files(project)
    found: dict[str, Any] = {}
    for f in files:
        loaded = load_stack(f)
        if loaded.stack is None:
            if stack is not None:
                for d in loaded.diagnostics:
                    err.print(str(d), markup=False)
                raise typer.Exit(EXIT_INVALID)
            continue
        if name in loaded.stack.tuning_profiles:
            found[loaded.name] = loaded.stack.tuning_profiles[name]
    if not found:
        if name == DEFAULT_TUNING_PROFILE:
            return TuningProfile()
        where = f"stack {stack}" if stack else "any stack"
        raise _usage_error(f"no tuning profile {name!r} in {where} (gpufleet:tuning_profiles)")
    if len({p.model_dump_json() for p in found.values()}) > 1:
        raise _usage_error(f"tuning profile {name!r} differs between stacks {', '.join(found)}: name one with --stack")
    return next(iter(found.values()))


def _with_overrides(profile: Any, cores_per_gpu: str | None, reserve_cores: int | None) -> Any:
    """The profile with the command line's ``--cores-per-gpu`` / ``--reserve-cores``, validated as a stack's are."""
    from pydantic import ValidationError

    from gpufleet.spec.models import TuningProfile

    update: dict[str, Any] = {}
    if cores_per_gpu is not None:
        low, _, high = cores_per_gpu.partition("-")
        if not (low.isdigit() and (high.isdigit() or not _)):
            raise _usage_error(f"--cores-per-gpu {cores_per_gpu!r}: expected a number (8) or a range (4-16)")
        update["cores_per_gpu"] = {"min": int(low), "max": int(high or low)}
    if reserve_cores is not None:
        update["reserved_cores"] = reserve_cores
    if not update:
        return profile
    try:
        return TuningProfile.model_validate(profile.model_dump() | update)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(k) for k in problem["loc"]) or "cores_per_gpu"
        option = "--reserve-cores" if where.startswith("reserved") else "--cores-per-gpu"
        raise _usage_error(f"{option}: {problem['msg']}") from None


@topology_app.command("plan")
def topology_plan(
    host_root: Annotated[
        Path, typer.Option("--host-root", help="Root holding the host's sys/ and proc/ ('/' on the host itself).")
    ],
    profile: Annotated[
        str, typer.Option("--profile", help="Tuning profile name (gpufleet:tuning_profiles).")
    ] = "default",
    stack: Annotated[str | None, typer.Option("--stack", help="Stack whose tuning profile to use.")] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Host name for messages (default: the root's name).")
    ] = None,
    cores_per_gpu: Annotated[
        str | None,
        typer.Option(
            "--cores-per-gpu",
            metavar="N|MIN-MAX",
            help="Override the profile's cores_per_gpu: exactly N physical cores per GPU, or a range.",
        ),
    ] = None,
    reserve_cores: Annotated[
        int | None,
        typer.Option(
            "--reserve-cores",
            metavar="N",
            help="Override the profile's reserved_cores: N physical cores for the system.",
        ),
    ] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """The NUMA tuning plan of one host: CPUs per GPU, reserved and isolated CPUs, hugepages per node, kernel
    arguments, kubelet CPU/topology/memory managers, SR-IOV VFs, Slurm gres.conf. Each node's line says how its
    cores were split. Exit 1 when the profile cannot work on the host (too few cores for the GPUs, a GPU the catalog
    does not know...), 2 for a usage error."""
    from gpufleet.catalog import load_catalog
    from gpufleet.hostfacts import read_host
    from gpufleet.topology import TopologyError, plan

    tuning = _with_overrides(_tuning_profile(profile, stack, root), cores_per_gpu, reserve_cores)
    name = host or host_root.resolve().name or "localhost"
    if not (host_root / "sys/devices/system/node").is_dir():
        raise _usage_error(f"{host_root} has no sys/devices/system/node: not a host root")
    catalog = {pid: {"model": g.name, "mig": g.mig_capable} for g in load_catalog().gpus for pid in g.pci_ids}
    facts = read_host(str(host_root), catalog)
    try:
        result = plan(facts, tuning, name)
    except TopologyError as exc:
        if as_json:
            _emit_json({"host": name, "ok": False, "error": exc.reason})
        else:
            err.print(f"[red]error:[/red] {exc}", markup=True)
        raise typer.Exit(EXIT_INVALID) from None
    if as_json:
        _emit_json(result.to_dict())
        return
    _render_topology(result, facts)


def _render_topology(p: Any, facts: dict[str, Any]) -> None:
    """Per NUMA node: CPUs, memory, GPUs, NICs and what the plan assigns."""
    from gpufleet.hostfacts import format_cpulist

    cores = len(facts["cores"])
    cpus = sum(len(c["cpus"]) for c in facts["cores"])
    out.print(
        f"[bold]{p.host}[/bold]: {p.cpu_vendor}, kernel {p.kernel}, {len(p.numa_nodes)} NUMA node(s), {cores} cores /"
        f" {cpus} CPUs (SMT {'on' if p.smt else 'off'}), {len(p.gpus)} GPU(s), {len(facts['nics'])} NIC(s),"
        f" {len(facts['nvswitches'])} NVSwitch(es)"
    )
    nics = {n["pci"]: n for n in facts["nics"]}
    pages = {(h["numa_node"], h["size_kib"]): h["count"] for h in p.hugepages}
    for node in p.numa_nodes:
        out.print(
            f"\n[bold]NUMA node {node.id}[/bold]  CPUs {format_cpulist(node.cpus) or '-'} ({node.cores} cores),"
            f" {node.memory_mib / 1024:g} GiB"
        )
        if node.choice:
            out.print(f"  {node.choice}", markup=False)
        out.print(f"  reserved for the system  CPUs {format_cpulist(node.reserved_cpus) or '-'}")
        for g in (g for g in p.gpus if g.numa_node == node.id):
            near = ", ".join(f"{','.join(nics[n]['interfaces']) or n} ({nics[n]['kind']})" for n in g.nics) or "none"
            out.print(
                f"  GPU {g.index} {g.pci} {g.model or 'unknown model'}  CPUs {format_cpulist(g.cpus)}  NIC {near}",
                markup=False,
            )
        huge = [
            f"{pages[(node.id, s)]} x {'1G' if s == 1048576 else '2M'}"
            for s in (1048576, 2048)
            if (node.id, s) in pages
        ]
        out.print(f"  hugepages  {', '.join(huge) or 'none'}")
        for dev in (d for d in p.sriov if d["numa_node"] == node.id):
            out.print(
                f"  SR-IOV  {','.join(dev['interfaces']) or dev['pci']}: {dev['numvfs']} of {dev['totalvfs']} VFs"
            )
    unknown = [d for d in p.sriov if d["numa_node"] is None]
    for dev in unknown:
        out.print(f"  SR-IOV  {','.join(dev['interfaces']) or dev['pci']} (NUMA node unknown): {dev['numvfs']} VFs")
    k = p.kubelet
    out.print(f"\nkernel arguments  {' '.join(p.kernel_args) or '(none to add)'}")
    out.print(
        f"kubelet  cpuManagerPolicy {k['cpuManagerPolicy']}, reservedSystemCPUs {k['reservedSystemCPUs']},"
        f" topologyManagerPolicy {k['topologyManagerPolicy']} (scope {k['topologyManagerScope']}),"
        f" memoryManagerPolicy {k['memoryManagerPolicy']}, reservedMemory "
        + ", ".join(f"node {r['numaNode']} {r['limits']['memory']}" for r in k["reservedMemory"])
    )
    out.print(f"irqbalance banned CPUs  {p.irqbalance_banned_cpus or '-'}")
    out.print(f"system services CPUAffinity  {format_cpulist(p.system_cpu_affinity)}")
    if p.isolated_cpus:
        out.print(f"isolated CPUs  {format_cpulist(p.isolated_cpus)}")
    if p.gres_conf:
        out.print("Slurm gres.conf")
        for line in p.gres_conf:
            out.print(f"  {line}", markup=False)
    for note in p.notes:
        out.print(f"[dim]note: {note}[/dim]")


# -- lab -------------------------------------------------------------------------------------------------------

from gpufleet.lab.config import LAB_STACK  # noqa: E402


def _stamp(to_stderr: bool = False) -> Any:
    """A progress printer with seconds since start; on stderr when stdout carries --json output."""
    import time

    start = time.monotonic()

    from rich.markup import escape

    console = err if to_stderr else out

    def say(message: str) -> None:
        console.print(f"[dim]{time.monotonic() - start:6.0f}s[/dim]  {escape(message)}", markup=True, highlight=False)

    return say


def _lab(hosts: int, prefix: str = "lab", as_json: bool = False) -> Any:
    from gpufleet.lab import Lab

    return Lab(prefix, hosts, progress=_stamp(to_stderr=as_json))


def _lab_inventory(project: Path) -> Path:
    from gpufleet.spec import load_stack, resolve_stack

    loaded = load_stack(resolve_stack(LAB_STACK, project))
    if loaded.stack is None or loaded.stack.baremetal is None:
        for d in loaded.diagnostics:
            err.print(str(d), markup=False)
        raise typer.Exit(EXIT_INVALID)
    return project / loaded.stack.baremetal.inventory / "hosts.yml"


HostsOpt = Annotated[int, typer.Option("--hosts", min=1, max=4, help="Number of lab hosts.")]


def _prefix(value: str) -> str:
    import re

    if not re.fullmatch(r"[a-z][a-z0-9]{0,15}", value):
        raise typer.BadParameter(f"{value!r}: 1-16 lowercase letters and digits, starting with a letter")
    return value


PrefixOpt = Annotated[
    str,
    typer.Option(
        "--prefix", callback=_prefix, help="Host name prefix: labs side by side (Molecule scenarios use their own)."
    ),
]


InventoryOpt = Annotated[
    Path | None, typer.Option("--inventory", help="Where to write the inventory (default: the lab-local stack's).")
]


@lab_app.command("up")
def lab_up(
    hosts: HostsOpt = 2,
    fresh: Annotated[bool, typer.Option("--fresh", help="Recreate the hosts from the image.")] = False,
    prefix: PrefixOpt = "lab",
    inventory: InventoryOpt = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Build the image (cached), start libvirt and the Redfish emulator, power the hosts on through Redfish, wait
    for SSH and write inventories/lab-local/hosts.yml. Idempotent: running hosts are kept."""
    from gpufleet.lab import LabError
    from gpufleet.spec import find_project_root

    inventory = inventory or _lab_inventory(root or find_project_root())
    try:
        result = _lab(hosts, prefix, as_json).up(inventory=inventory, fresh=fresh)
    except LabError as exc:
        err.print(f"[red]lab up failed:[/red] {exc}", markup=True)
        raise typer.Exit(EXIT_INVALID) from None
    if as_json:
        _emit_json(
            {
                "accel": result.accel.name,
                "accel_reason": result.accel.reason,
                "backend": result.backend,
                "redfish": result.redfish,
                "hosts": [{"name": h.name, "ssh_port": h.ssh_port, "uuid": h.uuid} for h in result.hosts],
                "image_built": result.image_built,
                "image_seconds": round(result.image_seconds, 1),
                "boot_seconds": {k: round(v, 1) for k, v in result.boot_seconds.items()},
                "seconds": round(result.total_seconds, 1),
            }
        )
        return
    out.print(f"lab up in {result.total_seconds:.0f} s: {len(result.hosts)} host(s), inventory {inventory}")


@lab_app.command("status")
def lab_status(hosts: HostsOpt = 2, prefix: PrefixOpt = "lab", as_json: JsonOpt = False) -> None:
    """Hosts, their power state (through Redfish) and whether SSH answers."""
    rows = _lab(hosts, prefix, as_json).status()
    if as_json:
        _emit_json([r.__dict__ for r in rows])
        return
    if not rows:
        out.print("no lab hosts (gpufleet lab up)")
        return
    table = Table(title="lab hosts")
    for col in ("host", "SSH", "power (BMC)", "reachable", "BMC system id"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, f"127.0.0.1:{r.ssh_port}", r.power, "yes" if r.ssh else "no", r.uuid)
    out.print(table)


@lab_app.command("down")
def lab_down(hosts: HostsOpt = 2, prefix: PrefixOpt = "lab") -> None:
    """Power the hosts off through Redfish, remove them, and stop the daemons the lab started."""
    _lab(hosts, prefix).down()
    out.print("lab down")


def _playbook_exit(rc: int) -> typer.Exit:
    """A failed playbook's exit: 1 (a task failed) and 2 (a host unreachable or failed) as ansible-playbook gives
    them, 1 for anything else."""
    return typer.Exit(rc if rc in (1, 2) else 1)


@lab_app.command("converge")
def lab_converge(
    check: Annotated[bool, typer.Option("--check", help="Ansible check mode: report, change nothing.")] = False,
    limit: Annotated[str | None, typer.Option("--limit", help="Ansible host pattern.")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Run ansible/site.yml on the lab (facts -> plan -> roles), as on real hosts."""
    from gpufleet.lab.ansible_run import run_playbook
    from gpufleet.spec import find_project_root

    project = root or find_project_root()
    inventory = _lab_inventory(project)
    if not inventory.exists():
        raise _usage_error(f"{inventory} does not exist: run gpufleet lab up first")
    result = run_playbook(
        project / "ansible/site.yml", inventory, {"gpufleet_stack": LAB_STACK}, check=check, limit=limit,
        progress=_stamp(),
    )  # fmt: skip
    if as_json:
        _emit_json(
            {"rc": result.rc, "seconds": round(result.seconds, 1), "recap": result.recap, "log": str(result.log)}
        )
    else:
        for host, counts in sorted(result.recap.items()):
            out.print(f"{host}: " + " ".join(f"{k}={v}" for k, v in counts.items()), markup=False)
        out.print(f"site.yml {'(check mode) ' if check else ''}finished in {result.seconds:.0f} s, rc={result.rc}")
    if result.rc:
        raise _playbook_exit(result.rc)


@lab_app.command("run")
def lab_run(
    hosts: HostsOpt = 2,
    fresh: Annotated[bool, typer.Option("--fresh", help="Recreate the hosts from the image first.")] = False,
    since: Annotated[
        float | None,
        typer.Option("--since", help="When `make lab` started (epoch seconds): the time before is shown as setup."),
    ] = None,
    prefix: PrefixOpt = "lab",
    inventory: InventoryOpt = None,
    root: RootOpt = None,
) -> None:
    """The main job on the lab, as `make lab` runs it: up, converge (ansible/site.yml), verify, then the time of
    each phase (image, boot to SSH, converge, reboot, verify) and the total. Exit 1 when a host differs from its
    plan, the converge's exit code when it fails. The figures are kept in build/timings/make-lab.json
    (lab-run-<prefix>.json for another --prefix)."""
    import time

    from gpufleet.lab import LabError
    from gpufleet.lab.job import record, run_main_job
    from gpufleet.spec import find_project_root

    project = root or find_project_root()
    inventory = inventory or _lab_inventory(project)
    setup = max(0.0, time.time() - since) if since else None
    say = _stamp()
    try:
        result = run_main_job(project, inventory, _lab(hosts, prefix), say, setup_seconds=setup, fresh=fresh)
    except LabError as exc:
        err.print(f"[red]lab up failed:[/red] {exc}", markup=True)
        raise typer.Exit(EXIT_INVALID) from None
    for r in result.reports:
        out.print(r.render(), markup=False)
    record("make-lab" if prefix == "lab" else f"lab-run-{prefix}", result.to_dict(), project)
    out.print("lab phases:", markup=False)
    out.print(result.table(), markup=False, highlight=False)
    if result.converge_rc:
        out.print(f"site.yml failed (rc={result.converge_rc}); its log is in ~/.cache/gpufleet/lab/logs/")
        raise _playbook_exit(result.converge_rc)
    if not result.ok:
        raise typer.Exit(EXIT_INVALID)


@lab_app.command("verify")
def lab_verify(as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Each lab host's real state against its plan: NUMA nodes, /proc/cmdline, hugepages, VFs, kubelet pinning.
    Exit 1 when a host differs from its plan."""
    from gpufleet.lab.report import lab_report
    from gpufleet.spec import find_project_root

    project = root or find_project_root()
    reports = lab_report(_lab_inventory(project), LAB_STACK, project)
    if as_json:
        _emit_json([r.to_dict() for r in reports])
    else:
        for r in reports:
            out.print(r.render(), markup=False)
    if not all(r.ok for r in reports):
        raise typer.Exit(EXIT_INVALID)


# -- promote (gpufleet/cli_promote.py; imported last: it uses the helpers above) -----------------------------------

from gpufleet.cli_promote import promote_app  # noqa: E402

app.add_typer(promote_app, name="promote")


def main() -> None:
    app()
