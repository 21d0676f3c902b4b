"""``gpufleet promote``: move a release block to the next stack, record deployments and verifications, show where
each release runs, mend a torn ledger line. The rules are :mod:`gpufleet.fleet.promote`'s and the ledger
:mod:`gpufleet.fleet.promote_ledger`'s; this module only parses, prints and exits.

``gpufleet promote TARGET`` is ``gpufleet promote to TARGET`` (the group's default command).
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import click
import typer
from rich.table import Table
from typer.core import TyperGroup

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    command,
    emit_json,
    err,
    group,
    load_or_exit,
    out,
    project_root,
    resolve_or_exit,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    import datetime as dt

    from gpufleet.azure.cost import CostDelta
    from gpufleet.catalog import Catalog
    from gpufleet.fleet.promote import Decision, Mismatch, Policy, Refusal, StackStatus
    from gpufleet.fleet.promote_ledger import Entry


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


promote_app = group(
    "Promote a release stage by stage, with gates and a ledger.",
    cls=DefaultToGroup,
    help=(
        "Promote a stack's release block (pinned versions) to the next stack, stage by stage and wave by wave, "
        "with the gates of promotion.yaml; record deployments and verifications in the ledger. "
        "'gpufleet promote TARGET' is 'gpufleet promote to TARGET'."
    ),
)


def policy_or_exit(root: Path) -> Policy:
    """The project's promotion.yaml, validated; exit 1 with each error at its line otherwise."""
    from gpufleet.fleet.promote import load_policy

    loaded = load_policy(root)
    if loaded.policy is None:
        for d in loaded.diagnostics:
            err.print(str(d), markup=False)
        raise typer.Exit(EXIT_INVALID)
    return loaded.policy


@contextlib.contextmanager
def _refusing() -> Iterator[None]:
    """A ledger that is not sound (a malformed or torn line, a broken chain) or git missing or failing: say so on
    one line and exit 1; nothing is written."""
    from gpufleet.fleet.promote import GitError
    from gpufleet.fleet.promote_ledger import LedgerError

    try:
        yield
    except (LedgerError, GitError) as exc:
        err.print(f"[red]error:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None


def _stack_name(name: str, what: str) -> str:
    """``name`` when it is a stack name (``<stage>-<region>``); a usage error otherwise (no paths)."""
    from gpufleet.fleet.promote import is_stack_name

    if not is_stack_name(name):
        raise usage_error(
            f"{what} {name!r} is not a stack name: <stage>-<region> in lowercase letters and digits, e.g."
            " prod-westeurope"
        )
    return name


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


@command(promote_app, "to", "Move a release into the next stack, if every gate passes.")
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
    from gpufleet.cli.cost import priced_catalog_or_exit
    from gpufleet.fleet.promote import default_source

    if force and not (reason and reason.strip()):
        raise usage_error("--force needs --reason TEXT: the ledger records why the gates were forced")
    if reason and not force:
        raise usage_error("--reason goes with --force")
    project = project_root(root)
    policy = policy_or_exit(project)
    prices = priced_catalog_or_exit(project)  # before anything is written: an unusable price table stops here
    _stack_name(target, "TARGET")
    if policy.position(target) is None:
        raise usage_error(f"{target} is not in {project / 'promotion.yaml'}; its stacks: {', '.join(policy.stacks())}")
    if source is None:
        source = default_source(policy, target)
        if source is None:
            out.print(
                f"{target} is the first wave of the first stage: nothing is promoted into it. Edit the release block"
                f" of Pulumi.{target}.yaml, deploy and verify it, then promote onward."
            )
            raise typer.Exit(EXIT_INVALID)
    elif not (project / f"Pulumi.{_stack_name(source, '--from')}.yaml").is_file():
        raise usage_error(f"no stack file Pulumi.{source}.yaml in {project}")
    with _refusing():
        decision, blocking, forced, written = _decide_and_write(project, policy, source, target, force, reason, dry_run)
    applied = _apply_and_record(project, target, decision.release) if written and apply else None
    cost = _cost_change(decision, prices)
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
                "cost": None if cost is None else {**cost[0].to_dict(), "note": cost[1]},
            }
        )
    else:
        _print_decision(decision, source, target, forced, blocking, dry_run, written, cost)
    if blocking or applied is False:
        raise typer.Exit(EXIT_INVALID)


