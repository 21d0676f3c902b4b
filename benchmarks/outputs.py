"""What gpufleet's commands print for every example stack, kept as files, and two such sets compared byte for byte.

For changes that must not change behaviour (a new layout of the package, issue 41): the outputs of one version of
the code against another's, the same stacks and the same day. ::

    python benchmarks/outputs.py snapshot DIR         # this tree's outputs into DIR
    python benchmarks/outputs.py compare REV          # REV's outputs (a temporary git worktree) against this tree's

For each example stack (``Pulumi.<stage>-<region>.yaml`` at the root and under ``examples/``): ``plan --json``,
``render -o`` (every file it writes) with its ``--json`` report, ``cost --json``, ``audit --json`` and
``inventory``; and ``mig pack``'s mig-parted output for the example demand, from scratch and as a repack of the
example fleet. Each command's exit status, standard output and standard error are kept, so an error is compared
like any output (without the pinned charts, where the tests find them, render's refusal is recorded). Both sets run
with this Python (this virtualenv's packages), each tree's own code first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300
sys.path.insert(0, str(REPO))
from gpufleet.spec.files import stack_files  # noqa: E402
from gpufleet.spec.load import stack_name_from_file  # noqa: E402
from tests.charts import CHARTS_DIR  # noqa: E402  (the pinned charts the tests use, when any are found)
from tests.conftest import gpufleet  # noqa: E402  (python -m gpufleet, no stdin, output captured)


def example_stacks(tree: Path) -> list[str]:
    """The example stacks of ``tree``: the root's by name, those under examples/ by path (as the CLI takes them)."""
    root = [stack_name_from_file(p) for p in stack_files(tree)]
    return root + sorted(str(p.relative_to(tree)) for p in tree.glob("examples/*/Pulumi.*.yaml"))


def commands(stack: str, out: Path) -> list[tuple[str, list[str]]]:
    """(name, gpufleet arguments) of each command kept for ``stack``; render writes its files below ``out``."""
    return [
        ("plan", ["plan", stack, "--json"]),
        ("render", ["render", stack, "-o", str(out / "render"), "--json"]),
        ("cost", ["cost", stack, "--json"]),
        ("audit", ["audit", stack, "--json"]),
        ("inventory", ["inventory", stack]),
    ]


MIG = [
    ("mig-pack", ["mig", "pack", "--demand", "examples/mig-demand.yaml", "-o", "-"]),
    ("mig-repack", ["mig", "pack", "--demand", "examples/mig-demand-next.yaml", "--current",
                    "examples/mig-current.yaml", "-o", "-"]),
]  # fmt: skip


def run(tree: Path, args: list[str]) -> str:
    """``gpufleet ARGS`` on ``tree``'s code, from ``tree``: its exit status, stdout and stderr as one text."""
    env = os.environ | {"PYTHONPATH": str(tree), "COLUMNS": "120", "NO_COLOR": "1"}
    if CHARTS_DIR is not None:
        env["GPUFLEET_CHARTS_DIR"] = str(CHARTS_DIR)
    proc = gpufleet(*args, cwd=tree, env=env, timeout=TIMEOUT_S)
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}--- stderr\n{proc.stderr}"


def snapshot(tree: Path, out: Path, stacks: list[str] | None = None, progress=print) -> int:
    """Write the outputs of ``tree``'s code into ``out`` (a new or empty folder: nothing in it is removed): a folder
    per stack (``/`` of a path as ``--``), a file per command, render's files below ``render/``. Returns how many
    commands ran."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists and is not an empty folder: give a new one")
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for stack in stacks if stacks is not None else example_stacks(tree):
        folder = out / stack.replace("/", "--")
        folder.mkdir()
        kept = commands(stack, folder)
        for name, args in kept:
            (folder / f"{name}.txt").write_text(run(tree, args).replace(str(folder), "OUT"))
        count += len(kept)
        progress(f"  {stack}: {len(kept)} commands")
    if stacks is None:
        for name, args in MIG:
            (out / f"{name}.txt").write_text(run(tree, args))
            count += 1
    return count


def compare(before: Path, after: Path) -> list[str]:
    """Every difference between two snapshots: a file only in one, or a unified diff of a file in both."""
    files = {p.relative_to(before) for p in before.rglob("*") if p.is_file()}
    files |= {p.relative_to(after) for p in after.rglob("*") if p.is_file()}
    found = []
    for rel in sorted(files):
        a, b = before / rel, after / rel
        if not a.exists() or not b.exists():
            found.append(f"{rel}: only in {'after' if b.exists() else 'before'}")
        elif a.read_bytes() != b.read_bytes():
            diff = difflib.unified_diff(
                a.read_text().splitlines(), b.read_text().splitlines(), f"before/{rel}", f"after/{rel}", lineterm=""
            )
            found.append("\n".join(list(diff)[:40]))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog="python benchmarks/outputs.py")
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="write this tree's outputs into DIR")
    snap.add_argument("dir", type=Path)
    comp = sub.add_parser("compare", help="REV's outputs (a temporary git worktree) against this tree's")
    comp.add_argument("rev", help="a git revision, e.g. main or HEAD~3")
    args = parser.parse_args(argv)
    if args.command == "snapshot":
        try:
            print(f"{snapshot(REPO, args.dir)} commands' outputs in {args.dir}")
        except FileExistsError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        return 0
    with tempfile.TemporaryDirectory(prefix="gpufleet-outputs-") as tmp:
        worktree = Path(tmp) / "before"
        git = ["git", "-C", str(REPO)]
        added = subprocess.run([*git, "worktree", "add", "--detach", "-q", str(worktree), args.rev],
                               capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)  # fmt: skip
        if added.returncode != 0:
            print(f"error: no worktree of {args.rev}: {added.stderr.strip()}", file=sys.stderr)
            return 2
        try:
            # the inventories `gpufleet lab up` writes are not tracked: the worktree reads this tree's
            for written in REPO.glob("inventories/*/hosts.yml"):
                there = worktree / written.relative_to(REPO)
                if not there.exists():
                    there.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(written, there)
            print(f"before ({args.rev}):")
            snapshot(worktree, Path(tmp) / "out-before")
            print("after (this tree):")
            count = snapshot(REPO, Path(tmp) / "out-after")
            found = compare(Path(tmp) / "out-before", Path(tmp) / "out-after")
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(worktree)], check=False,
                           stdin=subprocess.DEVNULL)  # fmt: skip
    for difference in found:
        print(difference)
    print(f"{count} commands: {'identical' if not found else f'{len(found)} file(s) differ'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
