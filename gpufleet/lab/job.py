"""The lab's main job, timed by phase: up (image, boot to SSH) -> converge (ansible/site.yml) -> verify.

``gpufleet lab run`` (what ``make lab`` runs) and the lab benchmark both call :func:`run_main_job`; its phases are
printed at the end and kept in ``build/timings/`` so that ``make bench`` can show the last figures.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpufleet.common.atomic import write_atomic
from gpufleet.lab import Lab
from gpufleet.lab.ansible_run import run_playbook
from gpufleet.lab.config import LAB_STACK
from gpufleet.lab.report import HostReport, lab_report

Progress = Callable[[str], None]


@dataclass
class Phase:
    name: str
    seconds: float
    note: str = ""


@dataclass
class JobResult:
    phases: list[Phase]
    total_seconds: float
    accel: str
    converge_rc: int
    reports: list[HostReport] = field(default_factory=list)
    changed: dict[str, int] = field(default_factory=dict)  # the converge's changed tasks per host (its recap)
    stopped: str = ""  # the converge's lines on the hosts that did not finish it (PlaybookResult.stopped)

    @property
    def ok(self) -> bool:
        return self.converge_rc == 0 and bool(self.reports) and all(r.ok for r in self.reports)

    def table(self) -> str:
        width = max(len(p.name) for p in [*self.phases, Phase("total", 0)])
        lines = [f"  {p.name.ljust(width)}  {p.seconds:6.0f} s  {p.note}".rstrip() for p in self.phases]
        lines.append(f"  {'total'.ljust(width)}  {self.total_seconds:6.0f} s  ({self.accel})")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "phases": [asdict(p) for p in self.phases],
            "total_seconds": round(self.total_seconds, 1),
            "accel": self.accel,
            "ok": self.ok,
            "changed": self.changed,
        }


def run_main_job(
    project: Path,
    inventory: Path,
    lab: Lab,
    progress: Progress,
    setup_seconds: float | None = None,
    fresh: bool = False,
) -> JobResult:
    """Bring the lab up, converge it with ansible/site.yml and verify it, timing each phase."""
    started = time.monotonic()
    phases: list[Phase] = []
    if setup_seconds is not None:
        phases.append(Phase("setup (make setup)", setup_seconds))
    up = lab.up(inventory=inventory, fresh=fresh)
    phases.append(Phase("image", up.image_seconds, "built" if up.image_built else "cached"))
    if up.snapshot_seconds:
        phases.append(Phase("booted snapshot", up.snapshot_seconds, "the template VM's one boot and save"))
    boot = max(up.boot_seconds.values(), default=0.0)
    how = "restored from the booted snapshot" if up.restored else "side by side"
    phases.append(Phase("boot to SSH", boot, f"{len(up.hosts)} hosts {how}" if boot else "already running"))
    other = up.total_seconds - up.image_seconds - up.snapshot_seconds - boot
    phases.append(Phase("lab up, other", max(0.0, other), "libvirt, Redfish" + (", identities" if up.restored else "")))
    converge = run_playbook(project / "ansible/site.yml", inventory, {"gpufleet_stack": LAB_STACK}, progress=progress)
    reboot = converge.seconds_of("reboot", changed_only=True)  # the reboot handler, when a host rebooted
    changed = {host: counts.get("changed", 0) for host, counts in converge.recap.items()}
    note = f"rc={converge.rc}, changed " + ", ".join(f"{h}={n}" for h, n in sorted(changed.items()))
    phases.append(Phase("converge (site.yml)", converge.seconds - reboot, note))
    phases.append(Phase("reboot", reboot, "in the converge" if reboot >= 1 else "none needed"))
    reports: list[HostReport] = []
    if converge.rc == 0:
        verify_started = time.monotonic()
        reports = lab_report(inventory, LAB_STACK, project)
        phases.append(Phase("verify", time.monotonic() - verify_started, "ok" if all(r.ok for r in reports) else ""))
    total = time.monotonic() - started + (setup_seconds or 0.0)
    return JobResult(phases, total, up.accel.name, converge.rc, reports, changed, converge.stopped)


def record(name: str, data: dict, project: Path) -> Path:
    """Keep a timing record under build/timings/ (git-ignored), for ``make bench`` to show."""
    path = project / "build" / "timings" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {**data, "recorded": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": _machine()}
    write_atomic(path, json.dumps(data, indent=2) + "\n")
    return path


def load_record(name: str, project: Path) -> dict | None:
    try:
        return json.loads((project / "build" / "timings" / f"{name}.json").read_text())
    except (OSError, ValueError):
        return None


def _machine() -> str:
    return f"{platform.node()}, {os.cpu_count()} cores, {platform.release()}"
