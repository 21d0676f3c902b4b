"""The KVM probe on the real QEMU: it must leave the caller's stdin as it found it. QEMU's ``-nographic`` sets
O_NONBLOCK on its stdin; when that was the caller's (CI's /dev/null, shared with every later process), every
ansible-playbook after the probe refused to run ("Ansible requires blocking IO")."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO
from tests.lab.conftest import require_virtualization

PROBE = """
import os, sys
from pathlib import Path
from gpufleet.lab import accel
before = os.get_blocking(0)
result = accel._probe(Path(sys.argv[1]))
print(before, os.get_blocking(0), result.name)
"""


def test_the_real_qemu_probe_leaves_a_shared_stdin_blocking():
    from gpufleet.lab.image import ensure_image

    require_virtualization()
    kernel = ensure_image(progress=lambda m: print(m, flush=True)).kernel
    with open(os.devnull) as shared:  # one file description, as CI's </dev/null is for all of make test
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, str(kernel)],
            stdin=shared,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        still_blocking = os.get_blocking(shared.fileno())
    assert proc.returncode == 0, proc.stderr
    before, after, name = proc.stdout.split()
    assert (before, after) == ("True", "True"), f"the probe ({name}) left stdin non-blocking"
    assert still_blocking
