"""``ansible-doc`` parses every module, the lookup and the callback of ansible/plugins (with ansible.cfg's plugin
paths), and every filter plugin loads: the plugins import gpufleet's modules by their paths in the package's layout,
and a module's module_utils are symlinks into gpufleet/host/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PLUGINS = REPO / "ansible" / "plugins"
BIN = Path(sys.executable).parent
MODULES = sorted(p.stem for p in (PLUGINS / "modules").glob("*.py"))


def run(*argv: str) -> str:
    """A command's stdout, in the repository (ansible.cfg's plugin paths); it must succeed."""
    proc = subprocess.run(
        argv, cwd=REPO, capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def ansible_doc(kind: str, name: str) -> dict:
    return json.loads(run(str(BIN / "ansible-doc"), "--json", "-t", kind, name))[name]


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_parses_each_module(module: str):
    doc = ansible_doc("module", module)["doc"]
    assert doc["module"] == module and doc["short_description"]


def test_ansible_doc_parses_the_lookup():
    assert ansible_doc("lookup", "gpufleet_plan")["doc"]["short_description"]


def test_ansible_doc_parses_the_callback():
    assert ansible_doc("callback", "gpufleet_summary")["doc"]["short_description"]


def test_module_utils_links_reach_the_host_readers():
    links = sorted((PLUGINS / "module_utils").glob("gpufleet_*.py"))
    linked = {p.name: p.resolve() for p in links if p.is_symlink()}
    assert linked, "no module_utils symlinks"
    for name, target in linked.items():
        assert target.is_file() and target.parent == REPO / "gpufleet" / "host", f"{name} -> {target}"


@pytest.mark.parametrize("plugin", sorted(p.stem for p in (PLUGINS / "filter").glob("*.py")))
def test_each_filter_plugin_loads_its_filters(plugin: str):
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('p', {str(PLUGINS / 'filter' / (plugin + '.py'))!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "print(len(m.FilterModule().filters()))\n"
    )
    assert int(run(sys.executable, "-c", code)) > 0
