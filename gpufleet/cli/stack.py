"""Commands on stack files: ``validate``, ``plan`` and ``render``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    StackArg,
    emit_json,
    err,
    out,
    planned_or_exit,
    print_diagnostics,
    project_root,
    resolve_or_exit,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    from gpufleet.azure.cost import StackCost
    from gpufleet.plan.model import AmdPartitionPlan, PoolPlan, StackPlan


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
    from gpufleet.spec.files import stack_files
    from gpufleet.spec.load import load_stack

    project = project_root(root)
    if stacks:
        files = [resolve_or_exit(ref, project) for ref in stacks]
    else:
        files = stack_files(project)
        if not files:
            raise usage_error(f"no stack files (Pulumi.<stage>-<region>.yaml) in {project}")

    results = [load_stack(f) for f in files]
    if as_json:
        emit_json([{"stack": r.name, "ok": r.ok, "errors": [d.to_dict() for d in r.diagnostics]} for r in results])
    else:
        for r in results:
            if r.ok:
                out.print(f"[green]ok[/green]      {shown(r.name)}  [dim]{shown(r.file)}[/dim]")
            else:
                out.print(f"[red]invalid[/red] {shown(r.name)}  [dim]{shown(r.file)}[/dim]")
                print_diagnostics(out, r.diagnostics, "  ")
        bad = [r for r in results if not r.ok]
        errors = sum(len(r.diagnostics) for r in bad)
        if bad:
            out.print(f"{len(bad)} of {len(results)} stack(s) invalid, {errors} error(s)")
        else:
            out.print(f"{len(results)} stack(s) valid")
    if not all(r.ok for r in results):
        raise typer.Exit(EXIT_INVALID)


def plan(
    stack: StackArg,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """What a stack describes, resolved against the hardware catalog: pools (GPU model, GPUs, vCPUs, RAM per
    node, MIG instances per node, derived labels) and bare-metal host groups."""
    from gpufleet.azure.cost import stack_cost
    from gpufleet.cli.cost import priced_catalog_or_exit

    planned = planned_or_exit(stack, root, as_json, "nothing planned")
    result = planned.plan
    costs = stack_cost(planned.stack, priced_catalog_or_exit(project_root(root)))
    if as_json:
        emit_json({**result.to_dict(), "cost": costs.to_dict()})
        return
    _render_plan(result, costs)


def render(
    stack: StackArg,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write <chart>.yaml, the DRA and monitoring objects, nodes.yaml and summary.json here (created; "
            "parent must exist).",
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
    from gpufleet.azure.cost import stack_cost
    from gpufleet.kube import charts
    from gpufleet.kube.gpu_software import DEVICE_PLUGIN_CHART, GPU_OPERATOR_CHART

    if chart not in (None, GPU_OPERATOR_CHART, DEVICE_PLUGIN_CHART):
        raise usage_error(f"--chart {chart!r}: use {GPU_OPERATOR_CHART} or {DEVICE_PLUGIN_CHART}")
    planned = planned_or_exit(stack, root, as_json, "nothing rendered")
    plan_ = planned.plan
    if chart is not None and plan_.cluster is not None and chart != plan_.cluster.gpu_chart:
        decided = plan_.cluster.gpu_chart or "no NVIDIA chart: it has no NVIDIA pool"
        raise usage_error(
            f"--chart {chart}: stack {plan_.stack} is an AKS cluster whose pools decide its chart "
            f"({decided}); --chart is for bare-metal stacks"
        )
    try:
        result = charts.render(
            plan_,
            directory=charts_dir,
            baremetal_chart=chart or GPU_OPERATOR_CHART,
            progress=lambda m: err.print(f"[dim]{shown(m)}[/dim]"),
            cost=stack_cost(planned.stack, planned.catalog) if planned.stack.aks is not None else None,
        )
        written = charts.write(result, output) if output is not None else []
    except charts.ChartError as exc:
        err.print(f"[red]error:[/red] stack {shown(plan_.stack)}: {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    if as_json:
        emit_json(result.to_dict())
    else:
        _render_summary(result, written)
    if result.problems:
        raise typer.Exit(EXIT_INVALID)


def _render_summary(result: Any, written: list[Path]) -> None:
    if not result.charts:
        out.print(f"stack {shown(result.stack)} installs no GPU software (no GPU pools or GPU host groups)")
    for c in result.charts:
        kinds = ", ".join(f"{n} {k}" for k, n in c.kinds().items())
        out.print(
            f"[bold]{shown(c.release.chart)} {shown(c.release.version)}[/bold]: {len(c.objects)} objects ({kinds})"
        )
    for g in result.generated:
        kinds = ", ".join(f"{n} {k}" for k, n in g.kinds().items())
        out.print(f"[bold]{shown(g.file)}[/bold] (gpufleet): {shown(kinds)}")
    for cov in result.coverage:
        runs = ", ".join(cov.runs_on) or "nothing"
        style = "red" if cov.kind == "Deployment" and not cov.runs_on else "bold"
        out.print(f"  {cov.kind} [{style}]{shown(cov.name)}[/{style}] runs on {shown(runs)}")
        for m in cov.misses:
            line = f"not on {shown(m.target)}: {shown(m.why)}"
            out.print(f"    {line}" if m.intended else f"    [red]{line}[/red]")
    for path in written:
        out.print(f"wrote {shown(path)}")
    for problem in result.problems:
        err.print(f"[red]error:[/red] {shown(problem)}")
    if result.charts and not result.problems:
        out.print("every GPU DaemonSet runs on every pool / host group it must serve")


def _render_plan(result: StackPlan, costs: StackCost) -> None:
    """One block per pool / host group: readable at 80 columns and in logs. Each pool's cost line is
    ``gpufleet cost``'s figures in one line."""
    from gpufleet.cli.cost import pool_cost_line, pool_price_line

    out.print(f"[bold]{result.stack}[/bold]  stage {result.stage}, region {result.region}")
    out.print("release: " + ", ".join(f"{k} {v}" for k, v in result.release.items()))
    if result.cluster:
        c = result.cluster
        sp = c.system_pool
        out.print(
            f"\n[bold]AKS cluster {shown(c.name)}[/bold]: Kubernetes {c.kubernetes}, {c.sku_tier} tier,"
            f" system pool {shown(sp.name)} {sp.count} x {shown(sp.vm_size)}"
        )
        if (system_cost := costs.pool(sp.name)) is not None:
            out.print(f"  system pool {pool_cost_line(system_cost, costs)}")
            if price := pool_price_line(system_cost):
                out.print(f"    {price}")
        _render_baseline(result)
        release = c.gpu_software
        cr = f" with a {c.operator_cr}" if c.operator_cr else ""
        if release is not None:
            out.print(f"  GPU software: {release.chart} {release.version}{cr}, namespace {shown(release.namespace)}")
        if (amd := c.amd_gpu_software) is not None:
            out.print(
                f"  AMD GPU software: {amd.chart} {amd.version} with a DeviceConfig, namespace {shown(amd.namespace)}"
            )
        for p in result.pools:
            _render_pool(p, costs)
    if result.baremetal:
        bm = result.baremetal
        out.print(
            f"\n[bold]bare metal[/bold]: inventory {bm.inventory}, rollout serial {bm.rollout.serial},"
            f" max_fail_percentage {bm.rollout.max_fail_percentage}"
            + (f", {len(bm.hosts)} BMC-managed host(s), engine {bm.engine}" if bm.hosts else "")
            + (", converged by pulumi up" if bm.converge else "")
        )
        for g in result.host_groups:
            gpu = f"{g.gpus_per_host or '?'} x {g.gpu_model}" if g.gpu_model else "no GPU"
            out.print(f"\n  [bold]{g.name}[/bold]  {gpu}, tuning profile {g.tuning_profile}")
            out.print("    tuning " + ", ".join(f"{k}={v}" for k, v in g.tuning.model_dump().items()))
            if g.mig:
                inst = g.mig.instances_per_node
                detail = ": " + ", ".join(f"{k} x {prof}" for prof, k in inst.items()) + " per host" if inst else ""
                out.print(f"    MIG {g.mig.config_name}{detail}")
            if g.amd_partitions is not None:
                out.print(f"    {_amd_partitions_line(g.amd_partitions)}", markup=False)
            if g.advertiser != "device-plugin" and g.vendor == "amd":
                out.print(f"    advertiser {g.advertiser} (the AMD GPU Operator's DeviceConfig)")
            elif g.advertiser != "device-plugin":
                out.print(f"    advertiser {g.advertiser} (GPU Operator: a {bm.operator_cr})")
            if g.gpu_workload not in (None, "container"):
                vgpu = f", vGPU config {g.vgpu.device_config or 'default'}" if g.vgpu else ""
                out.print(f"    GPUs for VMs: GPU Operator workload {g.gpu_workload}{shown(vgpu)}")
            for h in (h for h in bm.hosts if h.host_group == g.name):
                who = ", ".join(f"{k} {v}" for k, v in (("system", h.system_id), ("serial", h.serial)) if v)
                out.print(
                    f"    host {shown(h.name)}: BMC {shown(h.bmc.address)} ({shown(who)}), boot {h.boot.source},"
                    f" power {h.power}, SSH {shown(h.ssh.address)}:{h.ssh.port}"
                )


