"""``gpufleet ci``: the CI workflows that validate, review and promote the stacks (docs/ci.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpufleet.cli.common import (
    EXIT_INVALID,
    RootOpt,
    command,
    err,
    group,
    planned_or_exit,
    project_root,
    shown,
    write_output_or_exit,
)

ci_app = group("CI workflows from promotion.yaml: review and promote stacks.")


@command(ci_app, "github", "GitHub Actions workflows: pull-request review, promotion on merge.")
def github(
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Directory of the workflows (created if missing).")
    ] = Path(".github/workflows"),
    branch: Annotated[str, typer.Option("--branch", help="The default branch merges land on.")] = "main",
    check: Annotated[
        bool, typer.Option("--check", help="Write nothing; exit 1 when the files there differ from what is generated.")
    ] = False,
    root: RootOpt = None,
) -> None:
    """Write gpufleet-pr.yml (on a pull request: setup, validate, audit, render, the diff as a comment, preflight and
    pulumi preview per changed stack) and gpufleet-promote.yml (on a merge: one job per stack in promotion.yaml's
    stage and wave order, each in its stage's GitHub environment: pulumi up, verify, gpufleet promote record, the
    ledger committed back). Regenerating writes the same bytes; --check says whether the committed ones are current.
    Exit 1 when promotion.yaml or a stack it names is invalid or missing.
    """
    from gpufleet.cli.promote import policy_or_exit
    from gpufleet.fleet.ci import CiStack, workflows

    project = project_root(root)
    policy = policy_or_exit(project)
    stacks: dict[str, CiStack] = {}
    for name in policy.stacks():
        path = project / f"Pulumi.{name}.yaml"
        if not path.is_file():
            err.print(
                f"[red]error:[/red] promotion.yaml names stack {shown(name)}, which has no file {shown(path.name)}"
            )
            raise typer.Exit(EXIT_INVALID)
        planned = planned_or_exit(str(path), project, consequence="no workflow written")
        stack, cluster = planned.stack, planned.plan.cluster
        stacks[name] = CiStack(
            name=name,
            stage=stack.stage,
            aks=stack.aks is not None,
            inventory=stack.baremetal.inventory if stack.baremetal is not None else None,
            resource_group=cluster.resource_group if cluster is not None else None,
            cluster=cluster.name if cluster is not None else None,
        )
    waves = [[f"{s.name}-{region}" for region in wave] for s in policy.stages for wave in s.waves]
    files = workflows(stacks, waves, branch)
    directory = output if output.is_absolute() else project / output
    if check:
        stale = [n for n, text in files.items() if not (directory / n).is_file() or (directory / n).read_text() != text]
        if stale:
            err.print(f"out of date in {shown(directory)}: {', '.join(stale)}; run gpufleet ci github to regenerate")
            raise typer.Exit(EXIT_INVALID)
        err.print(f"{shown(directory)}: up to date")
        return
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_output_or_exit(text, directory / name)
        err.print(f"wrote {shown(directory / name)}")
