"""Running ansible-playbook from tests: the project's ansible.cfg, this virtualenv's tools, no colour."""

from __future__ import annotations

import json
import os
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
