"""What every command shares: exit codes, the two consoles and JSON output, the common options, and the one path
from a stack name to a validated stack (resolve -> load -> diagnostics -> exit code)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

if TYPE_CHECKING:
    from gpufleet.catalog import Catalog
    from gpufleet.plan.model import StackPlan
    from gpufleet.spec.load import LoadedStack
    from gpufleet.spec.models import Stack

Command = TypeVar("Command", bound=Callable[..., Any])

# Exit codes: 0 success, 1 the input is wrong (an invalid stack, an unknown GPU), 2 usage errors (bad options, a
# stack name that names no file), 3 an internal error (a bug in gpufleet: `gpufleet --debug ...` shows its traceback).
EXIT_INVALID = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3
EXIT_CODES_HELP = (
    "Exit codes: 0 success, 1 the input is wrong, 2 usage error, 3 internal error (a bug: report it with the output "
    "of gpufleet --debug ...)."
)

# Emoji codes off: a diagnostic's "file:100:" must stay a line number. Markup stays on for gpufleet's own styling;
# text from input goes through shown() (or printable() with markup=False) before it reaches a console.
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: object) -> str:
    """Text from input with its control characters (ANSI escape sequences included) written as ``\\xNN``, so
    nothing a file or an argument holds can drive the terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", str(text))


def shown(text: object) -> str:
    """Text from input for a rich markup string: control characters escaped (:func:`printable`), markup escaped."""
    return escape(printable(text))


def print_diagnostics(console: Console, diagnostics: Iterable[object], indent: str = "") -> None:
    """``file:line: key.path: message`` lines, one per diagnostic, printed as they are."""
    for d in diagnostics:
        console.print(f"{indent}{printable(d)}", markup=False)


JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
RootOpt = Annotated[
    Path | None,
    typer.Option("--root", help="Project root holding the stack files (default: the nearest Pulumi.yaml upward)."),
]
StackArg = Annotated[str, typer.Argument(help="Stack name (prod-westeurope) or stack file.")]


def command(app: typer.Typer, name: str, summary: str) -> Callable[[Command], Command]:
    """Make the decorated function ``app``'s command ``name``, listed in the group's ``--help`` with ``summary`` (one
    line); its docstring is the command's own ``--help``."""

    def register(func: Command) -> Command:
        app.command(name, short_help=summary)(func)
        return func

    return register


def group(summary: str, **settings: Any) -> typer.Typer:
    """A command group (``gpufleet mig``, ``gpufleet lab``...), listed in ``gpufleet --help`` with ``summary`` (one
    line); ``settings`` are typer's, ``help`` the group's own ``--help`` (default: the summary). Run without a
    command, it shows its help."""
    return typer.Typer(short_help=summary, **{"help": summary, "no_args_is_help": True, **settings})


def write_output_or_exit(text: str, output: Path) -> None:
    """``text`` to ``output`` ('-': stdout), crash-safely (gpufleet.common.atomic); exit 1 with one line when it
    cannot be written."""
    from gpufleet.common.atomic import write_atomic

    if str(output) == "-":
        sys.stdout.write(text)
        return
    try:
        write_atomic(output, text)
    except OSError as exc:
        err.print(f"[red]error:[/red] cannot write {shown(output)}: {shown(exc.strerror)}")
        raise typer.Exit(EXIT_INVALID) from None


def emit_json(data: Any) -> None:
    """``--json`` output: one document on stdout."""
    sys.stdout.write(json.dumps(data, indent=2) + "\n")


def usage_error(message: str) -> typer.Exit:
    """Say what is wrong with the command line (``message`` is plain text); the caller raises the returned exit
    (code 2)."""
    err.print(f"[red]error:[/red] {shown(message)}")
    return typer.Exit(EXIT_USAGE)


def project_root(root: Path | None) -> Path:
    """``--root``, else the nearest directory upward holding Pulumi.yaml."""
    from gpufleet.spec.files import find_project_root

    return (root or find_project_root()).resolve()


def resolve_or_exit(ref: str, root: Path | None) -> Path:
    """The stack file a name (``prod-westeurope``) or path names; exit 2 when there is none."""
    from gpufleet.spec.files import StackNotFound, resolve_stack

    try:
        return resolve_stack(ref, project_root(root))
    except StackNotFound as exc:
        raise usage_error(str(exc)) from None


def load_or_exit(ref: str, root: Path | None, as_json: bool = False, consequence: str = "nothing done") -> Stack:
    """The validated stack ``ref`` names: exit 2 when no such stack, 1 with every error when it is invalid
    (``consequence`` says what was not done)."""
    stack = loaded_or_exit(ref, root, as_json, consequence).stack
    assert stack is not None
    return stack


def loaded_or_exit(
    ref: str, root: Path | None, as_json: bool = False, consequence: str = "nothing done"
) -> LoadedStack:
    """Like :func:`load_or_exit`, with the file's positions (``LoadedStack.place`` puts a key path at its line)."""
    from gpufleet.spec.load import load_stack

    loaded = load_stack(resolve_or_exit(ref, root))
    if loaded.stack is None:
        if as_json:
            emit_json({"stack": loaded.name, "ok": False, "errors": [d.to_dict() for d in loaded.diagnostics]})
        else:
            err.print(f"[red]invalid stack[/red] {shown(loaded.name)}: {consequence}")
            print_diagnostics(err, loaded.diagnostics, "  ")
        raise typer.Exit(EXIT_INVALID)
    return loaded


@dataclass(frozen=True)
class Planned:
    """A stack named on the command line, validated and planned: the file's positions, the catalog it was planned
    against, and the plan."""

    loaded: LoadedStack
    catalog: Catalog
    plan: StackPlan

    @property
    def stack(self) -> Stack:
        assert self.loaded.stack is not None  # planned_or_exit plans valid stacks only
        return self.loaded.stack


def planned_or_exit(ref: str, root: Path | None, as_json: bool = False, consequence: str = "nothing done") -> Planned:
    """The stack ``ref`` names, validated (or exit as :func:`load_or_exit` does) and planned against the catalog: the
    path of every command that reads a stack's plan (``plan``, ``render``, ``audit``)."""
    from gpufleet.catalog import load_catalog
    from gpufleet.plan.build import plan_stack

    loaded = loaded_or_exit(ref, root, as_json, consequence)
    catalog = load_catalog()
    assert loaded.stack is not None
    return Planned(loaded, catalog, plan_stack(loaded.stack, catalog))


def print_table(table: Table) -> None:
    """A table at the terminal's width on a terminal; into a pipe or a file, as wide as it needs (up to 200 columns)
    rather than rich's default 80, so cells are not cut to an ellipsis for the grep or the log that reads them."""
    if out.is_terminal:
        out.print(table)
    else:
        Console(file=out.file, width=max(out.width, 200), highlight=False, soft_wrap=True, emoji=False).print(table)
