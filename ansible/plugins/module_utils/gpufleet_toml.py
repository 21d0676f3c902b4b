# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""TOML for gpufleet's modules, through tomlkit (a maintained library that keeps a document's comments, order and
layout when it is edited and written back).

The host needs tomlkit for its Python (Debian and Ubuntu: ``python3-tomlkit``); the ``nvidia_container_toolkit``
role installs it before its modules run. Modules check :data:`HAS_TOMLKIT` and fail with
:func:`ansible.module_utils.basic.missing_required_lib` when it is missing. Runs on Python 3.9+ (RHEL 9's platform
Python) and tomlkit 0.11+ (Debian 12 ships 0.11.7).
"""

from __future__ import annotations

import copy
import math
from typing import Any

try:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    HAS_TOMLKIT = True
    TOMLKIT_IMPORT_ERROR = None
except ImportError as exc:  # the module reports it (missing_required_lib)
    tomlkit = None
    TOMLKitError = Exception
    HAS_TOMLKIT = False
    TOMLKIT_IMPORT_ERROR = exc


class TomlError(Exception):
    """Text that is not TOML, or a value TOML cannot hold; the message says where or which."""


def loads(text: str) -> Any:
    """The document of ``text`` (a dict-like tomlkit document that keeps its comments and layout)."""
    try:
        return tomlkit.parse(text)
    except TOMLKitError as exc:
        raise TomlError(str(exc)) from None


def new_document() -> Any:
    """An empty document, to fill like a dict."""
    return tomlkit.document()


def dumps(document: Any) -> str:
    """The text of a document (as parsed, with its comments and layout, plus the changes made to it) or of a plain
    dict (tomlkit's layout)."""
    try:
        return tomlkit.dumps(document)
    except (TOMLKitError, TypeError, ValueError) as exc:
        raise TomlError(f"cannot write TOML: {exc}") from None


def plain(value: Any) -> Any:
    """A document, table or value as plain Python data (dict, list, str, int, float, bool), a deep copy."""
    unwrap = getattr(value, "unwrap", None)
    if unwrap is not None:
        return unwrap()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return copy.deepcopy(value)


def same(a: Any, b: Any) -> bool:
    """Equal as TOML values (of plain data): like ==, but true is not 1, 1 is not 1.0, and nan is nan."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # noqa: B905 (Python 3.9 targets)
    return a == b
