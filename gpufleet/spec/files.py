"""Where a project's stacks are: the project root, its ``Pulumi.<stack>.yaml`` files, and a stack named on the
command line (a name or a path) resolved to its file."""

from __future__ import annotations

import os
from pathlib import Path

from gpufleet.spec.load import stack_name_from_file


class StackNotFound(LookupError):
    """A stack name or path that names no stack file."""


def display_path(path: Path) -> Path:
    """``path`` relative to the working directory when it lies below it (shorter diagnostics)."""
    rel = os.path.relpath(path)
    return Path(rel) if not rel.startswith("..") else path


def find_project_root(start: Path | None = None) -> Path:
    """The nearest directory at or above ``start`` holding ``Pulumi.yaml``; ``start`` itself if none does."""
    start = (start or Path.cwd()).resolve()
    for candidate in (start, *start.parents):
        if (candidate / "Pulumi.yaml").is_file():
            return candidate
    return start


def stack_files(root: Path) -> list[Path]:
    """Every ``Pulumi.<stack>.yaml`` in the project root, sorted."""
    found = (p for p in root.glob("Pulumi.*.y*ml") if p.name not in ("Pulumi.yaml", "Pulumi.yml"))
    return sorted(display_path(p) for p in found)


def resolve_stack(ref: str, root: Path) -> Path:
    """A stack name (``prod-westeurope``) or a path to a stack file -> the file."""
    as_path = Path(ref)
    if as_path.suffix in (".yaml", ".yml") or "/" in ref:
        if as_path.is_file():
            return as_path
        if as_path.exists():
            raise StackNotFound(f"not a regular file: {ref} (a stack is a YAML file)")
        raise StackNotFound(f"no such stack file: {ref}")
    for suffix in (".yaml", ".yml"):
        candidate = root / f"Pulumi.{ref}{suffix}"
        if candidate.is_file():
            return display_path(candidate)
    known = [stack_name_from_file(p) for p in stack_files(root)]
    from gpufleet.common.diagnostics import did_you_mean

    raise StackNotFound(f"no stack {ref!r} in {root}; " + did_you_mean(ref, known))
