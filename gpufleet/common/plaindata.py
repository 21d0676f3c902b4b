"""Data handed over by another tool as plain Python values. Standard library only: Ansible's filter plugins import
it when they load."""

from __future__ import annotations

import json
from typing import Any


def plain_data(value: Any) -> Any:
    """Data from elsewhere as plain dicts, lists, strings and numbers: Ansible's tagged and lazily templated values
    (what the roles' filters receive) as gpufleet's models expect them; anything JSON cannot hold as its text."""
    return json.loads(json.dumps(value, default=str))
