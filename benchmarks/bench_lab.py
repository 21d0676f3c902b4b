"""The local lab: image build (cold and cached), boot to SSH, first converge, idempotent re-run, and a no-op play
on the same hosts (the floor the re-run is compared with: as many `ping` tasks as the re-run ran, i.e. the cost
of running Ansible modules at all under this accelerator).

Slow (about 15 minutes under software emulation); needs what the lab needs (root, QEMU, libvirt).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, Figure


def run() -> list[Figure]:
    from gpufleet.lab import Lab, image
    from gpufleet.lab.ansible_run import run_playbook
    from gpufleet.lab.config import cache_dir

    figures: list[Figure] = []
    quiet = lambda _m: None  # noqa: E731

    # cold: a scratch cache (sharing the downloaded packages, so the network is not what is measured)
    real_cache = cache_dir()
    with tempfile.TemporaryDirectory(prefix="gpufleet-bench-") as scratch:
        (Path(scratch) / "lab").mkdir()
        if (real_cache / "lab/debs").is_dir():
            shutil.copytree(real_cache / "lab/debs", Path(scratch) / "lab/debs")
        os.environ["GPUFLEET_CACHE"] = scratch
        try:
            start = time.monotonic()
            image.ensure_image(progress=quiet)
            figures.append(Figure("lab image build, cold (packages already downloaded)", time.monotonic() - start, "s"))
        finally:
            os.environ.pop("GPUFLEET_CACHE", None)
    start = time.monotonic()
    image.ensure_image(progress=quiet)
    figures.append(Figure("lab image, cached", time.monotonic() - start, "s"))

    lab = Lab("bench", 2, progress=quiet)
    inventory = Path(tempfile.mkdtemp(prefix="gpufleet-bench-inv-")) / "hosts.yml"
    try:
        result = lab.up(inventory=inventory, fresh=True)
        figures.append(Figure("boot to SSH (2 hosts side by side, slowest)", max(result.boot_seconds.values()), "s"))
        site = REPO / "ansible/site.yml"
        first = run_playbook(site, inventory, {"gpufleet_stack": "lab-local"})
        assert first.rc == 0, first.output[-2000:]
        figures.append(Figure("first converge (includes the reboot)", first.seconds, "s"))
        again = run_playbook(site, inventory, {"gpufleet_stack": "lab-local"})
        assert again.rc == 0 and all(c["changed"] == 0 for c in again.recap.values()), again.output[-2000:]
        figures.append(Figure("idempotent re-run (changed=0)", again.seconds, "s"))
        tasks = max(c["ok"] for c in again.recap.values())
        noop = inventory.parent / "noop.yml"
        noop.write_text(
            "- hosts: all\n  gather_facts: false\n  tasks:\n"
            + "".join(f"    - name: ping {i}\n      ansible.builtin.ping:\n" for i in range(tasks))
        )
        floor = run_playbook(noop, inventory, repo=REPO)
        assert floor.rc == 0
        figures.append(Figure(f"no-op play on the same hosts ({tasks} ping tasks)", floor.seconds, "s"))
        print(f"   accelerator: {result.accel.name} ({result.accel.reason})")
    finally:
        lab.down()
        shutil.rmtree(inventory.parent, ignore_errors=True)
    return figures