def _amd_partitions_line(parts: AmdPartitionPlan) -> str:
    """An AMD layout: who applies it, its profile and memory mode, and the logical GPUs per node."""
    who = "the AMD GPU Operator's DCM" if parts.managed_by == "operator" else "the amd_partition role"
    per_node = ", ".join(f"{n} x {pair}" for pair, n in (parts.logical_gpus or {}).items()) or "GPU count unknown"
    return f"AMD partitions {parts.profile} ({parts.memory}, applied by {who}): {per_node} per node"


def _api_line(p: PoolPlan) -> str:
    """How the pool reaches AKS: NAP objects, the SDK's typed AgentPool, or the generic ARM resource at a newer API
    version (with what needs it, and whether that is a preview API)."""
    if p.kind == "nap" or p.api is None:
        from gpufleet.kube.nap import object_name

        return f"node auto-provisioning: Karpenter NodePool and AKSNodeClass {object_name(p)}"
    if not p.api.generic:
        return f"AKS API {p.api.version} (typed AgentPool)"
    kind = "PREVIEW API" if p.api.preview else "API"
    return f"AKS {kind} {p.api.version} (generic ARM resource) for {', '.join(p.api.needs)}"


def _render_pool(p: PoolPlan, costs: StackCost) -> None:
    from gpufleet.cli.cost import pool_cost_line, pool_price_line

    gpus = f"{p.gpu_partition} of a" if p.gpu_partition else f"{p.gpus_per_node} x"
    ib = ", InfiniBand" if p.infiniband else ""
    shape = f"{gpus} {p.gpu_model}, {p.vcpus} vCPU, {p.memory_gib:g} GiB{ib}"
    where = "NAP pool" if p.kind == "nap" else f"AKS node pool {shown(p.aks_name)}"
    out.print(f"\n  [bold]{shown(p.name)}[/bold] ({where})  {shown(p.vm_size)}: {shape}")
    n = p.nodes
    scale = f" (NAP: up to {n.max})" if p.kind == "nap" else f" (autoscaling {n.min}-{n.max})" if p.autoscaling else ""
    zones = f", zones {','.join(p.zones)}" if p.zones else ""
    spot = ", spot" if p.spot else ""
    total = p.gpus_total
    out.print(f"    nodes {n.count}{scale}{zones}{spot}; GPUs {total['min']}-{total['max']}")
    if (pool_cost := costs.pool(p.name)) is not None:
        out.print(f"    {pool_cost_line(pool_cost, costs)}")
        if price := pool_price_line(pool_cost):
            out.print(f"      {price}")
        for warning in pool_cost.warnings:
            out.print(f"    [yellow]warning:[/yellow] {shown(warning)}")
    managed = ", GPU stack managed by AKS" if p.gpu_management == "managed" else ""
    out.print(f"    driver {p.driver} (AKS gpuProfile.driver {p.aks_gpu_driver}), os {p.os_sku}{managed}")
    out.print(f"    {_api_line(p)}", markup=False)
    if p.mig:
        inst = ", ".join(f"{k} x {prof}" for prof, k in (p.mig.instances_per_node or {}).items())
        tag = p.mig.gpu_instance_profile or p.mig.config_name
        strategy = f", strategy {p.mig.strategy}" if p.gpu_management == "managed" and p.mig.strategy else ""
        out.print(f"    MIG ({p.mig.managed_by}-managed, {tag}{strategy}): {inst} per node")
    if p.amd_partitions is not None:
        out.print(f"    {_amd_partitions_line(p.amd_partitions)}", markup=False)
    if p.sharing.mode != "none":
        out.print(f"    sharing {p.sharing.mode}, {p.sharing.replicas} pods per GPU")
    if p.advertiser != "device-plugin":
        out.print(f"    advertiser {p.advertiser}" + (", NVLink across nodes" if p.nvlink_multi_node else ""))
    out.print("    labels " + ", ".join(f"{k}={v}" for k, v in p.labels.items()), markup=False)
    out.print("    taints " + (", ".join(p.taints) or "none"), markup=False)
    if p.kind == "agentpool":
        upgrade = p.upgrade.model_dump(exclude_none=True)
        out.print("    upgrade " + ", ".join(f"{k} {v}" for k, v in upgrade.items()))


