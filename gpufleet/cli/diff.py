"""``gpufleet diff``: what an edit of stack files does, for the reviewer of a pull request (docs/ci.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from gpufleet.cli.common import (
    EXIT_INVALID,
    EXIT_USAGE,
    RootOpt,
    emit_json,
    err,
    print_diagnostics,
    project_root,
    resolve_or_exit,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    from decimal import Decimal

    from gpufleet.fleet.diff import FieldChange, StackDiff
    from gpufleet.spec.models import Stack

Format = Literal["text", "markdown", "json"]


def diff(
    stacks: Annotated[
        list[str] | None,
        typer.Argument(help="Stack names or files (default: every stack file that differs from the base)."),
    ] = None,
    base: Annotated[
        str | None,
        typer.Option("--base", help="Git revision to compare with (default: the merge base with the default branch)."),
    ] = None,
    fmt: Annotated[
        str, typer.Option("--format", help="text (a terminal), markdown (a pull-request comment) or json (tools).")
    ] = "text",
    root: RootOpt = None,
) -> None:
    """What the working tree's stack files change against a git revision: per stack, the pools added, removed and
    changed field by field, those AKS must REPLACE first (a new pool, the old one's nodes drained and deleted: its
    VM size, zones, spot, driver owner, AKS MIG profile or taints changed), the host groups changed (a MIG layout
    change drains their hosts, a kernel-argument change reboots them), the release pins moved, the GPUs whose MIG
    layout changes, and the cost per month before and after.

    Exit 1 when a stack is invalid (at the base or now), did not exist at the base, or there is no git repository;
    2 on an unknown revision or format. JSON: {base, stacks:[{stack, pools:[{name, change, fields:[{key, before,
    after, replaces}]}], host_groups, release:{before, after}, mig:{gpus_changed}, cost:{before_usd_month,
    after_usd_month, delta}}]}.
    """
    from gpufleet.cli.cost import priced_catalog_or_exit
    from gpufleet.fleet.diff import (
        DiffError,
        UnknownRevision,
        base_texts,
        changed_stacks,
        default_base,
        diff_stacks,
        resolve_base,
    )
    from gpufleet.fleet.promote import GitError

    if fmt not in ("text", "markdown", "json"):
        raise usage_error(f"--format {fmt!r}: text, markdown or json")
    project = project_root(root)
    catalog = priced_catalog_or_exit(project)
    try:
        commit = resolve_base(project, base) if base is not None else default_base(project)
        if stacks:
            bases = base_texts(project, commit, [resolve_or_exit(ref, project) for ref in stacks])
        else:
            bases = changed_stacks(project, commit)
        results = []
        for path, before_text in bases.items():
            if before_text is None and stacks:
                raise DiffError(f"{path} does not exist at {base or commit[:12]}: nothing to compare it with")
            after = _load(path.read_text(encoding="utf-8"), str(path), "now")
            before = _load(before_text, f"{path} at {commit[:12]}", "at the base") if before_text else None
            results.append(diff_stacks(before, after, str(path), catalog, _host_counts(after, project)))
    except DiffError as exc:
        code = EXIT_USAGE if isinstance(exc, UnknownRevision) else EXIT_INVALID
        err.print(f"[red]error:[/red] {shown(exc)}")
        raise typer.Exit(code) from None
    except GitError as exc:
        err.print(f"[red]error:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    label = base or commit[:12]
    if fmt == "json":
        emit_json({"base": label, "stacks": [r.to_dict() for r in results]})
    elif fmt == "markdown":
        typer.echo(markdown(label, results), nl=False)
    else:
        typer.echo(text(label, results), nl=False)


def _load(content: str, file: str, when: str) -> Stack:
    from gpufleet.fleet.diff import DiffError
    from gpufleet.spec.load import load_stack_text

    loaded = load_stack_text(content, file)
    if loaded.stack is None:
        print_diagnostics(err, loaded.diagnostics, "  ")
        raise DiffError(f"{file} is invalid {when} ({len(loaded.diagnostics)} error(s) above): nothing compared")
    return loaded.stack


def _host_counts(stack: Stack, project: Path) -> dict[str, int]:
    """Hosts per host group: the stack's BMC-managed hosts, else its inventory file (empty when unreadable: the
    host groups' MIG GPUs are then not counted)."""
    from collections import Counter

    if stack.baremetal is None:
        return {}
    if stack.baremetal.hosts:
        return dict(Counter(h.host_group for h in stack.baremetal.hosts))
    try:
        from gpufleet.baremetal.inventory import InventoryError, inventory_from_document
        from gpufleet.cli.inventory import _inventory_file
        from gpufleet.common.yamldoc import plain, read_yaml

        path = _inventory_file(stack, project)
        doc, errors = read_yaml(path)
        if errors:
            return {}
        groups = [g.name for g in stack.baremetal.host_groups]
        inventory = inventory_from_document(plain(doc), str(path), groups)
    except (InventoryError, OSError, typer.Exit):
        return {}
    return {g: len(inventory.members(g)) for g in inventory.groups}


