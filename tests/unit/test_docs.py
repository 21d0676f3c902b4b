"""The documentation says what the code does: every stack key is in docs/stacks.md, and the README's
commands exist."""

from __future__ import annotations

import re
import typing

from pydantic import BaseModel

from gpufleet.common.yamldoc import unwrap as _unwrap
from gpufleet.spec.models import Stack
from tests.conftest import REPO


def _all_keys(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    seen = seen if seen is not None else set()
    if model in seen:
        return set()
    seen.add(model)
    keys = set(model.model_fields)
    for field in model.model_fields.values():
        pending = _unwrap(field.annotation)
        while pending:
            t = pending.pop()
            if isinstance(t, type) and issubclass(t, BaseModel):
                keys |= _all_keys(t, seen)
            else:
                for arg in typing.get_args(t):
                    pending.extend(_unwrap(arg))
    return keys


def test_every_stack_key_is_documented():
    doc = (REPO / "docs/stacks.md").read_text()
    blocks = re.findall(r"```\w*\n(.*?)```", doc, re.S)
    spans = blocks + re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", doc, flags=re.S))
    documented = {word for span in spans for word in re.findall(r"[a-z][a-z0-9_]*", span)}
    missing = sorted(_all_keys(Stack) - documented)
    assert missing == [], f"docs/stacks.md does not mention: {missing}"


def test_readme_make_targets_exist():
    readme = (REPO / "README.md").read_text()
    makefile = (REPO / "Makefile").read_text()
    targets = {t for rule in re.findall(r"^([a-z][a-z -]*):", makefile, re.M) for t in rule.split()}
    for target in set(re.findall(r"\bmake ([a-z][a-z-]*)", readme)):
        assert target in targets, f"README mentions `make {target}`, the Makefile has no such target"
    from gpufleet.cli import app

    commands = {c.name or c.callback.__name__ for c in app.registered_commands}
    commands |= {g.name for g in app.registered_groups}
    for command in set(re.findall(r"^\s*(?:\.venv/bin/)?gpufleet ([a-z]+)", readme, re.M)):
        assert command in commands, f"README runs `gpufleet {command}`, which the CLI does not have"
