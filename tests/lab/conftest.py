"""The lab tests boot real VMs (QEMU, KVM where it works, software emulation otherwise).

They never skip: on a machine without what the lab needs they fail, saying what is missing. Every VM a test
starts is removed when the test ends (Lab.down), also when it fails.

Each whole run of the suite records its steps' wall times (gpufleet.lab.budget, tests/lab/budget.yaml): each test's
set-up, call and tear-down, each Molecule scenario's own time, the shared set-ups timed with :func:`lab_step`, and
the session's wall time, in build/timings/make-test-lab.json, failed runs too.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gpufleet.lab.budget import LAB_TESTS, RECORD_NAME, StepClock
from tests.conftest import REPO
from tests.lab import direct_lab, molecule_runner, twice_lab

T = TypeVar("T")

_STARTED = time.monotonic()  # the lab session's start: this file loads as pytest starts, or as it collects tests/lab
_clock = StepClock()
_suite = {"whole": False, "left_out": 0}  # whether this session runs the whole suite (pytest_collection_finish)

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


@dataclass(frozen=True)
class Lanes:
    """What the lab session runs in its lanes beside the other lab tests (see :func:`lanes`), for the tests that
    wait for it: each selected role's Molecule scenario, and the lab without libvirt and the two `lab up`s of one
    lab at once when their tests are selected."""

    scenarios: dict[str, Future[tuple[int, str, float]]]
    direct: Future[direct_lab.DirectRun] | None
    twice: Future[twice_lab.TwiceRun] | None = None


DIRECT_TEST = "test_lab_without_libvirt_uses_qemu_directly_and_says_redfish_is_unavailable"
TWICE_TEST = "test_two_lab_ups_of_one_lab_at_once_take_turns_and_end_with_one_lab"


@pytest.fixture(scope="session", autouse=True)
def lanes(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lanes]:
    """The selected roles' Molecule scenarios, the lab without libvirt (tests/lab/direct_lab.py) and two `lab up`s
    of one lab at once (tests/lab/twice_lab.py), started when the lab session starts and run beside the other lab
    tests, ``GPUFLEET_MOLECULE_JOBS`` at a time (default 2): one lane for the scenarios in system containers (native
    speed, light), the other for the VMs, one VM at a time with the default (the two one-host labs last). Under
    software emulation the lab is bound by guest CPU: one VM beside TestLab's two hosts keeps both cores busy for
    the whole run, where two at a time over-subscribed its first half and left its last third to TestLab's hosts
    alone, often one core idle (2026-11-28: 97% of the CPU used in the first 12.6 min, 55% after). The lanes run at
    a lower CPU priority (molecule_runner.LANE_NICE, their VMs too): TestLab's chain of steps is the longest, and
    the lanes take the CPU its hosts leave. With ``GPUFLEET_MOLECULE_JOBS=1`` everything runs in one lane. Each
    scenario's host is its own lab (prefix ``mol<role>``); test_molecule.py and the two one-host labs' tests wait
    for the results, and each is timed as its own work."""
    from gpufleet.lab import ensure_booted_snapshot
    from gpufleet.lab.config import lab_lock
    from gpufleet.lab.image import ensure_image

    nodeids = {
        item.callspec.params["role"]: item.nodeid
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_molecule_scenario"
    }
    direct = next((item.nodeid for item in request.session.items if item.name == DIRECT_TEST), None)
    twice = next((item.nodeid for item in request.session.items if item.name == TWICE_TEST), None)
    selected = list(nodeids)
    if not selected and direct is None and twice is None:
        yield Lanes({}, None)
        return
    require_virtualization()
    with lab_lock(print), lab_step("image"):  # built once, before the scenarios' and the other tests' `lab up`s
        ensure_image(progress=lambda m: print(m, flush=True))
    if selected:
        with lab_step("booted snapshot"):  # the one boot every lab VM of the session starts from (snapshot.py)
            ensure_booted_snapshot(progress=lambda m: print(m, flush=True))
    jobs = max(1, int(os.environ.get("GPUFLEET_MOLECULE_JOBS", "2")))
    selected.sort(key=lambda role: not molecule_runner.may_reboot(role))  # longest first
    env = dict(os.environ)  # taken now, before any lab test changes os.environ
    with ThreadPoolExecutor(max_workers=max(1, jobs - 1)) as vms, ThreadPoolExecutor(max_workers=1) as containers:
        pools = {"vms": vms, "containers": containers}
        futures = {
            role: pools[molecule_runner.lane(role, jobs)].submit(
                _timed(nodeids[role], molecule_runner.run_scenario),
                role,
                tmp_path_factory.mktemp(f"molecule-{role}"),
                env,
            )
            for role in selected
        }
        started = (
            vms.submit(_timed(direct, direct_lab.run), tmp_path_factory.mktemp("direct-lab"), env) if direct else None
        )
        both = vms.submit(_timed(twice, twice_lab.run), tmp_path_factory.mktemp("twice-lab"), env) if twice else None
        yield Lanes(futures, started, both)
        for future in [*futures.values(), *(f for f in (started, both) if f)]:  # never leave a lab running after
            future.cancel()


def _timed(nodeid: str, work: Callable[..., T]) -> Callable[..., T]:
    """``work`` as a lane runs it: its own wall time kept as its test's step (the test only waits for it)."""

    def timed(*args: Any) -> T:
        started = time.monotonic()
        try:
            return work(*args)
        finally:
            _clock.own(nodeid, time.monotonic() - started)

    return timed


