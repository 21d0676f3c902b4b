"""``gpufleet promote``: move a release block to the next stack, record deployments and verifications, show where
each release runs. The rules are :mod:`gpufleet.promote`'s; this module only parses, prints and exits.

``gpufleet promote TARGET`` is ``gpufleet promote to TARGET`` (the group's default command).
"""

from __future__ import annotations

import shutil
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import click
import typer
from rich.table import Table
from typer.core import TyperGroup

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    emit_json,
    err,
    load_or_exit,
    out,
    project_root,
    usage_error,
)


class Outcome(StrEnum):
    ok = "ok"
    failed = "failed"


class RecordKind(StrEnum):
    verify = "verify"
    deploy = "deploy"


class DefaultToGroup(TyperGroup):
    """A group whose first argument, when it names no subcommand, is the ``to`` command's TARGET."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = next((a for a in args if not a.startswith("-")), None)
        if first is not None and first not in self.commands and not {"-h", "--help"} & set(args[: args.index(first)]):
            args = ["to", *args]
        return super().parse_args(ctx, args)


promote_app = typer.Typer(
    cls=DefaultToGroup,
    help=(
        "Promote a stack's release block (pinned versions) to the next stack, stage by stage and wave by wave, "
        "with the gates of promotion.yaml; record deployments and verifications in the ledger. "
        "'gpufleet promote TARGET' is 'gpufleet promote to TARGET'."
    ),
    no_args_is_help=True,
)


def _policy(root: Path) -> Any:
    from gpufleet.promote import load_policy

    loaded = load_policy(root)
    if loaded.policy is None:
        for d in loaded.diagnostics:
            err.print(str(d), markup=False)
        raise typer.Exit(EXIT_INVALID)
    return loaded.policy


def _ledger(root: Path) -> Any:
    from gpufleet.promote import LEDGER_FILE, Ledger, LedgerError

    ledger = Ledger(root / LEDGER_FILE)
    try:
        return ledger, ledger.entries()
    except LedgerError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(EXIT_INVALID) from None


def _entry(kind: str, stack: str, release: str, result: str, root: Path, **extra: Any) -> dict[str, Any]:
    from gpufleet.promote import git_commit, iso, now_utc

    entry = {"time": iso(extra.pop("at", None) or now_utc()), "kind": kind, "stack": stack, "release": release}
    entry |= {"result": result, "commit": git_commit(root)}
    return entry | {k: v for k, v in extra.items() if v is not None}


def _apply(root: Path, target: str) -> bool | None:
    """``pulumi up`` for ``target`` through the Automation API; None when there is no Pulumi CLI."""
    if shutil.which("pulumi") is None:
        out.print(
            f"--apply: no Pulumi CLI on PATH, so nothing was deployed. Run:\n"
            f"  pulumi stack select {target} --cwd {root}\n"
            f"  pulumi up --cwd {root}\n"
            f"  gpufleet promote record {target} --kind deploy --result ok   # or --result failed",
            markup=False,
        )
        return None
    from pulumi import automation as auto

    out.print(f"==> pulumi up ({target})")
    try:
        stack = auto.select_stack(stack_name=target, work_dir=str(root))
        stack.up(on_output=lambda line: out.print(line, end="", markup=False))
    except auto.errors.CommandError as exc:
        err.print(f"[red]pulumi up failed:[/red] {exc}")
        return False
    return True


@promote_app.command("to")
def promote_to(
    target: Annotated[str, typer.Argument(help="The stack that gets the release, e.g. prod-westeurope.")],
    source: Annotated[
        str | None,
        typer.Option("--from", help="The stack whose release moves (default: from promotion.yaml's order)."),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the diff and the gates; write nothing.")] = False,
    force: Annotated[
        bool,
        typer.Option("--force", help="Go past the gates that refuse (never past an invalid stack); needs --reason."),
    ] = False,
    reason: Annotated[str | None, typer.Option("--reason", help="Why the gates are forced (recorded).")] = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Then run 'pulumi up' for the target (Automation API) and record it.")
    ] = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Move SOURCE's release block into TARGET's stack file, if every gate passes.

    Exit 0 when promoted (or nothing to do, or a dry run that would pass), 1 when refused, 2 on usage errors.
    """
    from gpufleet.promote import StackFiles, decide, default_source, now_utc

    if force and not (reason and reason.strip()):
        raise usage_error("--force needs --reason TEXT: the ledger records why the gates were forced")
    if reason and not force:
        raise usage_error("--reason goes with --force")
    project = project_root(root)
    policy = _policy(project)
    if policy.position(target) is None:
        raise usage_error(f"{target} is not in {project / 'promotion.yaml'}; its stacks: {', '.join(policy.stacks())}")
    source = source or default_source(policy, target)
    if source is None:
        out.print(
            f"{target} is the first wave of the first stage: nothing is promoted into it. Edit the release block of"
            f" Pulumi.{target}.yaml, deploy and verify it, then promote onward."
        )
        raise typer.Exit(EXIT_INVALID)
    if not (project / f"Pulumi.{source}.yaml").is_file():
        raise usage_error(f"no stack file Pulumi.{source}.yaml in {project}")
    ledger, entries = _ledger(project)
    decision = decide(StackFiles.read(project, [*policy.stacks(), source]), policy, entries, source, target, now_utc())
    blocking = [] if decision.pins and not decision.changes else decision.blocking(force)  # nothing to move
    forced = [r for r in decision.refusals if r not in blocking]
    written, applied = False, None
    if decision.changes and not blocking and not dry_run and decision.new_text is not None:
        written = True
        applied = _write(project, ledger, decision, source, target, forced, reason, apply)
    if as_json:
        emit_json(
            {
                "source": source,
                "target": target,
                "release": decision.release,
                "previous": decision.previous,
                "pins": {k: {"before": b, "after": a} for k, (b, a) in decision.pins.items()},
                "refusals": [{"gate": r.gate, "message": r.message, "forced": r in forced} for r in decision.refusals],
                "dry_run": dry_run,
                "written": written,
                "applied": applied,
            }
        )
    else:
        _print_decision(decision, source, target, forced, blocking, dry_run, written)
    if blocking:
        raise typer.Exit(EXIT_INVALID)
    if applied is False:
        raise typer.Exit(EXIT_INVALID)