def _decide_and_write(
    project: Path, policy: Policy, source: str, target: str, force: bool, reason: str | None, dry_run: bool
) -> tuple[Decision, list[Refusal], list[Refusal], bool]:
    """Decide, and unless refused or a dry run, write the target's stack file between the ledger's intent and its
    outcome: all under the ledger's exclusive lock, so a second run at the same time decides on what this one wrote
    (no promotion twice). The intent (with both release blocks) is durable before the file changes, so a process
    killed anywhere leaves the old file with the intent, or the new one with it: ``promote status`` reports either
    and ``promote repair`` completes or undoes it (docs/reliability.md). Returns the decision, the refusals that
    block, those forced, and whether it was written."""
    from gpufleet.fleet.promote import StackFiles, decide, git_commit, release_block_text, write_target
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger, new_entry, now_utc

    with Ledger(project / LEDGER_FILE).locked() as txn:
        files = StackFiles.read(project, [*policy.stacks(), source])
        decision = decide(files, policy, txn.entries, source, target, now_utc())
        blocking = [] if decision.pins and not decision.changes else decision.blocking(force)  # nothing to move
        forced = [r for r in decision.refusals if r not in blocking]
        if not decision.changes or blocking or dry_run or decision.new_text is None:
            return decision, blocking, forced, False
        path, before = files.path(target), files.texts[target] or ""
        fields: dict[str, Any] = {
            "from": source,
            "previous_release": decision.previous,
            "pins": {k: after for k, (_, after) in decision.pins.items()},
            "forced": [r.gate for r in forced] or None,
            "reason": reason if forced else None,
        }
        commit = git_commit(project)

        def record(result: Any, **extra: Any) -> None:
            txn.append(new_entry("promote", target, decision.release, result, now_utc(), commit, **fields, **extra))

        blocks = {"block": release_block_text(decision.new_text), "previous_block": release_block_text(before)}
        record("started", **blocks)
        try:
            write_target(path, decision.new_text)
        except BaseException:
            with contextlib.suppress(Exception):  # else the intent stays: promote repair rolls it back
                record("failed", note="the stack file could not be written")
            raise
        try:
            record("ok", block=blocks["block"])
        except BaseException:
            with contextlib.suppress(Exception):  # no promotion the ledger does not show
                write_target(path, before)
                record("failed", note="the ledger's outcome could not be written")
            raise
    return decision, blocking, forced, True


def _apply_and_record(project: Path, target: str, release: str) -> bool | None:
    """``pulumi up`` for the promoted target and the deployment's ledger entry; None when there is no Pulumi."""
    from gpufleet.fleet.promote import git_commit
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger, new_entry, now_utc

    applied = _apply(project, target)
    if applied is not None:
        with _refusing():
            result = "ok" if applied else "failed"
            Ledger(project / LEDGER_FILE).append(
                new_entry("deploy", target, release, result, now_utc(), git_commit(project))
            )
    return applied


def _cost_change(decision: Decision, prices: Catalog) -> tuple[CostDelta, str] | None:
    """The target's cost before and after the promotion (at ``prices``: the catalog priced with the user's tables),
    and one line that says what changed (or that nothing did); None when there is nothing to promote or a side is
    invalid."""
    if not decision.changes:
        return None
    delta = decision.cost_delta(prices)
    if delta is None:
        return None
    if not delta.changed:
        note = (
            f"cost: unchanged, the promotion moves only the release block (pinned versions): {decision.target}'s"
            f" pools, sizes, node counts, spot settings and region stay as they are (gpufleet cost {decision.target})"
        )
    else:
        changed = ", ".join(p.name for p in delta.pools if p.changed)
        note = (
            f"cost: the release block moves alone, yet pool(s) {changed} of {decision.target} change: the stack file"
            " refers to values of the block from outside it (YAML aliases of its anchors); review before promoting"
        )
    return delta, note


def _print_cost_change(cost: tuple[CostDelta, str]) -> None:
    """One line when the cost is unchanged; else a row per pool that changes and the total, per hour and per month
    at min and max nodes."""
    from gpufleet.azure.cost import FIGURES, signed
    from gpufleet.cli.cost import provenance

    delta, note = cost
    if not delta.changed:
        out.print(shown(note))
        return
    table = Table(title=f"cost change of {shown(delta.stack)} ({delta.currency}, a month is {delta.hours_per_month} h)")
    table.add_column("pool")
    for title in ("per hour at min", "per hour at max", "per month at min", "per month at max"):
        table.add_column(title, justify="right")
    for p in delta.pools:
        if p.changed:
            what = " (new)" if p.before is None else " (removed)" if p.after is None else ""
            table.add_row(shown(p.name) + what, *(signed(p.delta(f), delta.currency) for f in FIGURES))
    table.add_row("[bold]total[/bold]", *(signed(delta.total(f), delta.currency) for f in FIGURES))
    out.print(table)
    for price in delta.prices:
        out.print(f"price of {shown(price.vm_size)} in {shown(price.region)}: {provenance(price)}")
    out.print(f"[yellow]{shown(note)}[/yellow]")


