"""``gpufleet preflight STACK``: Azure's answer for this subscription before ``pulumi up``: is each pool's size
offered in the region and its zones, and does the vCPU quota cover the stack at max nodes plus upgrade surge. The
reads are :mod:`gpufleet.azure.arm`'s, the judgement :mod:`gpufleet.azure.preflight`'s; this module prints and
exits."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpufleet.cli.common import EXIT_INVALID, JsonOpt, RootOpt, StackArg, emit_json, loaded_or_exit, out, shown

if TYPE_CHECKING:
    from gpufleet.azure.preflight import Check, Preflight

STYLE = {"ok": "green", "short": "red", "unavailable": "red", "not checked": "yellow"}


def preflight(
    stack: StackArg,
    as_json: JsonOpt = False,
    allow_unchecked: Annotated[
        bool,
        typer.Option("--allow-unchecked", help="Exit 0 when nothing fails even if some checks could not be made."),
    ] = False,
    refresh: Annotated[
        bool, typer.Option("--refresh", help="Read ARM again instead of answers cached in the last 10 minutes.")
    ] = False,
    deployed: Annotated[
        bool,
        typer.Option(
            "--deployed",
            help="The stack runs now: its pools' minimum nodes are in the usage already; count only the rest.",
        ),
    ] = False,
    root: RootOpt = None,
) -> None:
    """Ask Azure, for the stack's subscription, whether each node pool (the system pool and every GPU pool) can be
    deployed: its VM size offered in the region and not restricted for the subscription (Resource SKUs), each of its
    zones usable, and the vCPU quota (compute usages) covering the stack at max nodes plus upgrade surge: the size
    family's quota summed over its pools, the regional total, and spot pools against the spot quota. A shortfall
    names the limit to request.

    The subscription: the stack file's azure-native:subscriptionId, else $AZURE_SUBSCRIPTION_ID; credentials:
    azure-identity's DefaultAzureCredential (az login, a service principal's AZURE_* variables, managed or workload
    identity); Reader on the subscription is enough. Answers are cached for 10 minutes under
    ~/.cache/gpufleet/azure/ ($GPUFLEET_CACHE). It cannot know whether Azure has the capacity when you deploy.

    Exit 0 when every check passes, 1 on a shortfall, an unavailable size or zone, an invalid stack, or a check that
    could not be made ("not checked": no subscription, no credentials, no network; 0 with --allow-unchecked when
    nothing else fails), 2 on usage errors.
    """
    from gpufleet.azure.arm import run_preflight

    loaded = loaded_or_exit(stack, root, as_json, "nothing checked")
    report = run_preflight(loaded, deployed=deployed, refresh=refresh)
    if as_json:
        emit_json(report.to_dict())
    else:
        _print(report, allow_unchecked)
    if not report.passes(allow_unchecked):
        raise typer.Exit(EXIT_INVALID)


def _status(check: Check) -> str:
    word = check.status.upper() if check.failed else check.status
    return f"[{STYLE[check.status]}]{word}[/{STYLE[check.status]}]"


def _print(report: Preflight, allow_unchecked: bool) -> None:
    """A header (subscription, the answers and their time), the reasons shared by several unchecked checks once,
    then one line per check per pool at the pool's file:line, and the verdict."""
    from gpufleet.azure.arm import API_NAMES

    if report.subscription:
        asked = f"subscription {shown(report.subscription)} (from {shown(report.subscription_from)})"
    else:
        asked = "no subscription"
    basis = "deployed: pools' minimum nodes counted as running" if report.deployed else "a new deployment"
    out.print(f"[bold]{shown(report.stack)}[/bold]: {asked}, region {shown(report.region)}, {basis}")
    if not report.checks:
        out.print("  no AKS cluster: nothing to check")
        return
    for r in report.reads:
        how = "from the cache" if r.cached else "from ARM"
        when = r.read_at.isoformat(timespec="seconds")
        out.print(f"  {API_NAMES[r.api]} (api-version {r.api_version}): {len(r.rows)} rows read {when} {how}")
    for s in report.skipped:
        out.print(f"  [yellow]skipped[/yellow] {shown(s)}")
    details = [c.detail for c in report.unchecked]
    shared = list(dict.fromkeys(d for d in details if details.count(d) > 1))
    for number, reason in enumerate(shared, 1):
        out.print(f"  [yellow]not checked[/yellow] [{number}]: {shown(reason)}")
    for c in report.checks:
        what = f"quota {c.quota}" if c.quota else c.check
        detail = f"see \\[{shared.index(c.detail) + 1}]" if c.detail in shared else shown(c.detail)
        out.print(f"  {shown(c.file)}:{c.line}: {shown(c.pool)}: {shown(what)}: {_status(c)}: {detail}")
    failed, unchecked = len(report.failed), len(report.unchecked)
    if failed:
        verdict = f"[red]{failed} check(s) fail[/red]: pulumi up would fail on them"
    elif unchecked and not allow_unchecked:
        verdict = f"[yellow]{unchecked} check(s) not made[/yellow]: not a pass (--allow-unchecked accepts that)"
    elif unchecked:
        verdict = f"[green]nothing fails[/green]; {unchecked} check(s) not made (allowed)"
    else:
        verdict = "[green]all clear[/green] (capacity at the moment of deployment is not something ARM can promise)"
    out.print(f"{len(report.checks)} check(s): {verdict}")
