#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module nvidia_runtime_config: add the NVIDIA runtime to containerd's or CRI-O's configuration, with
``nvidia-ctk runtime configure`` semantics, in pure Python (no nvidia-ctk needed: check mode and diff work).

Runs on Python 3.9+ (RHEL 9's platform Python): TOML is read with ``tomllib`` (3.11+), else ``tomli``, else the
small reader below; it is written by the writer below (tables, arrays of tables, strings, integers, floats,
booleans, arrays, inline tables; no dates, which containerd and CRI-O configs do not use)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_runtime_config
short_description: Add the NVIDIA container runtime to containerd's or CRI-O's configuration
description:
  - Does what C(nvidia-ctk runtime configure --runtime=containerd|crio) does, without nvidia-ctk.
  - B(containerd), O(path) is C(config.toml), edited in place like C(nvidia-ctk ... --drop-in-config=""). The
    runtime table C(plugins."io.containerd.grpc.v1.cri".containerd.runtimes.<name>) (config C(version = 2),
    containerd 1.x) or C(plugins."io.containerd.cri.v1.runtime".containerd.runtimes.<name>) (C(version = 3),
    containerd 2.x) becomes a copy of the first of the default runtime (unless it is an C(nvidia*) one), C(runc)
    and C(crun) that the file or O(effective_config) defines, so C(SystemdCgroup) and the other options carry
    over; without one it gets C(runtime_type), C(runtime_root = ""), C(runtime_engine = "") and
    C(privileged_without_host_devices = false). Then C(options.BinaryName) is set to O(runtime_path).
  - A missing or empty containerd file becomes a minimal config of version O(config_version). Version 1 configs
    (no C(version) key) are refused.
  - B(CRI-O), O(path) is a drop-in holding C([crio.runtime.runtimes.<name>]), a copy of the first of
    the default runtime (unless C(nvidia*)), C(runc) and C(crun) that O(crio_base_configs) define, with
    C(runtime_path) and C(runtime_type = "oci"); plus C(crio.runtime.default_runtime) when O(set_as_default).
  - The file is written only when its content would change as TOML (comments and layout alone never count);
    when it is written it is re-serialised, so comments in it are not kept (as with nvidia-ctk).
  - With O(config_text) nothing is read from or written to O(path); the text (for example the output of
    C(containerd config dump) or C(crio status config)) is parsed and its runtimes returned, for verification.
  - Supports check mode and diff.
options:
  runtime:
    description: The container engine.
    type: str
    required: true
    choices: [containerd, crio]
  path:
    description:
      - containerd's config file, or the CRI-O drop-in to write.
      - Default C(/etc/containerd/config.toml) or C(/etc/crio/crio.conf.d/99-nvidia.conf).
    type: path
  runtime_name:
    description: The runtime's name in the config (what C(RuntimeClass.handler) refers to).
    type: str
    default: nvidia
  runtime_path:
    description: The NVIDIA Container Runtime executable.
    type: path
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - Make the runtime the default one (containerd C(default_runtime_name), CRI-O C(default_runtime)).
      - When false and containerd's default is this runtime, the default goes back to the runtime whose options
        were copied (or the key is removed), so the config follows the parameter both ways.
    type: bool
    default: false
  enable_cdi:
    description:
      - containerd only; set C(enable_cdi = true) in the CRI plugin (containerd 1.7 and later).
      - False leaves the setting as it is.
    type: bool
    default: false
  config_version:
    description: containerd only; the config version of a file that is missing or empty (3 for containerd 2.x).
    type: int
    default: 2
    choices: [2, 3]
  runtime_type:
    description: containerd only; the runtime type when no runtime's options can be copied.
    type: str
    default: io.containerd.runc.v2
  crio_base_configs:
    description:
      - CRI-O only; the configs (files, or directories of drop-ins read in name order) whose runtimes are copied.
      - O(path) itself is skipped.
    type: list
    elements: path
    default: [/etc/crio/crio.conf, /etc/crio/crio.conf.d]
  effective_config:
    description:
      - containerd only; containerd's effective config before the change (the output of C(containerd config dump)),
        like C(nvidia-ctk runtime configure --config-source=command).
      - Runtimes the file does not define (containerd's built-in C(runc)) are copied from it; a file that defines
        no runtime also gets the effective runtimes written into it, because containerd replaces its built-in
        runtimes with the file's runtime table (a file with only the NVIDIA runtime would lose C(runc), which
        stays the default runtime's name, and the CRI plugin would not start).
    type: str
  config_text:
    description: Parse this text instead of O(path) and change nothing (verification).
    type: str
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: false
author:
  - gpufleet contributors
"""

EXAMPLES = r"""
- name: Add the nvidia runtime to containerd
  nvidia_runtime_config:
    runtime: containerd
    config_version: 3  # used only when /etc/containerd/config.toml is missing (containerd 2.x)
  notify: Restart containerd

- name: Add the nvidia runtime to CRI-O (drop-in) as the default runtime
  nvidia_runtime_config:
    runtime: crio
    set_as_default: true

- name: Check the effective containerd config
  nvidia_runtime_config:
    runtime: containerd
    config_text: "{{ dump.stdout }}"
  register: effective
"""

RETURN = r"""
path:
  description: The file edited (or that would be).
  returned: always
  type: str
config_version:
  description: containerd's config version (after).
  returned: when runtime is containerd
  type: int
source_runtime:
  description: The runtime whose settings were copied; null when none was found.
  returned: unless config_text is given
  type: str
runtime:
  description: The NVIDIA runtime's table after the change; with config_text, as found (null when absent).
  returned: always
  type: dict
runtimes:
  description: Every runtime table (name to table) after the change, or as found in config_text.
  returned: always
  type: dict
default_runtime:
  description: The default runtime's name after the change (or as found); null when not set.
  returned: always
  type: str
backup_file:
  description: The backup's path.
  returned: when backup is true and the file changed
  type: str
"""

import copy
import math
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - depends on the target's Python
    try:
        import tomli as _toml
    except ImportError:
        _toml = None

CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
LOW_LEVEL_RUNTIMES = ("runc", "crun")
DEFAULT_PATHS = {"containerd": "/etc/containerd/config.toml", "crio": "/etc/crio/crio.conf.d/99-nvidia.conf"}
HEADER = {
    "containerd": (
        "# The {name} runtime was added by gpufleet (nvidia_runtime_config, like `nvidia-ctk runtime configure`);\n"
        "# comments are not kept when this file is rewritten.\n"
    ),
    "crio": "# Managed by gpufleet (nvidia_runtime_config, like `nvidia-ctk runtime configure --runtime=crio`).\n",
}


class ConfigError(Exception):
    """A config this module cannot (or must not) edit; the message says why."""


# -- TOML ------------------------------------------------------------------------------------------------------


class _Reader:
    """A TOML reader for targets without tomllib/tomli (RHEL 9's Python 3.9): TOML 1.0 without dates."""

    _BARE = re.compile(r"[A-Za-z0-9_-]+")
    _NUMBER = re.compile(
        r"[+-]?(?:inf|nan)|0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[+-]?\d[\d_]*(?:\.\d[\d_]*)?(?:[eE][+-]?\d[\d_]*)?"
    )
    _DATE = re.compile(r"\d{4}-\d{2}-\d{2}|\d{2}:\d{2}")
    _ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}

    def __init__(self, text: str) -> None:
        self.s = text.replace("\r\n", "\n")
        self.i = 0

    def error(self, message: str) -> ConfigError:
        line = self.s.count("\n", 0, self.i) + 1
        return ConfigError(f"line {line}: {message}")

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def skip_space(self) -> None:
        while self.i < len(self.s) and self.s[self.i] in " \t":
            self.i += 1

    def skip_comment(self) -> None:
        if self.peek() == "#":
            end = self.s.find("\n", self.i)
            self.i = len(self.s) if end < 0 else end

    def skip_blank(self) -> None:
        """Whitespace, newlines and comments (between statements and inside arrays)."""
        while True:
            self.skip_space()
            self.skip_comment()
            if self.peek() == "\n":
                self.i += 1
            else:
                return

    def end_of_line(self) -> None:
        self.skip_space()
        self.skip_comment()
        if self.i < len(self.s):
            if self.peek() != "\n":
                raise self.error(f"unexpected {self.peek()!r}")
            self.i += 1

    def expect(self, token: str) -> None:
        if not self.s.startswith(token, self.i):
            raise self.error(f"expected {token!r}")
        self.i += len(token)

    def parse(self) -> dict:
        root: dict = {}
        current = root
        while True:
            self.skip_blank()
            if self.i >= len(self.s):
                return root
            if self.peek(2) == "[[":
                self.i += 2
                keys = self.key()
                self.expect("]]")
                current = self.array_table(root, keys)
            elif self.peek() == "[":
                self.i += 1
                keys = self.key()
                self.expect("]")
                current = self.table(root, keys)
            else:
                keys = self.key()
                self.expect("=")
                self.skip_space()
                self.assign(current, keys, self.value())
            self.end_of_line()

    def key(self) -> list[str]:
        keys = []
        while True:
            self.skip_space()
            c = self.peek()
            if c == '"':
                keys.append(self.basic_string())
            elif c == "'":
                keys.append(self.literal_string())
            else:
                m = self._BARE.match(self.s, self.i)
                if not m:
                    raise self.error("expected a key")
                keys.append(m.group())
                self.i = m.end()
            self.skip_space()
            if self.peek() != ".":
                return keys
            self.i += 1

    def descend(self, table: dict, keys: list[str]) -> dict:
        for k in keys:
            value = table.setdefault(k, {})
            if isinstance(value, list) and value and isinstance(value[-1], dict):
                value = value[-1]
            if not isinstance(value, dict):
                raise self.error(f"{k!r} is not a table")
            table = value
        return table

    def table(self, root: dict, keys: list[str]) -> dict:
        return self.descend(root, keys)

    def array_table(self, root: dict, keys: list[str]) -> dict:
        parent = self.descend(root, keys[:-1])
        array = parent.setdefault(keys[-1], [])
        if not isinstance(array, list):
            raise self.error(f"{keys[-1]!r} is not an array of tables")
        array.append({})
        return array[-1]

    def assign(self, table: dict, keys: list[str], value: object) -> None:
        table = self.descend(table, keys[:-1])
        if keys[-1] in table:
            raise self.error(f"{keys[-1]!r} is defined twice")
        table[keys[-1]] = value

    def value(self) -> object:
        c = self.peek()
        if self.peek(3) == '"""':
            return self.multiline_basic_string()
        if c == '"':
            return self.basic_string()
        if self.peek(3) == "'''":
            return self.multiline_literal_string()
        if c == "'":
            return self.literal_string()
        if c == "[":
            return self.array()
        if c == "{":
            return self.inline_table()
        for word, value in (("true", True), ("false", False)):
            if self.s.startswith(word, self.i):
                self.i += len(word)
                return value
        if self._DATE.match(self.s, self.i):
            raise self.error("dates and times are not supported")
        m = self._NUMBER.match(self.s, self.i)
        if not m:
            raise self.error("expected a value")
        self.i = m.end()
        text = m.group().replace("_", "")
        if text.lstrip("+-") in ("inf", "nan"):
            return float(text)
        if text[:2] in ("0x", "0o", "0b"):
            return int(text, {"x": 16, "o": 8, "b": 2}[text[1]])
        if any(ch in text for ch in ".eE"):
            return float(text)
        return int(text)

    def escape(self) -> str:
        c = self.peek()
        if c in self._ESCAPES:
            self.i += 1
            return self._ESCAPES[c]
        if c in ("u", "U"):
            n = 4 if c == "u" else 8
            digits = self.s[self.i + 1 : self.i + 1 + n]
            if len(digits) != n or not re.fullmatch(r"[0-9A-Fa-f]+", digits):
                raise self.error("invalid unicode escape")
            self.i += 1 + n
            return chr(int(digits, 16))
        raise self.error(f"invalid escape \\{c}")

    def basic_string(self) -> str:
        self.i += 1
        out = []
        while True:
            c = self.peek()
            if c in ("", "\n"):
                raise self.error("unterminated string")
            self.i += 1
            if c == '"':
                return "".join(out)
            out.append(self.escape() if c == "\\" else c)

    def literal_string(self) -> str:
        end = self.s.find("'", self.i + 1)
        if end < 0 or "\n" in self.s[self.i + 1 : end]:
            raise self.error("unterminated string")
        text = self.s[self.i + 1 : end]
        self.i = end + 1
        return text

    def _closing(self, quote: str) -> int:
        """Index of the closing triple quote; up to two more quote characters belong to the content."""
        end = self.s.find(quote * 3, self.i)
        if end < 0:
            raise self.error("unterminated string")
        for _ in range(2):
            if self.s[end + 3 : end + 4] == quote:
                end += 1
        return end

    def multiline_basic_string(self) -> str:
        self.i += 3
        if self.peek() == "\n":
            self.i += 1
        out = []
        while True:
            if self.peek(3) == '"""':
                end = self._closing('"')
                out.append(self.s[self.i : end])
                self.i = end + 3
                return "".join(out)
            c = self.peek()
            if c == "":
                raise self.error("unterminated string")
            self.i += 1
            if c != "\\":
                out.append(c)
            elif re.match(r"[ \t]*\n", self.s[self.i :]):  # line-ending backslash: trim up to the next text
                while self.peek() in (" ", "\t", "\n"):
                    self.i += 1
            else:
                out.append(self.escape())

    def multiline_literal_string(self) -> str:
        self.i += 3
        if self.peek() == "\n":
            self.i += 1
        end = self._closing("'")
        text = self.s[self.i : end]
        self.i = end + 3
        return text

    def array(self) -> list:
        self.i += 1
        items = []
        while True:
            self.skip_blank()
            if self.peek() == "]":
                self.i += 1
                return items
            items.append(self.value())
            self.skip_blank()
            if self.peek() == ",":
                self.i += 1
            elif self.peek() != "]":
                raise self.error("expected ',' or ']' in an array")

    def inline_table(self) -> dict:
        self.i += 1
        table: dict = {}
        self.skip_space()
        if self.peek() == "}":
            self.i += 1
            return table
        while True:
            keys = self.key()
            self.expect("=")
            self.skip_space()
            self.assign(table, keys, self.value())
            self.skip_space()
            if self.peek() == "}":
                self.i += 1
                return table
            self.expect(",")


def loads_fallback(text: str) -> dict:
    return _Reader(text).parse()


def loads(text: str) -> dict:
    """Parse TOML; ConfigError (with the line) when it is not valid."""
    if _toml is None:
        return loads_fallback(text)
    try:
        return _toml.loads(text)
    except _toml.TOMLDecodeError as exc:
        raise ConfigError(str(exc)) from None


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(value: str) -> str:
    out = []
    for ch in value:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ch in "\b\t\n\f\r":
            out.append({"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"
    raise ConfigError(f"cannot write a {type(value).__name__} value to TOML")


def _is_table_array(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _emit(lines: list[str], path: list[str], table: dict, array_item: bool = False) -> None:
    depth = len(path)
    if path:
        header = ".".join(_key(k) for k in path)
        lines.extend(["", "  " * (depth - 1) + (f"[[{header}]]" if array_item else f"[{header}]")])
    for key, value in table.items():
        if not isinstance(value, dict) and not _is_table_array(value):
            lines.append("  " * depth + f"{_key(key)} = {_value(value)}")
    for key, value in table.items():
        if isinstance(value, dict):
            _emit(lines, [*path, key], value)
        elif _is_table_array(value):
            for item in value:
                _emit(lines, [*path, key], item, array_item=True)


def dumps(data: dict) -> str:
    """TOML text for ``data``, laid out like ``containerd config default`` (a header for every table)."""
    lines: list[str] = []
    _emit(lines, [], data)
    return "\n".join(lines).lstrip("\n") + "\n"


def same(a: object, b: object) -> bool:
    """Equal as TOML values: like ==, but true is not 1, 1 is not 1.0, and nan is nan."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # noqa: B905 (Python 3.9 targets)
    return a == b


# -- containerd ------------------------------------------------------------------------------------------------


def _get(data: dict, keys: list[str]) -> object:
    for k in keys:
        if not isinstance(data, dict) or k not in data:
            return None
        data = data[k]
    return data


def _table(data: dict, keys: list[str]) -> dict:
    for k in keys:
        value = data.setdefault(k, {})
        if not isinstance(value, dict):
            raise ConfigError(f"{'.'.join(keys)}: {k} is not a table")
        data = value
    return data


def source_runtimes(default_runtime: object) -> list[str]:
    """The runtimes whose settings the NVIDIA runtime copies, in order (nvidia-ctk: default, runc, crun)."""
    names = []
    if isinstance(default_runtime, str) and default_runtime and not default_runtime.startswith("nvidia"):
        names.append(default_runtime)
    return names + [r for r in LOW_LEVEL_RUNTIMES if r not in names]


def containerd_version(config: dict, default_version: int) -> int:
    if not config:
        return default_version
    version = config.get("version")
    if version is None:
        raise ConfigError(
            "the config has no 'version' key (a version 1 config, containerd < 1.5); set version = 2 and the v2 "
            "plugin names, or remove the file"
        )
    if type(version) is not int or version not in CRI_PLUGIN:
        raise ConfigError(f"unsupported config version {version!r} (supported: 2, 3)")
    return version


def configure_containerd(
    config: dict,
    *,
    name: str = "nvidia",
    path: str = "/usr/bin/nvidia-container-runtime",
    set_as_default: bool = False,
    enable_cdi: bool = False,
    default_version: int = 2,
    runtime_type: str = "io.containerd.runc.v2",
    effective: dict | None = None,
) -> tuple[dict, str | None]:
    """containerd's config with the NVIDIA runtime (a new dict), and the runtime its settings came from.

    ``effective`` is containerd's effective config (``containerd config dump``), which also holds the built-in
    runtimes: runtimes the file does not define are looked up there. A file that defines no runtime at all
    gets the effective ones too, since containerd replaces its built-in runtimes with the file's table (so a
    file with only ``runtimes.nvidia`` would lose ``runc``, still the default runtime's name).
    """
    new = copy.deepcopy(config)
    version = containerd_version(new, default_version)
    new["version"] = version
    plugin = _table(new, ["plugins", CRI_PLUGIN[version]])
    ctrd = _table(plugin, ["containerd"])
    runtimes = _table(ctrd, ["runtimes"])
    effective_runtimes, effective_default = containerd_runtimes(effective) if effective else ({}, None)
    if not runtimes:
        runtimes.update(copy.deepcopy({k: v for k, v in effective_runtimes.items() if k != name}))
    default = ctrd.get("default_runtime_name", effective_default)
    known = {**effective_runtimes, **runtimes}
    source = next((r for r in source_runtimes(default) if isinstance(known.get(r), dict)), None)
    if source is not None:
        runtime = copy.deepcopy(known[source])
    else:
        runtime = {
            "runtime_type": runtime_type,
            "runtime_root": "",
            "runtime_engine": "",
            "privileged_without_host_devices": False,
        }
    options = runtime.get("options")
    if not isinstance(options, dict):
        options = runtime["options"] = {}
    options["BinaryName"] = path
    runtimes[name] = runtime
    if set_as_default:
        ctrd["default_runtime_name"] = name
    elif ctrd.get("default_runtime_name") == name:
        if source is not None:
            ctrd["default_runtime_name"] = source
        else:
            del ctrd["default_runtime_name"]
    if enable_cdi:
        plugin["enable_cdi"] = True
    return new, source


def containerd_runtimes(config: dict) -> tuple[dict, object]:
    """The runtime tables and the default runtime's name of a containerd config (file or ``config dump``)."""
    if not config:
        return {}, None
    version = containerd_version(config, 2)
    ctrd = _get(config, ["plugins", CRI_PLUGIN[version], "containerd"]) or {}
    runtimes = ctrd.get("runtimes") if isinstance(ctrd, dict) else None
    return (runtimes if isinstance(runtimes, dict) else {}), (ctrd.get("default_runtime_name") if ctrd else None)


# -- CRI-O -----------------------------------------------------------------------------------------------------


def merge(base: dict, override: dict) -> dict:
    """CRI-O's drop-in semantics: later files override earlier ones key by key, tables merged."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def configure_crio(
    base: dict, *, name: str = "nvidia", path: str = "/usr/bin/nvidia-container-runtime", set_as_default: bool = False
) -> tuple[dict, str | None]:
    """The NVIDIA drop-in for CRI-O's effective config ``base``, and the runtime its settings came from."""
    runtimes = _get(base, ["crio", "runtime", "runtimes"])
    runtimes = runtimes if isinstance(runtimes, dict) else {}
    default = _get(base, ["crio", "runtime", "default_runtime"])
    source = next((r for r in source_runtimes(default) if isinstance(runtimes.get(r), dict)), None)
    runtime = copy.deepcopy(runtimes[source]) if source is not None else {}
    runtime["runtime_path"] = path
    runtime["runtime_type"] = "oci"
    crio_runtime: dict = {}
    if set_as_default:
        crio_runtime["default_runtime"] = name
    crio_runtime["runtimes"] = {name: runtime}
    return {"crio": {"runtime": crio_runtime}}, source


def crio_runtimes(config: dict) -> tuple[dict, object]:
    runtimes = _get(config, ["crio", "runtime", "runtimes"])
    return (runtimes if isinstance(runtimes, dict) else {}), _get(config, ["crio", "runtime", "default_runtime"])


def crio_base_files(paths: list[str], skip: str) -> list[str]:
    files = []
    for p in paths:
        if os.path.isdir(p):
            files.extend(os.path.join(p, f) for f in sorted(os.listdir(p)) if os.path.isfile(os.path.join(p, f)))
        elif os.path.isfile(p):
            files.append(p)
    return [f for f in files if os.path.realpath(f) != os.path.realpath(skip)]


# -- the module ------------------------------------------------------------------------------------------------


def read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def parse(path: str, text: str) -> dict:
    try:
        return loads(text)
    except ConfigError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def write(module: AnsibleModule, path: str, text: str) -> None:
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".nvidia_runtime_config.")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    if not os.path.exists(path):
        os.chmod(tmp, 0o644)
    module.atomic_move(tmp, path)


def run(module: AnsibleModule) -> dict:
    p = module.params
    engine = p["runtime"]
    path = p["path"] or DEFAULT_PATHS[engine]
    name = p["runtime_name"]
    listing = containerd_runtimes if engine == "containerd" else crio_runtimes

    if p["config_text"] is not None:  # verification: report, change nothing
        config = parse("config_text", p["config_text"])
        runtimes, default = listing(config)
        result = {"changed": False, "path": path, "runtimes": runtimes, "runtime": runtimes.get(name)}
        result["default_runtime"] = default
        if engine == "containerd":
            result["config_version"] = containerd_version(config, 2)
        return result

    before_text = read(path)
    before = parse(path, before_text) if before_text is not None else {}
    if engine == "containerd":
        after, source = configure_containerd(
            before,
            name=name,
            path=p["runtime_path"],
            set_as_default=p["set_as_default"],
            enable_cdi=p["enable_cdi"],
            default_version=p["config_version"],
            runtime_type=p["runtime_type"],
            effective=parse("effective_config", p["effective_config"]) if p["effective_config"] else None,
        )
    else:
        base: dict = {}
        for f in crio_base_files(p["crio_base_configs"], skip=path):
            base = merge(base, parse(f, read(f) or ""))
        after, source = configure_crio(base, name=name, path=p["runtime_path"], set_as_default=p["set_as_default"])

    runtimes, default = listing(after)
    result = {
        "changed": False,
        "path": path,
        "source_runtime": source,
        "runtimes": runtimes,
        "runtime": runtimes.get(name),
        "default_runtime": default,
    }
    if engine == "containerd":
        result["config_version"] = after["version"]
    if before_text is not None and same(before, after):
        return result

    after_text = HEADER[engine].format(name=name) + dumps(after)
    result["changed"] = True
    result["diff"] = {
        "before": before_text or "",
        "after": after_text,
        "before_header": path if before_text is not None else f"{path} (absent)",
        "after_header": path,
    }
    if module.check_mode:
        return result
    if p["backup"] and before_text is not None:
        result["backup_file"] = module.backup_local(path)
    write(module, path, after_text)
    return result


ARGUMENT_SPEC = {
    "runtime": {"type": "str", "required": True, "choices": ["containerd", "crio"]},
    "path": {"type": "path"},
    "runtime_name": {"type": "str", "default": "nvidia"},
    "runtime_path": {"type": "path", "default": "/usr/bin/nvidia-container-runtime"},
    "set_as_default": {"type": "bool", "default": False},
    "enable_cdi": {"type": "bool", "default": False},
    "config_version": {"type": "int", "default": 2, "choices": [2, 3]},
    "runtime_type": {"type": "str", "default": "io.containerd.runc.v2"},
    "crio_base_configs": {
        "type": "list",
        "elements": "path",
        "default": ["/etc/crio/crio.conf", "/etc/crio/crio.conf.d"],
    },
    "config_text": {"type": "str"},
    "effective_config": {"type": "str"},
    "backup": {"type": "bool", "default": False},
}


def main() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    try:
        module.exit_json(**run(module))
    except ConfigError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or module.params['path']}: {exc.strerror}")


if __name__ == "__main__":
    main()