def _print_decision(
    decision: Decision,
    source: str,
    target: str,
    forced: list[Refusal],
    blocking: list[Refusal],
    dry_run: bool,
    written: bool,
    cost: tuple[CostDelta, str] | None = None,
) -> None:
    if decision.pins:
        table = Table(title=f"{source} -> {target}: release {decision.previous} -> {decision.release}")
        for col in ("pin", target, "after"):
            table.add_column(col)
        for key, (before, after) in decision.pins.items():
            mark = "" if before == after else "  [yellow]changed[/yellow]"
            table.add_row(shown(key), shown(before), f"{shown(after)}{mark}")
        out.print(table)
    if decision.pins and not decision.changes:
        out.print(f"nothing to promote: {target} already runs release {decision.release}")
        return
    if cost is not None:
        _print_cost_change(cost)
    for r in forced:
        out.print(f"[yellow]forced[/yellow] ({r.gate}): {shown(r.message)}")
    for r in blocking:
        hint = " (--force --reason TEXT goes past this gate)" if r.forceable else ""
        out.print(f"[red]refused[/red] ({r.gate}): {shown(r.message)}{hint}")
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


@command(promote_app, "record", "Record a deployment or verification outcome in the ledger.")
def promote_record(
    stack: Annotated[str, typer.Argument(help="The stack the outcome is about, e.g. staging-westeurope.")],
    result: Annotated[
        Outcome | None, typer.Option("--result", help="ok or failed (with --report: the report's, by default).")
    ] = None,
    kind: Annotated[
        RecordKind,
        typer.Option(
            "--kind", help="verify (the verify playbook / health checks passed or not) or deploy (pulumi up)."
        ),
    ] = RecordKind.verify,
    report: Annotated[
        Path | None,
        typer.Option(
            "--report",
            help="The verify playbook's JSON report (-e gpufleet_verify_report_file=PATH): records each host's result"
            " and DCGM level, for the canary_verified gate.",
        ),
    ] = None,
    at: Annotated[
        str | None, typer.Option("--at", help="When it happened (ISO 8601, UTC if no zone); default: now.")
    ] = None,
    note: Annotated[str | None, typer.Option("--note", help="Free text kept with the entry (a CI run URL...).")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Record a deployment or verification outcome for STACK, against the release its stack file pins now.

    CI calls this after 'pulumi up' (--kind deploy) and after the verify playbook (--kind verify, with --report FILE
    when the playbook wrote one): a successful verification is what lets the release move on, once the stage's soak
    time has passed (counted from when the record is written, whatever --at says). The stack file must be committed;
    --at can be neither in the future nor before the last commit that changed the stack file.
    """
    from gpufleet.fleet.promote import git_commit, release_hash
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger, new_entry, now_utc, parse_time

    project = project_root(root)
    _stack_name(stack, "STACK")
    outcome, hosts = _outcome(stack, result, kind, report)
    pinned = load_or_exit(stack, project, as_json, "nothing recorded")
    now = now_utc()
    try:
        when = parse_time(at) if at else now
    except ValueError:
        raise usage_error(f"--at {at!r} is not an ISO 8601 time, e.g. 2026-11-20T14:00:00Z") from None
    release = release_hash(pinned.release.model_dump())
    with _refusing():
        _check_recordable(project, resolve_or_exit(stack, project).resolve(), when if at else None, now)
        entry = Ledger(project / LEDGER_FILE).append(
            new_entry(kind.value, stack, release, outcome, when, git_commit(project), note=note, hosts=hosts)
        )
    if as_json:
        emit_json(entry)
    else:
        of = f" ({len(hosts)} host(s) from {report})" if hosts else ""
        out.print(
            f"recorded: {kind.value} {outcome} of release {release} on {stack} at {entry['time']}{of}", markup=False
        )


def _outcome(
    stack: str, result: Outcome | None, kind: RecordKind, report: Path | None
) -> tuple[str, dict[str, dict[str, Any]] | None]:
    """The outcome to record and, with a verify report, each host's ``{result, dcgm_level}`` (usage error when the
    report cannot be read, is another stack's, or says otherwise than --result)."""
    import json

    from gpufleet.fleet.promote import report_hosts

    if report is None:
        if result is None:
            raise usage_error("give --result ok|failed, or --report FILE (the verify playbook's JSON report)")
        return result.value, None
    if kind is not RecordKind.verify:
        raise usage_error("--report is the verify playbook's report: it goes with --kind verify")
    try:
        found, hosts = report_hosts(json.loads(report.read_text(encoding="utf-8")), stack)
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise usage_error(f"--report {report}: {exc} (nothing recorded)") from None
    if result is not None and result.value != found:
        raise usage_error(f"--result {result.value}, but the report {report} says {found} (nothing recorded)")
    return found, hosts


def _check_recordable(project: Path, path: Path, at: dt.datetime | None, now: dt.datetime) -> None:
    """Exit unless an outcome can be recorded for the stack file ``path``: committed (exit 1), and ``at`` (when
    given) neither after ``now`` nor before the file's last commit (exit 2)."""
    from gpufleet.fleet.promote import last_change, uncommitted
    from gpufleet.fleet.promote_ledger import iso

    if uncommitted(project, [path]):
        err.print(
            f"[red]error:[/red] {path.name} has uncommitted changes: commit them first, so the outcome is recorded"
            " against a committed release (nothing recorded)"
        )
        raise typer.Exit(EXIT_INVALID)
    if at is None:
        return
    if at > now:
        raise usage_error(f"--at {iso(at)} is in the future (now {iso(now)}): record an outcome once it happened")
    changed = last_change(project, path)
    if changed is not None and at < changed:
        raise usage_error(
            f"--at {iso(at)} is before {path.name} last changed ({iso(changed)}, its last commit): an outcome from"
            " then is not about the release it pins now"
        )


@command(promote_app, "status", "Which release each stack runs, and what may move next.")
def promote_status(as_json: JsonOpt = False, root: RootOpt = None) -> None:
    """Which release each stack runs (stage x region), its verification and soak, what may move next, and the
    promotions that were forced past gates (with their reasons).

    Exit 1 when a stack file disagrees with the ledger (an interrupted promotion, or a release changed outside
    gpufleet promote): each is named, with the 'gpufleet promote repair' that resolves it."""
    from gpufleet.fleet.promote import StackFiles, status
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger, iso, now_utc

    project = project_root(root)
    policy = policy_or_exit(project)
    with _refusing():
        entries = Ledger(project / LEDGER_FILE).entries()
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
                    "forced": _forced_json(r.forced),
                    "problem": None if r.problem is None else r.problem.message(),
                }
                for r in rows
            ]
        )
    else:
        _print_status(policy, rows)
    if any(r.problem is not None for r in rows):
        raise typer.Exit(EXIT_INVALID)