def _write(
    project: Path, ledger: Any, decision: Any, source: str, target: str, forced: list, reason: str | None, apply: bool
) -> bool | None:
    """Write the target's new stack file and its ledger entry; with ``apply``, ``pulumi up`` and its entry too.
    Returns whether the deployment succeeded (None: not applied)."""
    from gpufleet.promote import write_target

    write_target(project / f"Pulumi.{target}.yaml", decision.new_text)
    ledger.append(
        _entry(
            "promote",
            target,
            decision.release,
            "ok",
            project,
            **{"from": source, "previous_release": decision.previous},
            pins={k: after for k, (_, after) in decision.pins.items()},
            forced=[r.gate for r in forced] or None,
            reason=reason if forced else None,
        )
    )
    if not apply:
        return None
    applied = _apply(project, target)
    if applied is not None:
        ledger.append(_entry("deploy", target, decision.release, "ok" if applied else "failed", project))
    return applied


def _print_decision(
    decision: Any, source: str, target: str, forced: list, blocking: list, dry_run: bool, written: bool
) -> None:
    if decision.pins:
        table = Table(title=f"{source} -> {target}: release {decision.previous} -> {decision.release}")
        for col in ("pin", target, "after"):
            table.add_column(col)
        for key, (before, after) in decision.pins.items():
            mark = "" if before == after else "  [yellow]changed[/yellow]"
            table.add_row(key, str(before), f"{after}{mark}")
        out.print(table)
    if decision.pins and not decision.changes:
        out.print(f"nothing to promote: {target} already runs release {decision.release}")
        return
    for r in forced:
        out.print(f"[yellow]forced[/yellow] ({r.gate}): {r.message}")
    for r in blocking:
        hint = " (--force --reason TEXT goes past this gate)" if r.forceable else ""
        out.print(f"[red]refused[/red] ({r.gate}): {r.message}{hint}")
    if blocking:
        return
    if dry_run:
        out.print(f"dry run: every gate passes; Pulumi.{target}.yaml would get {source}'s release block")
    elif written:
        out.print(
            f"promoted: Pulumi.{target}.yaml now pins release {decision.release} (ledger updated). Next:\n"
            f"  git add Pulumi.{target}.yaml promotion-ledger.jsonl && git commit -m 'promote {decision.release}"
            f" {source} -> {target}'\n"
            f"  pulumi up for {target}, the verify playbook, then: gpufleet promote record {target} --result ok",
            markup=False,
        )


