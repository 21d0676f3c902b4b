"""A removed lab host's serial console log is kept in the lab's logs (gpufleet.lab.Lab._keep_console): a Molecule
scenario's reboot that never came back (CI, 2026-11-27) could not be diagnosed because `lab down` had deleted the
host's directory with its console. The files here are written by the test in a throwaway GPUFLEET_CACHE."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpufleet.lab import KEPT_CONSOLES, Lab
from gpufleet.lab.virt import LabHost


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path))
    return tmp_path


def _host(cache: Path, name: str, console: str | None) -> LabHost:
    d = cache / "lab" / "hosts" / name
    d.mkdir(parents=True)
    if console is not None:
        (d / "serial.log").write_text(console)
    return LabHost(name, "uuid", 22300, d / "disk.qcow2", d / "serial.log")


def test_the_console_of_a_removed_host_is_kept_with_its_name_and_said(cache: Path):
    said: list[str] = []
    host = _host(cache, "mol-1", "Debian GNU/Linux 12 mol-1 ttyS0\nreboot: Restarting system\n")
    Lab("mol", 1, progress=said.append)._keep_console(host)
    (kept,) = (cache / "lab" / "logs").glob("*-mol-1-console.log")
    assert kept.read_text().endswith("reboot: Restarting system\n")
    assert not host.serial_log.exists()
    assert said == [f"mol-1: its console log is kept in {kept}"]


def test_a_host_without_a_console_log_is_removed_quietly(cache: Path):
    said: list[str] = []
    Lab("mol", 1, progress=said.append)._keep_console(_host(cache, "mol-1", None))
    assert said == [] and not list((cache / "lab").glob("logs/*"))


def test_only_the_newest_console_logs_are_kept(cache: Path):
    logs = cache / "lab" / "logs"
    logs.mkdir(parents=True)
    for i in range(KEPT_CONSOLES + 5):
        (logs / f"20260101-0000{i:02d}-old-{i}-console.log").write_text("old")
    (logs / "20260101-000000-site.log").write_text("an Ansible log is not a console log")
    Lab("mol", 1, progress=lambda m: None)._keep_console(_host(cache, "mol-1", "new"))
    consoles = sorted(p.name for p in logs.glob("*-console.log"))
    assert len(consoles) == KEPT_CONSOLES
    assert consoles[-1].endswith("-mol-1-console.log") and "old-0-" not in consoles[0]
    assert (logs / "20260101-000000-site.log").exists()
