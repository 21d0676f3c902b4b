#!/usr/bin/python
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Ansible module nvidia_runtime_config: add the NVIDIA runtime to containerd's or CRI-O's configuration, with
``nvidia-ctk runtime configure`` semantics, in pure Python (no nvidia-ctk needed: check mode and diff work).

TOML is read and written with tomlkit (module_utils ``gpufleet_toml``), which keeps a file's comments and layout:
an edited containerd config differs from the original only by what the change adds."""

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
    when it is written, its comments, order and layout are kept (nvidia-ctk drops them) and the new tables are
    added to it.
  - Needs the Python library tomlkit on the host (Debian and Ubuntu C(python3-tomlkit); the
    C(nvidia_container_toolkit) role installs it).
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
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible.module_utils.gpufleet_toml import (
    HAS_TOMLKIT,
    TOMLKIT_IMPORT_ERROR,
    TomlError,
    dumps,
    loads,
    new_document,
    plain,
    same,
)

CRI_PLUGIN = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
LOW_LEVEL_RUNTIMES = ("runc", "crun")
DEFAULT_PATHS = {"containerd": "/etc/containerd/config.toml", "crio": "/etc/crio/crio.conf.d/99-nvidia.conf"}
HEADER = {
    "containerd": "# The {name} runtime was added by gpufleet (nvidia_runtime_config, like nvidia-ctk).\n",
    "crio": "# Managed by gpufleet (nvidia_runtime_config, like `nvidia-ctk runtime configure --runtime=crio`).\n",
}


class ConfigError(Exception):
    """A config this module cannot (or must not) edit; the message says why."""


# -- containerd ------------------------------------------------------------------------------------------------


def _get(data: dict, keys: list[str]) -> object:
    for k in keys:
        if not isinstance(data, dict) or k not in data:
            return None
        data = data[k]
    return data


def _set(table: dict, key: str, value: object) -> None:
    """``table[key] = value`` unless it holds that value already: a document is changed only where the config
    changes (tomlkit rebuilds a table it is given, which a file's dotted-key layout may not allow)."""
    if key not in table or not same(plain(table[key]), value):
        table[key] = value


def _table(data: dict, keys: list[str]) -> dict:
    for k in keys:
        if k not in data:
            data[k] = {}
        value = data[k]  # the document's own table (a new one is converted when it is inserted)
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
    version = plain(config.get("version"))
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
    _set(new, "version", version)
    plugin = _table(new, ["plugins", CRI_PLUGIN[version]])
    ctrd = _table(plugin, ["containerd"])
    runtimes = _table(ctrd, ["runtimes"])
    effective_runtimes, effective_default = containerd_runtimes(effective) if effective else ({}, None)
    if not runtimes:
        for k, v in effective_runtimes.items():
            if k != name:
                runtimes[k] = plain(v)
    default = plain(ctrd.get("default_runtime_name", effective_default))
    known = {**effective_runtimes, **runtimes}
    source = next((r for r in source_runtimes(default) if isinstance(known.get(r), dict)), None)
    if source is not None:
        runtime = plain(known[source])
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
    _set(runtimes, name, runtime)
    if set_as_default:
        _set(ctrd, "default_runtime_name", name)
    elif ctrd.get("default_runtime_name") == name:
        if source is not None:
            _set(ctrd, "default_runtime_name", source)
        else:
            del ctrd["default_runtime_name"]
    if enable_cdi:
        _set(plugin, "enable_cdi", True)
    return new, source


def containerd_runtimes(config: dict) -> tuple[dict, object]:
    """The runtime tables and the default runtime's name of a containerd config (file or ``config dump``)."""
    if not config:
        return {}, None
    version = containerd_version(config, 2)
    ctrd = _get(config, ["plugins", CRI_PLUGIN[version], "containerd"]) or {}
    runtimes = ctrd.get("runtimes") if isinstance(ctrd, dict) else None
    default = ctrd.get("default_runtime_name") if ctrd else None
    return (plain(runtimes) if isinstance(runtimes, dict) else {}), plain(default)


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
    runtime = plain(runtimes[source]) if source is not None else {}
    runtime["runtime_path"] = path
    runtime["runtime_type"] = "oci"
    crio_runtime: dict = {}
    if set_as_default:
        crio_runtime["default_runtime"] = name
    crio_runtime["runtimes"] = {name: runtime}
    return {"crio": {"runtime": crio_runtime}}, source


def crio_runtimes(config: dict) -> tuple[dict, object]:
    runtimes = _get(config, ["crio", "runtime", "runtimes"])
    default = _get(config, ["crio", "runtime", "default_runtime"])
    return (plain(runtimes) if isinstance(runtimes, dict) else {}), plain(default)


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
    except TomlError as exc:
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
    before = parse(path, before_text) if before_text is not None else new_document()
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
            base = merge(base, plain(parse(f, read(f) or "")))
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
        result["config_version"] = plain(after["version"])
    if before_text is not None and same(plain(before), plain(after)):
        return result

    header = HEADER[engine].format(name=name)
    try:
        text = dumps(after)
    except TomlError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    # containerd's file keeps its own comments, ours once on top; CRI-O's drop-in is written whole
    after_text = text if engine == "containerd" and text.startswith(header) else header + text
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
    if not HAS_TOMLKIT:
        module.fail_json(
            msg=missing_required_lib("tomlkit", reason="to edit TOML (Debian and Ubuntu: python3-tomlkit)"),
            exception=str(TOMLKIT_IMPORT_ERROR),
        )
    try:
        module.exit_json(**run(module))
    except ConfigError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"{exc.filename or module.params['path']}: {exc.strerror}")


if __name__ == "__main__":
    main()
