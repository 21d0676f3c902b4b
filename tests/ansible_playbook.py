"""Running ansible-playbook from tests: the project's ansible.cfg, this virtualenv's tools, no colour."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO

BIN = Path(sys.executable).parent
LOCAL = ["-i", "localhost,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}"]


def ansible_env(path_prefix: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment: ansible.cfg of the repository, this virtualenv first on PATH (after ``path_prefix``, where
    a test puts its stand-ins)."""
    path = f"{BIN}:{os.environ['PATH']}"
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "PATH": f"{path_prefix}:{path}" if path_prefix else path,
        **extra,
    }


def ansible_playbook(
    *args: str | Path,
    local: bool = True,
    extra_vars: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``ansible-playbook [on localhost] [-e extra_vars] args...`` from the repository root, output captured."""
    cmd = [str(BIN / "ansible-playbook"), *(LOCAL if local else [])]
    if extra_vars is not None:
        cmd += ["-e", json.dumps(extra_vars)]
    cmd += [str(a) for a in args]
    return subprocess.run(
        cmd, cwd=REPO, env=env or ansible_env(), capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL
    )


def playbook_on_hosts(
    tmp_path: Path, play: str, hosts: dict[str, dict[str, Any]], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``play`` (written to tmp_path/play.yml) on an inventory of ``hosts`` ({name: its variables}, each a local
    connection with this Python): several cases in one run of ansible-playbook, each a host of its own."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    (tmp_path / "hosts.yml").write_text(json.dumps({"all": {"vars": local, "hosts": hosts}}))  # JSON is YAML
    (tmp_path / "play.yml").write_text(play)
    return ansible_playbook("-i", tmp_path / "hosts.yml", tmp_path / "play.yml", local=False, env=env)


def recap(output: str) -> dict[str, dict[str, int]]:
    """The PLAY RECAP's counts per host: ``{host: {"ok": N, "changed": N, "failed": N, ...}}``."""
    lines = output[output.rindex("PLAY RECAP") :].splitlines()[1:]
    return {
        line.split()[0]: {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", line)}
        for line in lines
        if " : ok=" in line
    }


def failures(output: str, host: str) -> list[str]:
    """The lines the default callback printed for the failed tasks of ``host`` (``fatal: [HOST]: FAILED! => ...``)."""
    return re.findall(rf"^(?:fatal|failed): \[{re.escape(host)}\].*$", output, re.M)
