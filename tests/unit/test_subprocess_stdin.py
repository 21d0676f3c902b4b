"""Every subprocess the project starts states its stdin: ``stdin=`` (``subprocess.DEVNULL`` unless it is fed) or
``input=``. A child that inherits a shared stdin can change it for every later process: QEMU's ``-nographic`` set
O_NONBLOCK on CI's /dev/null, and every ansible-playbook after it refused to run."""

from __future__ import annotations

import ast

from tests.conftest import REPO

CALLS = {"run", "Popen", "call", "check_call", "check_output"}
ROOTS = ("gpufleet", "infra", "ansible", "tests", "benchmarks", "scripts")


def unstated(source: str) -> list[int]:
    """Lines of ``subprocess.<call>(...)`` without ``stdin=`` or ``input=``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "subprocess"
            and node.func.attr in CALLS
            and not {"stdin", "input"} & {k.arg for k in node.keywords}
        ):
            out.append(node.lineno)
    return out


def test_every_subprocess_call_states_its_stdin():
    files = [p for root in ROOTS for p in (REPO / root).rglob("*.py") if p.is_file() and not p.is_symlink()]
    assert len(files) > 50
    missing = [f"{p.relative_to(REPO)}:{line}" for p in files for line in unstated(p.read_text())]
    assert missing == []


def test_the_check_finds_a_call_that_inherits_stdin():
    source = "import subprocess\nsubprocess.run(['true'], check=True)\nsubprocess.run(['cat'], input='x')\n"
    assert unstated(source) == [2]
    assert unstated("import subprocess\nsubprocess.Popen(['x'], stdin=subprocess.DEVNULL)\n") == []
