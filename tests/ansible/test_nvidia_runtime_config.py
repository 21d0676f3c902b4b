"""The nvidia_runtime_config module: containerd / CRI-O edits with `nvidia-ctk runtime configure` semantics, and
its TOML handling (module_utils gpufleet_toml, through tomlkit: comments and layout kept), checked against tomllib
and recorded containerd configs."""

from __future__ import annotations

import copy
import difflib
import importlib.util
import json
import math
import os
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES, REPO


def load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as Ansible ships it: ansible.module_utils.<name>
    spec.loader.exec_module(module)
    return module


toml = load("ansible.module_utils.gpufleet_toml", "ansible/plugins/module_utils/gpufleet_toml.py")
nrc = load("nvidia_runtime_config", "ansible/plugins/modules/nvidia_runtime_config.py")

CONTAINERD = FIXTURES / "containerd"
CONFIGS = sorted(p for p in CONTAINERD.glob("*.toml"))
NVIDIA = "/usr/bin/nvidia-container-runtime"
V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"

# The minimal config Kubernetes' container runtime guide asks for: runc with the systemd cgroup driver.
KUBEADM_V2 = """
version = 2
# a comment the module keeps when it rewrites the file

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "example.invalid/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""

# Everything a hand-edited config may hold that the module must carry through untouched.
ODD = (CONTAINERD / "hand-edited-odd.toml").read_text()


def nvidia_runtime(config: dict, plugin: str = V2) -> dict:
    return config["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]


def without_nvidia(config: dict, plugin: str = V2) -> dict:
    out = copy.deepcopy(config)
    del out["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]
    return out


# -- containerd ------------------------------------------------------------------------------------------------


def test_v2_config_gets_an_nvidia_runtime_copied_from_runc_with_its_binary():
    config = tomllib.loads(KUBEADM_V2)
    new, source = nrc.configure_containerd(config)
    assert source == "runc"
    assert nvidia_runtime(new) == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": NVIDIA},
    }
    assert without_nvidia(new) == config  # nothing else moved
    assert "default_runtime_name" not in new["plugins"][V2]["containerd"]
    assert config == tomllib.loads(KUBEADM_V2)  # the input is not modified


def test_v3_config_uses_containerd_2s_cri_runtime_plugin():
    config = tomllib.loads((CONTAINERD / "containerd-2-default-systemd.toml").read_text())
    new, source = nrc.configure_containerd(config)
    assert source == "runc"
    runc = config["plugins"][V3]["containerd"]["runtimes"]["runc"]
    assert nvidia_runtime(new, V3) == {**runc, "options": {**runc["options"], "BinaryName": NVIDIA}}
    assert nvidia_runtime(new, V3)["options"]["SystemdCgroup"] is True
    assert nvidia_runtime(new, V3)["sandboxer"] == "podsandbox"
    assert "containerd" not in new["plugins"][V2]  # the v2 plugin name is not used in a v3 config
    assert without_nvidia(new, V3) == config


def test_debian_default_config_keeps_every_runc_option():
    config = tomllib.loads((CONTAINERD / "debian12-containerd-1.6-default.toml").read_text())
    new, _ = nrc.configure_containerd(config)
    runc = config["plugins"][V2]["containerd"]["runtimes"]["runc"]
    assert runc["options"]["BinaryName"] == ""
    assert nvidia_runtime(new) == {**runc, "options": {**runc["options"], "BinaryName": NVIDIA}}


@pytest.mark.parametrize(("version", "plugin"), [(2, V2), (3, V3)])
def test_a_missing_file_becomes_a_minimal_config_with_nvidia_ctks_defaults(version, plugin):
    new, source = nrc.configure_containerd({}, default_version=version)
    assert source is None
    assert new == {
        "version": version,
        "plugins": {
            plugin: {
                "containerd": {
                    "runtimes": {
                        "nvidia": {
                            "runtime_type": "io.containerd.runc.v2",
                            "runtime_root": "",
                            "runtime_engine": "",
                            "privileged_without_host_devices": False,
                            "options": {"BinaryName": NVIDIA},
                        }
                    }
                }
            }
        },
    }


def test_an_existing_files_version_wins_over_the_default_version():
    new, _ = nrc.configure_containerd(tomllib.loads(KUBEADM_V2), default_version=3)
    assert new["version"] == 2
    assert V3 not in new["plugins"]


def test_the_default_runtimes_options_take_precedence_over_runc():
    config = tomllib.loads(KUBEADM_V2)
    ctrd = config["plugins"][V2]["containerd"]
    ctrd["default_runtime_name"] = "crun"
    ctrd["runtimes"]["crun"] = {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": "/usr/bin/crun"}}
    new, source = nrc.configure_containerd(config)
    assert source == "crun"
    assert nvidia_runtime(new)["options"] == {"BinaryName": NVIDIA}


def test_an_nvidia_default_runtime_is_not_a_source_and_crun_follows_runc():
    config = {"version": 2, "plugins": {V2: {"containerd": {"default_runtime_name": "nvidia-cdi", "runtimes": {}}}}}
    config["plugins"][V2]["containerd"]["runtimes"]["crun"] = {"runtime_type": "io.containerd.runc.v2"}
    config["plugins"][V2]["containerd"]["runtimes"]["nvidia-cdi"] = {"runtime_type": "other"}
    new, source = nrc.configure_containerd(config)
    assert source == "crun"
    assert nvidia_runtime(new) == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": NVIDIA}}


def test_an_existing_nvidia_runtime_is_replaced_like_nvidia_ctk_does():
    config = tomllib.loads(KUBEADM_V2)
    config["plugins"][V2]["containerd"]["runtimes"]["nvidia"] = {"runtime_type": "stale", "options": {"Old": 1}}
    new, _ = nrc.configure_containerd(config, path="/opt/nvidia/nvidia-container-runtime")
    assert nvidia_runtime(new) == {
        "runtime_type": "io.containerd.runc.v2",
        "options": {"SystemdCgroup": True, "BinaryName": "/opt/nvidia/nvidia-container-runtime"},
    }


def test_set_as_default_names_the_runtime_and_unsetting_it_restores_the_source():
    config = tomllib.loads(KUBEADM_V2)
    default, _ = nrc.configure_containerd(config, set_as_default=True)
    assert default["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"
    again, _ = nrc.configure_containerd(default, set_as_default=True)
    assert nrc.same(again, default)
    restored, source = nrc.configure_containerd(default, set_as_default=False)
    assert source == "runc"  # the nvidia default does not become its own source
    assert restored["plugins"][V2]["containerd"]["default_runtime_name"] == "runc"
    assert nvidia_runtime(restored) == nvidia_runtime(default)


def test_unsetting_the_default_without_a_source_removes_the_key():
    default, _ = nrc.configure_containerd({}, set_as_default=True)
    restored, _ = nrc.configure_containerd(default, set_as_default=False)
    assert "default_runtime_name" not in restored["plugins"][V2]["containerd"]


def test_another_default_runtime_is_left_alone_when_not_set_as_default():
    config = tomllib.loads(KUBEADM_V2)
    config["plugins"][V2]["containerd"]["default_runtime_name"] = "runc"
    new, _ = nrc.configure_containerd(config)
    assert new["plugins"][V2]["containerd"]["default_runtime_name"] == "runc"


@pytest.mark.parametrize("version", [2, 3])
def test_enable_cdi_sets_the_cri_plugins_switch(version):
    new, _ = nrc.configure_containerd({}, default_version=version, enable_cdi=True)
    assert new["plugins"][{2: V2, 3: V3}[version]]["enable_cdi"] is True
    untouched, _ = nrc.configure_containerd({}, default_version=version)
    assert "enable_cdi" not in untouched["plugins"][{2: V2, 3: V3}[version]]


def test_unknown_tables_and_values_are_preserved():
    config = tomllib.loads(ODD)
    new, source = nrc.configure_containerd(config, set_as_default=False)
    assert source is None  # kata is neither the default nor runc/crun
    assert toml.same(without_nvidia(new), config)
    written = tomllib.loads(toml.dumps(new))
    assert toml.same(written, new)
    assert written["plugins"]["io.containerd.transfer.v1.local"]["unpack_config"][1]["extra"] == {"x": 1}
    assert math.isnan(written["numbers"][-1]) and written["numbers"][-2] == -math.inf


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
@pytest.mark.parametrize("set_as_default", [False, True])
def test_a_second_apply_changes_nothing(config, set_as_default):
    once, _ = nrc.configure_containerd(toml.loads(config.read_text()), set_as_default=set_as_default)
    written = toml.loads(toml.dumps(once))
    twice, _ = nrc.configure_containerd(written, set_as_default=set_as_default)
    assert toml.same(toml.plain(twice), toml.plain(written))


def test_debians_packaged_config_keeps_the_builtin_runc_from_the_effective_config():
    # Debian's config.toml defines no runtime; containerd replaces its built-in runtimes (runc) with the file's
    # table, so adding only nvidia would leave default_runtime_name = "runc" pointing at nothing.
    packaged = tomllib.loads((CONTAINERD / "debian12-containerd-1.6-packaged.toml").read_text())
    dump = tomllib.loads((CONTAINERD / "debian12-containerd-1.6-packaged.dump.toml").read_text())
    builtin_runc = dump["plugins"][V2]["containerd"]["runtimes"]["runc"]
    new, source = nrc.configure_containerd(packaged, effective=dump)
    assert source == "runc"
    runtimes = new["plugins"][V2]["containerd"]["runtimes"]
    assert set(runtimes) == {"runc", "nvidia"}
    assert runtimes["runc"] == builtin_runc
    assert runtimes["nvidia"] == {**builtin_runc, "options": {**builtin_runc["options"], "BinaryName": NVIDIA}}
    assert new["plugins"][V2]["cni"] == packaged["plugins"][V2]["cni"]  # Debian's CNI paths stay
    # without the effective config the module can only do what nvidia-ctk does with the file alone
    alone, _ = nrc.configure_containerd(packaged)
    assert set(alone["plugins"][V2]["containerd"]["runtimes"]) == {"nvidia"}


def test_runtimes_the_file_defines_are_not_taken_from_the_effective_config():
    dump = tomllib.loads((CONTAINERD / "debian12-containerd-1.6-packaged.dump.toml").read_text())
    new, _ = nrc.configure_containerd(tomllib.loads(KUBEADM_V2), effective=dump)
    assert set(new["plugins"][V2]["containerd"]["runtimes"]) == {"runc", "nvidia"}
    assert nvidia_runtime(new)["options"] == {"SystemdCgroup": True, "BinaryName": NVIDIA}


def test_a_version_1_config_is_refused_with_a_reason():
    with pytest.raises(nrc.ConfigError, match="version 1"):
        nrc.configure_containerd({"plugins": {"cri": {}}})
    with pytest.raises(nrc.ConfigError, match="unsupported config version 4"):
        nrc.configure_containerd({"version": 4})
    with pytest.raises(nrc.ConfigError, match="unsupported config version '2'"):
        nrc.configure_containerd({"version": "2"})


def test_the_runtimes_of_a_config_dump_are_listed():
    dump = tomllib.loads((CONTAINERD / "debian12-containerd-1.6-packaged.dump.toml").read_text())
    runtimes, default = nrc.containerd_runtimes(dump)
    assert default == "runc"
    assert set(runtimes) == {"runc"}
    assert nrc.containerd_runtimes({}) == ({}, None)


# -- CRI-O -----------------------------------------------------------------------------------------------------

CRIO_CONF = """
[crio.runtime]
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/libexec/crio/crun"
runtime_root = "/run/crun"
monitor_path = "/usr/libexec/crio/conmon"
allowed_annotations = ["io.containerd.cri.runtime-handler"]