# -- rendering -------------------------------------------------------------------------------------------------


def _value(v: Any) -> str:
    if v is None:
        return "(none)"
    return v if isinstance(v, str) else json.dumps(v, separators=(", ", ": "))


def _money(v: Decimal | None) -> str:
    return "no price" if v is None else f"${v:,.2f}"


def _cost(d: StackDiff) -> str:
    if d.usd_month_before is None and d.usd_month_after is None:
        return "no price"
    delta = d.delta
    change = f" ({'+' if delta >= 0 else '-'}${abs(delta):,.2f})" if delta is not None else ""
    return f"{_money(d.usd_month_before)} -> {_money(d.usd_month_after)}{change}"


def _field(f: FieldChange) -> str:
    mark = " (replaces the pool)" if f.replaces else ""
    return f"{f.key}: {_value(f.before)} -> {_value(f.after)}{mark}"


def _summary(d: StackDiff) -> list[str]:
    from collections import Counter

    pools = Counter(p.change for p in d.pools)
    groups = Counter(g.change for g in d.host_groups)
    parts = []
    if pools["replace"]:
        parts.append(f"{pools['replace']} pool(s) REPLACED")
    parts += [f"{n} pool(s) {change}" for change, n in pools.items() if change != "replace"]
    parts += [f"{n} host group(s) {change}" for change, n in groups.items()]
    if d.release_after:
        moved = (f"{k} {_value(d.release_before.get(k))} -> {_value(v)}" for k, v in d.release_after.items())
        parts.append("release: " + ", ".join(moved))
    if d.gpus_changed:
        parts.append(f"{d.gpus_changed} GPU(s) change MIG layout")
    if d.other:
        parts.append(f"{len(d.other)} other setting(s)")
    return parts


def _details(d: StackDiff) -> list[str]:
    lines = []
    for p in d.pools:
        head = f"pool {p.name}: {p.change.upper() if p.change == 'replace' else p.change}"
        if p.change == "replace":
            head += (
                f" (AKS pool {p.aks_name_before} -> {p.aks_name_after}: a new pool, the old one drained and deleted)"
            )
        lines.append(head)
        lines += [f"  {_field(f)}" for f in p.fields]
        if p.mig is not None:
            repack = "" if p.mig.repack is None else f"; a repack of the same instances would change {p.mig.repack}"
            lines.append(f"  MIG: {p.mig.gpus} GPU(s) get a new layout{repack} (gpufleet mig pack --current)")
    for g in d.host_groups:
        effects = f" ({', '.join(g.effects)} its hosts)" if g.effects else ""
        lines.append(f"host group {g.name}: {g.change}{effects}")
        lines += [f"  {_field(f)}" for f in g.fields]
        if g.mig is not None:
            lines.append(f"  MIG: {g.mig.gpus} GPU(s) get a new layout")
    lines += [f"release {k}: {_value(d.release_before.get(k))} -> {_value(v)}" for k, v in d.release_after.items()]
    lines += [f"setting {_field(f)}" for f in d.other]
    lines.append(f"cost per month: {_cost(d)}")
    if d.unpriced:
        lines.append(f"  left out (no price): {', '.join(d.unpriced)}")
    return lines


def text(base: str, results: list[StackDiff]) -> str:
    """The terminal form: per stack a summary line, then each change."""
    if not results:
        return f"no stack file differs from {base}\n"
    out = []
    for d in results:
        status = "new stack" if d.status == "added" else ("; ".join(_summary(d)) or "no change")
        out.append(f"{d.stack} ({d.file}) against {base}: {status}")
        out += [f"  {line}" for line in _details(d)] if d.status != "unchanged" else []
    return "\n".join(out) + "\n"


def markdown(base: str, results: list[StackDiff]) -> str:
    """A pull-request comment: a summary table first (replacements in bold), each stack's details folded."""
    out = [f"### gpufleet diff against `{base}`", ""]
    if not results:
        return "\n".join([*out, "No stack file changes.", ""])
    out += ["| stack | what changes | MIG GPUs | cost per month |", "|---|---|---|---|"]
    for d in results:
        parts = ["new stack"] if d.status == "added" else (_summary(d) or ["no change"])
        what = "; ".join(f"**{p}**" if "REPLACED" in p else p for p in parts)
        out.append(f"| `{d.stack}` | {what} | {d.gpus_changed} | {_cost(d)} |")
    out.append("")
    for d in results:
        for p in d.replaced:
            out.append(
                f"> **Pool `{p.name}` of `{d.stack}` is replaced**: AKS creates a new pool and deletes this one, every"
                f" node drained ({', '.join(f.key for f in p.fields if f.replaces)})."
            )
    for d in results:
        if d.status == "unchanged":
            continue
        out += ["", f"<details><summary>{d.stack}: details</summary>", "", "```", *_details(d), "```", "", "</details>"]
    return "\n".join(out) + "\n"
