"""The local lab: the image (cold and cached), the main job `make lab` runs, phase by phase (boot to SSH, converge,
reboot, verify), an idempotent re-run, a no-op play on the same hosts (the floor: as many `ping` tasks as the
re-run ran), and the last passing `make test`'s whole time (recorded by `make test` itself in build/timings/;
running the whole suite here would take as long as the suite). The lab tests' steps against their budget are
bench_lab_budget's (it reads the last lab run's record, cheaply).

Slow (about 5-10 minutes under software emulation); needs what the lab needs (root, QEMU, libvirt).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO, Figure

MAKE_LAB_CACHED_S = 180  # issue 18: `make lab` with the image cached
MAKE_LAB_NEW_S = 480  # ... and on a brand-new machine
MAKE_TEST_S = 25 * 60  # `make test` on a 2-core machine without KVM


def run() -> list[Figure]:
    from gpufleet.lab import Lab, image
    from gpufleet.lab.ansible_run import run_playbook
    from gpufleet.lab.config import LAB_STACK, cache_dir
    from gpufleet.lab.job import load_record, record, run_main_job

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
            cold_image = time.monotonic() - start
            figures.append(Figure("lab image build, cold (packages already downloaded)", cold_image, "s"))
        finally:
            os.environ.pop("GPUFLEET_CACHE", None)
    image.ensure_image(progress=quiet)

    lab = Lab("bench", 2, progress=quiet)
    inventory = Path(tempfile.mkdtemp(prefix="gpufleet-bench-inv-")) / "hosts.yml"
    try:
        job = run_main_job(REPO, inventory, lab, quiet, fresh=True)
        assert job.ok, f"the main job failed: converge rc={job.converge_rc}, {[r.render() for r in job.reports]}"
        for phase in job.phases:
            figures.append(Figure(f"make lab: {phase.name}" + (f" ({phase.note})" if phase.note else ""),
                                  phase.seconds, "s"))  # fmt: skip
        figures.append(Figure("make lab, image cached (lab up + converge + verify)", job.total_seconds, "s",
                              MAKE_LAB_CACHED_S))  # fmt: skip
        figures.append(Figure("make lab, new machine (cold image build + the above; apt/pip installs not included)",
                              cold_image + job.total_seconds, "s", MAKE_LAB_NEW_S))  # fmt: skip
        record("bench-lab", job.to_dict(), REPO)
        site = REPO / "ansible/site.yml"
        again = run_playbook(site, inventory, {"gpufleet_stack": LAB_STACK})
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
        print(f"   accelerator: {job.accel}")
    finally:
        lab.down()
        shutil.rmtree(inventory.parent, ignore_errors=True)

    tests = load_record("make-test", REPO)
    if tests is None:
        print("   make test: no passing run recorded on this checkout yet (it writes build/timings/make-test.json)")
    else:
        print(f"   make test: last passing run recorded {tests['recorded']} on {tests['machine']}")
        figures.append(Figure("make test (whole, last passing run)", tests["total_seconds"], "s", MAKE_TEST_S))
    return figures
