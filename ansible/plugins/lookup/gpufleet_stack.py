"""Lookup gpufleet_stack: a stack (Pulumi.<stack>.yaml) validated by gpufleet, as data for playbooks.

An invalid stack fails the lookup with gpufleet's file:line: key.path: message errors, before any host is touched.
"""

from __future__ import annotations

DOCUMENTATION = r"""
name: gpufleet_stack
short_description: A validated gpufleet stack
description:
  - Loads C(Pulumi.<stack>.yaml) from the gpufleet project (the nearest C(Pulumi.yaml) above the playbook) and
    validates it; returns the stack's gpufleet keys as a dict.
options:
  _terms:
    description: Stack name (e.g. lab-local) or path to a stack file.
    required: true
"""

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[dict[str, Any]]:
        from gpufleet.spec import StackNotFound, find_project_root, load_stack, resolve_stack

        start = Path((variables or {}).get("playbook_dir") or ".")
        root = find_project_root(start)
        out = []
        for term in terms:
            try:
                path = resolve_stack(str(term), root)
            except StackNotFound as exc:
                raise AnsibleLookupError(str(exc)) from None
            loaded = load_stack(path)
            if loaded.stack is None:
                raise AnsibleLookupError("invalid stack:\n" + "\n".join(str(d) for d in loaded.diagnostics))
            out.append(loaded.stack.model_dump(mode="json"))
        return out