@promote_app.command("record")
def promote_record(
    stack: Annotated[str, typer.Argument(help="The stack the outcome is about, e.g. staging-westeurope.")],
    result: Annotated[Outcome, typer.Option("--result", help="ok or failed.")],
    kind: Annotated[
        RecordKind,
        typer.Option(
            "--kind", help="verify (the verify playbook / health checks passed or not) or deploy (pulumi up)."
        ),
    ] = RecordKind.verify,
    at: Annotated[
        str | None, typer.Option("--at", help="When it happened (ISO 8601, UTC if no zone); default: now.")
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="Free text kept with the entry (a CI run URL...).")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Record a deployment or verification outcome for STACK, against the release its stack file pins now.

    CI calls this after 'pulumi up' (--kind deploy) and after the verify playbook (--kind verify): a successful
    verification is what lets the release move on, once the stage's soak time has passed.
    """
    from gpufleet.promote import LEDGER_FILE, Ledger, parse_time, release_hash

    project = project_root(root)
    pinned = load_or_exit(stack, project, as_json, "nothing recorded")
    try:
        when = parse_time(at) if at else None
    except ValueError:
        raise usage_error(f"--at {at!r} is not an ISO 8601 time, e.g. 2026-11-20T14:00:00Z") from None
    release = release_hash(pinned.release.model_dump())
    entry = _entry(kind.value, stack, release, result.value, project, at=when, note=note)
    Ledger(project / LEDGER_FILE).append(entry)
    if as_json:
        emit_json(entry)
    else:
        out.print(f"recorded: {kind.value} {result.value} of release {release} on {stack} at {entry['time']}")


@promote_app.command("status")
def promote_status(as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Which release each stack runs (stage x region), its verification and soak, and what may move next."""
    from gpufleet.promote import StackFiles, iso, now_utc, status

    project = project_root(root)
    policy = _policy(project)
    _, entries = _ledger(project)
    rows = status(StackFiles.read(project, policy.stacks()), policy, entries, now_utc())
    if as_json:
        emit_json(
            [
                {
                    "stack": r.stack,
                    "stage": r.stage,
                    "region": r.region,
                    "wave": r.wave,
                    "release": r.release,
                    "verification": None
                    if r.verified is None
                    else {"time": iso(r.verified.time), "result": r.verified.result},
                    "soaked": r.soaked,
                    "soak_needed": r.soak_needed,
                    "next_from": r.next_from,
                    "next": r.next_state,
                }
                for r in rows
            ]
        )
        return
    regions = list(dict.fromkeys(r.region for r in rows))
    table = Table(title="release per stack (promotion.yaml order)")
    table.add_column("stage")
    for region in regions:
        table.add_column(region)
    for stage in policy.stages:
        cells = []
        for region in regions:
            r = next((x for x in rows if x.stage == stage.name and x.region == region), None)
            if r is None:
                cells.append("")
                continue
            if r.verified is None:
                check = "not verified"
            elif r.verified.result != "ok":
                check = "[red]verification failed[/red]"
            else:
                check = f"verified, soaked {r.soaked} of {r.soak_needed}"
            source = f"\nnext from {r.next_from}: {r.next_state}" if r.next_from else f"\n{r.next_state}"
            cells.append(f"wave {r.wave}: {r.release or 'invalid'}\n{check}{source}")
        table.add_row(stage.name, *cells)
    out.print(table)