[crio.runtime.runtimes.runc]
runtime_path = "/usr/libexec/crio/runc"
runtime_root = "/run/runc"
"""


def test_crio_drop_in_copies_the_default_runtime_and_sets_path_and_type():
    dropin, source = nrc.configure_crio(tomllib.loads(CRIO_CONF))
    assert source == "crun"
    assert dropin == {
        "crio": {
            "runtime": {
                "runtimes": {
                    "nvidia": {
                        "runtime_path": NVIDIA,
                        "runtime_root": "/run/crun",
                        "monitor_path": "/usr/libexec/crio/conmon",
                        "allowed_annotations": ["io.containerd.cri.runtime-handler"],
                        "runtime_type": "oci",
                    }
                }
            }
        }
    }


def test_crio_drop_in_for_a_bare_crio_holds_what_nvidia_ctk_writes():
    """nvidia-ctk writes these keys (with a header for every table); tomlkit writes only the tables with keys."""
    dropin, source = nrc.configure_crio({}, set_as_default=True)
    assert source is None
    assert toml.dumps(dropin) == (
        "[crio.runtime]\n"
        'default_runtime = "nvidia"\n'
        "\n"
        "[crio.runtime.runtimes.nvidia]\n"
        'runtime_path = "/usr/bin/nvidia-container-runtime"\n'
        'runtime_type = "oci"\n'
    )


def test_crio_base_configs_merge_like_drop_ins_and_skip_the_nvidia_drop_in(tmp_path):
    (tmp_path / "crio.conf").write_text(CRIO_CONF)
    conf_d = tmp_path / "crio.conf.d"
    conf_d.mkdir()
    (conf_d / "10-runc.conf").write_text('[crio.runtime]\ndefault_runtime = "runc"\n')
    (conf_d / "99-nvidia.conf").write_text('[crio.runtime]\ndefault_runtime = "nvidia"\n')
    files = nrc.crio_base_files([str(tmp_path / "crio.conf"), str(conf_d)], skip=str(conf_d / "99-nvidia.conf"))
    assert [Path(f).name for f in files] == ["crio.conf", "10-runc.conf"]
    base: dict = {}
    for f in files:
        base = nrc.merge(base, tomllib.loads(Path(f).read_text()))
    assert base["crio"]["runtime"]["default_runtime"] == "runc"
    assert set(base["crio"]["runtime"]["runtimes"]) == {"crun", "runc"}  # tables merge, keys override
    _, source = nrc.configure_crio(base)
    assert source == "runc"


# -- the module's run(): files, check mode, diff, idempotence --------------------------------------------------


class FakeModule:
    def __init__(self, check_mode: bool = False, **params):
        self.check_mode = check_mode
        defaults = {name: spec.get("default") for name, spec in nrc.ARGUMENT_SPEC.items()}
        self.params = {**defaults, "runtime": "containerd", "crio_base_configs": [], **params}  # not the host's CRI-O
        self.backups: list[str] = []

    def atomic_move(self, src: str, dest: str) -> None:
        os.replace(src, dest)

    def backup_local(self, path: str) -> str:
        self.backups.append(path)
        return path + ".bak"


def test_run_writes_once_then_reports_no_change(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(KUBEADM_V2)
    first = nrc.run(FakeModule(path=str(config)))
    assert first["changed"] and first["source_runtime"] == "runc"
    assert first["diff"]["before"] == KUBEADM_V2
    text = config.read_text()
    assert text.startswith("# The nvidia runtime was added by gpufleet")
    assert nvidia_runtime(tomllib.loads(text))["options"]["BinaryName"] == NVIDIA
    # the file as it was is kept, comments and layout included; the new tables follow it
    assert KUBEADM_V2 in text
    second = nrc.run(FakeModule(path=str(config)))
    assert not second["changed"] and "diff" not in second
    assert config.read_text() == text
    assert second["runtime"] == first["runtime"]


def test_run_leaves_a_file_that_already_has_the_runtime_as_it_is_whatever_its_layout(tmp_path):
    config = tmp_path / "config.toml"
    wanted, _ = nrc.configure_containerd(tomllib.loads(KUBEADM_V2))

    def dotted(prefix: str, table: dict) -> list[str]:  # every value on its own line, under a dotted key
        return [
            line
            for k, v in table.items()
            for line in (dotted(f"{prefix}.{k}", v) if isinstance(v, dict) else [f"{prefix}.{k} = {json.dumps(v)}"])
        ]

    runtimes = wanted["plugins"][V2]["containerd"]["runtimes"]
    compact = "# hand-written, comments kept\nversion = 2\n"
    compact += "\n".join(dotted(f'plugins."{V2}".containerd.runtimes', runtimes))
    compact += f'\nplugins."{V2}".sandbox_image = "example.invalid/pause:3.9"'
    compact += f'\nplugins."{V2}".containerd.snapshotter = "overlayfs"\n'
    config.write_text(compact)
    result = nrc.run(FakeModule(path=str(config)))
    assert not result["changed"]
    assert config.read_text() == compact


def test_check_mode_reports_the_change_with_a_diff_and_writes_nothing(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(KUBEADM_V2)
    result = nrc.run(FakeModule(check_mode=True, path=str(config), set_as_default=True))
    assert result["changed"]
    assert 'default_runtime_name = "nvidia"' in result["diff"]["after"]
    assert result["default_runtime"] == "nvidia"
    assert config.read_text() == KUBEADM_V2
    missing = tmp_path / "absent" / "config.toml"
    result = nrc.run(FakeModule(check_mode=True, path=str(missing), config_version=3))
    assert result["changed"] and result["config_version"] == 3
    assert result["diff"]["before_header"].endswith("(absent)")
    assert not missing.parent.exists()


def test_run_creates_a_missing_file_and_backs_up_an_existing_one(tmp_path):
    missing = tmp_path / "containerd" / "config.toml"
    nrc.run(FakeModule(path=str(missing), config_version=3, effective_config=None))
    assert tomllib.loads(missing.read_text())["version"] == 3
    assert oct(missing.stat().st_mode & 0o777) == "0o644"
    module = FakeModule(path=str(missing), set_as_default=True, backup=True)
    result = nrc.run(module)
    assert module.backups == [str(missing)] and result["backup_file"] == str(missing) + ".bak"


def test_run_uses_the_effective_config_for_debians_packaged_file(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text((CONTAINERD / "debian12-containerd-1.6-packaged.toml").read_text())
    dump = (CONTAINERD / "debian12-containerd-1.6-packaged.dump.toml").read_text()
    result = nrc.run(FakeModule(path=str(config), effective_config=dump))
    assert result["changed"] and set(result["runtimes"]) == {"runc", "nvidia"}
    assert not nrc.run(FakeModule(path=str(config), effective_config=dump))["changed"]


def test_run_refuses_a_file_that_is_not_toml(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("version = 2\n[plugins\n")
    with pytest.raises(nrc.ConfigError, match=r"config\.toml: not valid TOML"):
        nrc.run(FakeModule(path=str(config)))


def test_config_text_mode_reports_a_dumps_runtimes_and_writes_nothing(tmp_path):
    config = tmp_path / "config.toml"
    dump = (CONTAINERD / "debian12-containerd-1.6-packaged.dump.toml").read_text()
    result = nrc.run(FakeModule(path=str(config), config_text=dump))
    assert not result["changed"]
    assert result["runtime"] is None and set(result["runtimes"]) == {"runc"}
    assert result["default_runtime"] == "runc" and result["config_version"] == 2
    assert not config.exists()
    configured = toml.dumps(nrc.configure_containerd(toml.loads(dump), set_as_default=True)[0])
    result = nrc.run(FakeModule(path=str(config), config_text=configured))
    assert result["runtime"]["options"]["BinaryName"] == NVIDIA and result["default_runtime"] == "nvidia"


def test_crio_run_writes_the_drop_in_from_the_base_configs(tmp_path):
    (tmp_path / "crio.conf").write_text(CRIO_CONF)
    dropin = tmp_path / "crio.conf.d" / "99-nvidia.conf"
    module = FakeModule(runtime="crio", path=str(dropin), crio_base_configs=[str(tmp_path / "crio.conf")])
    result = nrc.run(module)
    assert result["changed"] and result["source_runtime"] == "crun"
    text = dropin.read_text()
    assert text.startswith("# Managed by gpufleet")
    written = tomllib.loads(text)
    assert written["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_type"] == "oci"
    assert "default_runtime" not in written["crio"]["runtime"]
    assert not nrc.run(module)["changed"]
    assert nrc.run(FakeModule(runtime="crio", path=str(dropin), set_as_default=True))["changed"]


# -- TOML (module_utils gpufleet_toml, through tomlkit) ---------------------------------------------------------


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_recorded_configs_read_as_tomllib_reads_them_and_write_back_unchanged(config):
    text = config.read_text()
    document = toml.loads(text)
    assert toml.same(toml.plain(document), tomllib.loads(text))
    assert toml.dumps(document) == text  # comments, order and layout kept


def test_odd_toml_reads_as_tomllib_reads_it_and_writes_back_unchanged():
    document, reference = toml.plain(toml.loads(ODD)), tomllib.loads(ODD)
    assert math.isnan(document["numbers"][-1])
    assert toml.same(document, reference)
    assert document["multi"] == 'first line\n  second "line" continued'
    assert document["multi_literal"] == "raw \\n text"
    assert toml.dumps(toml.loads(ODD)) == ODD
    assert toml.plain(toml.loads('a = """x"""""')) == {"a": 'x""'}


@pytest.mark.parametrize(
    ("text", "line"),
    [("a = 1\na = 2", 2), ('a = "open', 1), ("a = [1 2]", 1), ("[a]\nb = 1 c", 2), ('a = "\\q"', 1)],
)
def test_text_that_is_not_toml_is_refused_with_its_line(text, line):
    with pytest.raises(toml.TomlError, match=f"line {line}"):
        toml.loads(text)


def test_an_edit_keeps_the_files_comments_and_adds_only_the_runtime(tmp_path):
    """What a user sees in their file: every line they had, then the runtime's tables (nvidia-ctk drops comments)."""
    config = tmp_path / "config.toml"
    config.write_text(ODD)
    nrc.run(FakeModule(path=str(config)))
    text = config.read_text()
    assert text.startswith("# The nvidia runtime was added by gpufleet")
    changes = [
        line for line in difflib.ndiff(ODD.splitlines(), text.splitlines()[1:]) if line[:1] in "+-" and line[2:].strip()
    ]
    assert changes and all(line.startswith("+ ") for line in changes), "\n".join(changes)  # nothing of the user's lost
    assert changes[0].startswith('+ [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]'), changes
    assert toml.same(without_nvidia(tomllib.loads(text)), tomllib.loads(ODD))


