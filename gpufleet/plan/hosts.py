"""A stack's plan for Ansible: computed once per stack content, and seen from one host.

``plan_spec`` plans a stack given as data (the filters' input, validated exactly as a stack file is).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from gpufleet.plan.build import plan_stack
from gpufleet.plan.model import StackPlan

SPEC_SOURCE = "<gpufleet stack spec>"  # the "file" named in validation errors of a stack given as data


@functools.lru_cache(maxsize=8)
def _plan_spec_json(spec_json: str) -> StackPlan:
    from gpufleet.catalog import load_catalog
    from gpufleet.spec.load import NAMESPACE, validate_document

    spec = json.loads(spec_json)
    if not isinstance(spec, dict):
        raise ValueError(f"a gpufleet stack spec is a dict (lookup('gpufleet_stack', ...)), not {spec!r}")
    catalog = load_catalog()
    # the lookup's dict has every section, absent ones as None; a stack file leaves them out
    config = {f"{NAMESPACE}:{k}": v for k, v in spec.items() if v is not None}
    loaded = validate_document({"config": config}, SPEC_SOURCE, catalog=catalog)
    if loaded.stack is None:
        raise ValueError("invalid stack:\n" + "\n".join(str(d) for d in loaded.diagnostics))
    return plan_stack(loaded.stack, catalog)


def plan_spec(spec: Mapping[str, Any]) -> StackPlan:
    """The plan of a stack given as data (the ``gpufleet_stack`` lookup's dict), validated exactly as a stack file
    is; :class:`ValueError` with the validator's diagnostics when it is invalid. Cached per content."""
    return _plan_spec_json(json.dumps(spec, sort_keys=True))
