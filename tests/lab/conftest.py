"""The lab tests boot real VMs (QEMU, KVM where it works, software emulation otherwise).

They never skip: on a machine without what the lab needs they fail, saying what is missing. Every VM a test
starts is removed when the test ends (Lab.down), also when it fails.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.lab import distcc, molecule_runner

NEEDED = ["qemu-system-x86_64", "qemu-img", "debootstrap", "sfdisk", "mkfs.ext4", "virsh", "libvirtd", "ssh",
          "systemd-nspawn"]  # fmt: skip


def require_virtualization() -> None:
    missing = [tool for tool in NEEDED if shutil.which(tool) is None]
    problems = []
    if missing:
        problems.append(f"missing tools: {', '.join(missing)} (make setup installs them on Debian/Ubuntu)")
    if os.geteuid() != 0:
        problems.append("the lab needs root (debootstrap, chroot, libvirt's system instance)")
    if problems:
        pytest.fail("the lab cannot run here: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session", autouse=True)
def molecule_scenarios(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[tuple[int, str, float]]]]:
    """The selected roles' Molecule scenarios, started when the lab session starts and run beside the other lab
    tests, ``GPUFLEET_MOLECULE_JOBS`` at a time (default 2). Under software emulation the lab is bound by guest
    CPU: side by side, the hosts keep both cores busy through each other's boots, reboots and controller-side
    work. Each scenario's host is its own lab (prefix ``mol<role>``); test_molecule.py waits for the results."""
    from gpufleet.lab.config import lab_lock
    from gpufleet.lab.image import ensure_image

    selected = [
        item.callspec.params["role"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_molecule_scenario"
    ]
    if not selected:
        yield {}
        return
    require_virtualization()
    with lab_lock(print):  # built once, before the scenarios' `lab up`s and the other tests ask for it
        ensure_image(progress=lambda m: print(m, flush=True))
    jobs = max(1, int(os.environ.get("GPUFLEET_MOLECULE_JOBS", "2")))
    selected.sort(key=lambda role: not molecule_runner.may_reboot(role))  # longest first
    # the slow scenarios build C code in the guest (DKMS): this machine's gcc compiles it for them (tests/lab/distcc.py)
    server = distcc.start(tmp_path_factory.mktemp("distcc")) if any(map(molecule_runner.slow, selected)) else None
    env = {**os.environ, **(server.env if server else {})}  # taken now, before any lab test changes os.environ
    try:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {
                role: pool.submit(molecule_runner.run_scenario, role, tmp_path_factory.mktemp(f"molecule-{role}"), env)
                for role in selected
            }
            yield futures
            for future in futures.values():  # never leave a scenario (and its lab host) running after the tests
                future.cancel()
    finally:
        if server:
            server.stop()
            done, failed = server.compiled()
            print(f"\ndistccd compiled {done} files for the lab hosts ({failed} compile errors: conftest probes)")


@pytest.fixture(scope="class")
def lab_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two fresh lab hosts (prefix `test`), their inventory, torn down afterwards."""
    from gpufleet.lab import Lab, LabError

    require_virtualization()
    lines: list[str] = []
    lab = Lab("test", 2, progress=lambda m: (lines.append(m), print(m, flush=True)))
    inventory = tmp_path_factory.mktemp("lab") / "hosts.yml"
    try:
        result = lab.up(inventory=inventory, fresh=True)
    except LabError as exc:
        lab.down()
        pytest.fail(f"the lab did not come up: {exc}", pytrace=False)
    try:
        yield {"lab": lab, "result": result, "inventory": inventory, "log": lines}
    finally:
        lab.down()


@pytest.fixture(scope="class")
def container_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One fresh system container (prefix `ctest`, gpufleet/lab/container.py), its inventory, removed afterwards."""
    from gpufleet.lab import Lab, LabError

    require_virtualization()
    lines: list[str] = []
    lab = Lab("ctest", 1, progress=lambda m: (lines.append(m), print(m, flush=True)), kind="container")
    inventory = tmp_path_factory.mktemp("containers") / "hosts.yml"
    try:
        result = lab.up(inventory=inventory, fresh=True)
    except LabError as exc:
        lab.down()
        pytest.fail(f"the lab's system container did not come up: {exc}", pytrace=False)
    try:
        yield {"lab": lab, "result": result, "inventory": inventory, "log": lines}
    finally:
        lab.down()


_durations: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """A failed TestLab step shows the end of each host's serial console (kernel and systemd messages): the hosts and
    their logs are gone once the class's hosts are torn down."""
    outcome = yield
    report = outcome.get_result()
    lab = getattr(item, "funcargs", {}).get("lab_hosts")
    if report.when == "call" and report.failed and lab:
        for host in lab["result"].hosts:
            try:
                tail = host.serial_log.read_text(errors="replace").splitlines()[-80:]
            except OSError as exc:
                tail = [f"(unreadable: {exc})"]
            report.sections.append((f"serial console of {host.name}, last lines", "\n".join(tail)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each lab test's time (set-up, call and tear-down), for the record below."""
    _durations[report.nodeid] = _durations.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A passing run of the whole lab suite keeps its times in build/timings/make-test-lab.json (`make bench`)."""
    from gpufleet.lab.job import record

    ran = [nodeid for nodeid in _durations if nodeid.startswith("tests/lab/")]
    if exitstatus != 0 or len(ran) < 10:  # a selection or a failed run is not the suite's figure
        return
    tests = {nodeid.removeprefix("tests/lab/"): round(s, 1) for nodeid, s in _durations.items() if s >= 1}
    record("make-test-lab", {"tests": tests, "total_seconds": round(sum(_durations.values()))}, REPO)