def _print_status(policy: Policy, rows: list[StackStatus]) -> None:
    regions = list(dict.fromkeys(r.region for r in rows))
    table = Table(title="release per stack (promotion.yaml order)")
    table.add_column("stage")
    for region in regions:
        table.add_column(region)
    for stage in policy.stages:
        cells = []
        for region in regions:
            r = next((x for x in rows if x.stage == stage.name and x.region == region), None)
            cells.append("" if r is None else _status_cell(r))
        table.add_row(stage.name, *cells)
    out.print(table)
    for r in rows:
        if r.problem is not None:
            out.print(f"[red]{shown(r.stack)}:[/red] {shown(r.problem.message())}")


def _forced_json(e: Entry | None) -> dict[str, Any] | None:
    from gpufleet.fleet.promote_ledger import iso

    return None if e is None else {"time": iso(e.time), "from": e.source, "gates": list(e.forced), "reason": e.reason}


def _status_cell(r: StackStatus) -> str:
    if r.verified is None:
        check = "not verified"
    elif r.verified.result != "ok":
        check = "[red]verification failed[/red]"
    else:
        check = f"verified, soaked {r.soaked} of {r.soak_needed}"
    source = f"\nnext from {r.next_from}: {r.next_state}" if r.next_from else f"\n{r.next_state}"
    cell = f"wave {r.wave}: {r.release or 'invalid'}\n{check}{shown(source)}"
    if r.forced is not None:
        gates = ", ".join(r.forced.forced)
        cell += f"\n[yellow]forced[/yellow] from {shown(r.forced.source)} ({gates}): {shown(r.forced.reason or '')}"
    return cell


