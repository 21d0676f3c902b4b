"""Every conditional in the project's playbooks and roles is a Jinja expression string.

An unquoted ``": "`` inside a conditional makes YAML read a mapping, and ansible-core rejects it only when the task
runs ("Conditional expressions must be strings"). Neither the syntax check nor ansible-lint sees it, and a task that
runs only at the end of a 90-minute lab scenario would fail there. This test finds it in a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.conftest import REPO

CONDITION_KEYS = ("when", "changed_when", "failed_when", "until")
ASSERT_MODULES = ("assert", "ansible.builtin.assert", "ansible.legacy.assert")
ROOTS = ("roles", "ansible", "tests/molecule")


def _yaml_files() -> Iterator[Path]:
    for root in ROOTS:
        yield from sorted((REPO / root).rglob("*.yml"))


def _conditionals(node: object, where: str) -> Iterator[tuple[str, object]]:
    """(location, expression) for each conditional in a loaded playbook or task file."""
    if isinstance(node, list):
        for item in node:
            yield from _conditionals(item, where)
    elif isinstance(node, dict):
        here = f"{where} / {node['name']}" if isinstance(node.get("name"), str) else where
        for key in CONDITION_KEYS:
            if key in node:
                for expression in node[key] if isinstance(node[key], list) else [node[key]]:
                    yield f"{here}: {key}", expression
        for module in ASSERT_MODULES:
            if isinstance(node.get(module), dict) and "that" in node[module]:
                that = node[module]["that"]
                for expression in that if isinstance(that, list) else [that]:
                    yield f"{here}: that", expression
        for value in node.values():
            yield from _conditionals(value, here)


def bad_conditionals(text: str, where: str) -> list[str]:
    return [
        f"{location}: {expression!r} is not an expression string (quote it)"
        for location, expression in _conditionals(yaml.safe_load(text), where)
        if not isinstance(expression, (str, bool))
    ]


def test_an_unquoted_colon_in_an_assert_is_found():
    broken = """
- name: Check
  ansible.builtin.assert:
    that:
      - out is search('x86_64: installed')
      - out is search('ok')
"""
    (problem,) = bad_conditionals(broken, "sample.yml")
    assert problem.startswith("sample.yml / Check: that: {") and "quote it" in problem
    fixed = broken.replace("- out is search('x86_64: installed')", "- \"out is search('x86_64: installed')\"")
    assert bad_conditionals(fixed, "sample.yml") == []


def test_an_unquoted_colon_in_a_when_is_found():
    broken = "- name: Step\n  ansible.builtin.debug:\n    msg: hi\n  when:\n    - x is match('k: v')\n"
    assert len(bad_conditionals(broken, "s.yml")) == 1


def test_every_conditional_in_the_roles_and_playbooks_is_a_string():
    files = list(_yaml_files())
    assert len(files) > 50
    problems = [p for path in files for p in bad_conditionals(path.read_text(), str(path.relative_to(REPO)))]
    assert problems == [], "\n".join(problems)