@contextmanager
def lab_step(name: str) -> Iterator[None]:
    """Time a set-up that tests share (a fixture's) as a lab step of its own, ``name``, which needs its line in
    tests/lab/budget.yaml as each test does. The test whose set-up ran it is charged without it."""
    started, ok = time.monotonic(), False
    try:
        yield
        ok = True
    finally:
        _clock.shared(name, time.monotonic() - started, ok)


def _fresh_lab(tmp_path: Path, prefix: str, count: int, kind: str, step: AbstractContextManager) -> Iterator[dict]:
    """A fresh lab (``count`` hosts of ``kind``), its inventory, removed afterwards; its start timed by ``step``
    (a ``lab_step(NAME)``, named where the fixture is: the budget test reads the names there)."""
    from gpufleet.lab import Lab, LabError

    require_virtualization()
    lines: list[str] = []
    lab = Lab(prefix, count, progress=lambda m: (lines.append(m), print(m, flush=True)), kind=kind)
    inventory = tmp_path / "hosts.yml"
    try:
        with step:
            result = lab.up(inventory=inventory, fresh=True)
    except LabError as exc:
        lab.down()
        pytest.fail(f"the lab ({kind} hosts) did not come up: {exc}", pytrace=False)
    try:
        yield {"lab": lab, "result": result, "inventory": inventory, "log": lines}
    finally:
        lab.down()


@pytest.fixture(scope="class")
def lab_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Two fresh lab VMs (prefix `test`), their inventory, torn down afterwards."""
    yield from _fresh_lab(tmp_path_factory.mktemp("lab"), "test", 2, "vm", lab_step("hosts boot"))


@pytest.fixture(scope="class")
def container_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One fresh system container (prefix `ctest`, gpufleet/lab/container.py), its inventory, removed afterwards."""
    yield from _fresh_lab(tmp_path_factory.mktemp("containers"), "ctest", 1, "container", lab_step("container boot"))


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


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Lab tests left out by -k or -m (but for the slow ones `make test` leaves out): not the whole suite."""
    _suite["left_out"] += sum(
        1 for item in items if item.nodeid.startswith(LAB_TESTS) and item.get_closest_marker("slow") is None
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    """The whole suite runs when pytest was given tests/lab or a folder above it, and left none of its tests out."""
    lab = REPO / LAB_TESTS
    given = [(session.config.invocation_params.dir / arg).resolve() for arg in session.config.args if "::" not in arg]
    _suite["whole"] = any(path == lab or path in lab.parents for path in given) and not _suite["left_out"]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each lab test's time (set-up, call and tear-down), for the record below."""
    if report.nodeid.startswith(LAB_TESTS):
        _clock.report(report.nodeid, report.when, report.duration, report.outcome)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A whole run of the lab suite, passed or failed (not interrupted), keeps its steps' times and its wall time
    in build/timings/make-test-lab.json: `gpufleet lab budget` (the end of `make test`) and `make bench` compare
    them with tests/lab/budget.yaml."""
    from gpufleet.lab.job import record

    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker ran a share of the steps, not the suite
        return
    if _suite["whole"] and _clock.steps and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        record(RECORD_NAME, _clock.run(time.monotonic() - _STARTED, exitstatus).to_dict(), REPO)