def test_same_tells_booleans_integers_and_floats_apart():
    assert toml.same({"a": [1, {"b": True}]}, {"a": [1, {"b": True}]})
    assert not toml.same({"a": 1}, {"a": True})
    assert not toml.same({"a": 1}, {"a": 1.0})
    assert not toml.same({"a": {}}, {"a": {}, "b": 1})


def test_the_writer_refuses_values_toml_cannot_hold():
    with pytest.raises(toml.TomlError, match="cannot write TOML"):
        toml.dumps({"a": None})


keys = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
scalars = (
    st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
documents = st.dictionaries(keys, values, max_size=6)


@settings(max_examples=300, deadline=None)
@given(documents)
def test_any_document_written_reads_back_the_same_with_tomllib_and_tomlkit(doc):
    text = toml.dumps(doc)
    assert toml.same(tomllib.loads(text), doc), text
    assert toml.same(toml.plain(toml.loads(text)), doc), text


def test_the_documentation_parses_and_matches_the_argument_spec():
    doc = yaml.safe_load(nrc.DOCUMENTATION)
    yaml.safe_load(nrc.EXAMPLES)
    returned = yaml.safe_load(nrc.RETURN)
    assert set(doc["options"]) == set(nrc.ARGUMENT_SPEC)
    for name, spec in nrc.ARGUMENT_SPEC.items():
        documented = doc["options"][name]
        for key in ("type", "default", "choices", "elements", "required"):
            assert documented.get(key) == spec.get(key), f"{name}.{key}"
    assert {"path", "runtime", "runtimes", "default_runtime", "source_runtime"} <= set(returned)
