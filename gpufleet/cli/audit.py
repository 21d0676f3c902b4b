"""``gpufleet audit``: a stack's AKS cluster against the AKS secure baseline (:mod:`gpufleet.azure.baseline`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from gpufleet.cli.common import EXIT_INVALID, JsonOpt, RootOpt, StackArg, emit_json, out, planned_or_exit, shown

if TYPE_CHECKING:
    from gpufleet.azure.baseline import Audit
    from gpufleet.spec.load import LoadedStack

STYLE = {"pass": "green", "waived": "yellow", "fail": "red"}


def audit(stack: StackArg, as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Check a stack's AKS cluster against the AKS secure baseline: every rule by its PSRule for Azure name
    (gpufleet.AKS.* where PSRule has no rule) with its severity and pass, fail, or waived with the stack's reason.
    Offline, from the stack file alone: it judges the plan the Pulumi program builds.

    Exit 0 when no high or medium rule fails (a waived rule does not count), 1 when one does or when the stack is
    invalid; the Pulumi program refuses to build such a cluster.
    """
    from gpufleet.azure.baseline import audit as audit_plan

    planned = planned_or_exit(stack, root, as_json, "nothing audited")
    loaded = planned.loaded
    report = audit_plan(planned.plan)
    if as_json:
        emit_json(_json(report, loaded))
    else:
        _print(report, loaded)
    if not report.ok:
        raise typer.Exit(EXIT_INVALID)


def _json(report: Audit, loaded: LoadedStack) -> dict[str, Any]:
    data = report.to_dict()
    for rule, result in zip(data["rules"], report.results, strict=True):
        where = loaded.place(result.rule.setting, "")
        rule.update(file=where.file, line=where.line)
    return data


def _print(report: Audit, loaded: LoadedStack) -> None:
    if not report.results:
        out.print(f"stack {shown(report.stack)} has no AKS cluster: the AKS secure baseline does not apply")
        return
    out.print(
        f"[bold]{shown(report.stack)}[/bold]: the AKS secure baseline (PSRule for Azure names; gpufleet.AKS.*: ours)"
    )
    width = max(len(r.rule.name) for r in report.results)
    for r in report.results:
        status = f"[{STYLE[r.status]}]{r.status:<6}[/{STYLE[r.status]}]"
        if r.status == "waived":
            detail = f"waived: {shown(r.reason or '')} [dim]({shown(r.detail)})[/dim]"
        elif r.unused_waiver:
            detail = f"{shown(r.detail)} [yellow](waiver unused: remove it)[/yellow]"
        else:
            detail = shown(r.detail)
        out.print(f"  {status}  {r.rule.severity:<6}  {r.rule.name:<{width}}  {detail}")
    for r in report.results:
        if r.status == "fail":
            out.print(f"  {loaded.place(r.rule.setting, r.message)}", markup=False)
    counts = ", ".join(f"{report.count('fail', s)} {s}" for s in ("high", "medium", "low"))
    waived = sum(report.count("waived", s) for s in ("high", "medium", "low"))
    verdict = "[green]ok[/green]" if report.ok else "[red]blocked[/red]: high or medium rules fail"
    out.print(f"failing: {counts}; waived: {waived} — {verdict}")