@command(promote_app, "repair", "Mend the ledger; complete or undo an interrupted promotion.")
def promote_repair(
    complete: Annotated[
        str | None,
        typer.Option(
            "--complete",
            metavar="STACK",
            help="Finish STACK's interrupted promotion (or record its hand-made release, with --reason).",
        ),
    ] = None,
    roll_back: Annotated[
        str | None,
        typer.Option(
            "--roll-back",
            metavar="STACK",
            help="Undo STACK's interrupted promotion (or its hand-made release): the file gets the release back.",
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Why a hand-made release is recorded.")] = None,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Mend a torn last line of the ledger (a write cut off before its end, e.g. by a crash or a full disk): add its
    newline when it is a whole entry that fits the chain, remove it otherwise. Then name each stack file that
    disagrees with the ledger: a promotion interrupted between its intent and its outcome, or a release changed
    outside gpufleet promote. --complete STACK or --roll-back STACK resolves one, writing the stack file when it
    must and recording what was done in the ledger. A ledger broken elsewhere is refused (restore it from git).

    Exit 0 when nothing disagrees (any longer), 1 when a stack still does or the repair cannot be done.
    """
    from gpufleet.fleet.promote import POLICY_FILE
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger

    if complete and roll_back:
        raise usage_error("--complete and --roll-back: choose one")
    if reason and not complete:
        raise usage_error("--reason goes with --complete")
    project = project_root(root)
    stack = complete or roll_back
    policy = policy_or_exit(project) if stack or (project / POLICY_FILE).is_file() else None  # read once, for both
    with _refusing():
        fixed = Ledger(project / LEDGER_FILE).repair()
        done = _repair_stack(project, policy, stack, "complete" if complete else "roll-back", reason)
        left = _ledger_problems(project, policy)
    if as_json:
        emit_json(
            {
                "torn_line": None
                if fixed is None
                else {"line": fixed.line, "action": fixed.action, "text": fixed.text},
                "repaired": done,
                "problems": [m.message() for m in left],
            }
        )
    else:
        if fixed is None and not left and done is None:
            out.print(f"nothing to repair: the last line of {LEDGER_FILE} is whole, every stack file agrees with it")
        elif fixed is None:
            out.print(f"the last line of {LEDGER_FILE} is whole")
        else:
            what = "completed (its newline added)" if fixed.action == "completed" else "removed (it was never recorded)"
            out.print(f"{LEDGER_FILE}:{fixed.line}: the incomplete last line was {what}: {fixed.text}", markup=False)
        if done is not None:
            out.print(shown(done))
        for m in left:
            out.print(f"[red]{shown(m.stack)}:[/red] {shown(m.message())}")
    if left:
        raise typer.Exit(EXIT_INVALID)


def _ledger_problems(project: Path, policy: Policy | None) -> list[Mismatch]:
    """The stack files of the policy that disagree with the ledger (none without a policy)."""
    from gpufleet.fleet.promote import StackFiles, mismatches
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger

    if policy is None:
        return []
    entries = Ledger(project / LEDGER_FILE).entries()
    return list(mismatches(StackFiles.read(project, policy.stacks()), policy, entries).values())


def _repair_stack(
    project: Path, policy: Policy | None, stack: str | None, action: Any, reason: str | None
) -> str | None:
    """Complete or roll back ``stack``'s disagreement with the ledger, under the ledger's lock; what was done."""
    from gpufleet.fleet.promote import RepairError, StackFiles, git_commit, mismatches, plan_repair, write_target
    from gpufleet.fleet.promote_ledger import LEDGER_FILE, Ledger, new_entry, now_utc

    if stack is None or policy is None:  # a policy is read whenever a stack is named
        return None
    if policy.position(_stack_name(stack, "--complete/--roll-back")) is None:
        raise usage_error(f"{stack} is not in {project / 'promotion.yaml'}; its stacks: {', '.join(policy.stacks())}")
    with Ledger(project / LEDGER_FILE).locked() as txn:
        files = StackFiles.read(project, policy.stacks())
        problem = mismatches(files, policy, txn.entries, [stack]).get(stack)
        if problem is None:
            return f"{stack}: its stack file agrees with the ledger; nothing to {action}"
        try:
            repair = plan_repair(files, problem, action, reason)
        except RepairError as exc:
            err.print(f"[red]error:[/red] {shown(exc)}")
            raise typer.Exit(EXIT_INVALID) from None
        if repair.text is not None:
            write_target(files.path(stack), repair.text)
        commit = git_commit(project)
        txn.append(
            new_entry(
                "promote", stack, repair.release, repair.result, now_utc(), commit, note=repair.note, **repair.fields
            )
        )
    wrote = f"{files.path(stack).name} written, " if repair.text is not None else ""
    return f"{stack}: {wrote}{LEDGER_FILE} records it ({repair.note})"