def _render_baseline(result: StackPlan) -> None:
    """The cluster's access, network and egress settings, and its AKS secure baseline: waived and failing rules."""
    from gpufleet.azure.baseline import audit

    c = result.cluster
    assert c is not None
    api = c.security.api_server
    if api.private:
        access = "private"
    elif api.authorized_ip_ranges:
        nat = " + the NAT gateway's address" if c.egress.authorize_nat_ip else ""
        access = f"authorized ranges {', '.join(api.authorized_ip_ranges)}{nat}"
    else:
        access = "open to every address"
    out.print(f"  API server {access}; network policy {c.network.policy}; egress {c.egress.outbound_type}")
    report = audit(result)
    counts = {status: sum(1 for r in report.results if r.status == status) for status in ("pass", "waived", "fail")}
    out.print(
        f"  security baseline: {counts['pass']} pass, {counts['waived']} waived, {counts['fail']} failing"
        f" (gpufleet audit {shown(result.stack)})"
    )
    for r in report.results:
        if r.status == "waived":
            out.print(f"    [yellow]waived[/yellow] {r.rule.name} ({r.rule.severity}): {shown(r.reason or '')}")
        elif r.status == "fail":
            style = "red" if r.blocking else "yellow"
            out.print(f"    [{style}]fails[/{style}] {r.rule.name} ({r.rule.severity}): {shown(r.detail)}")
