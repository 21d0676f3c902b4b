"""The one judgement of a host's NVIDIA driver (gpufleet.host.driver.driver_problems) over the state
gpufleet.host.driverstate reads: here the reader runs for real against stand-ins of modinfo, modprobe, lsinitramfs,
systemctl and apt-mark (tests/driver_standins.py) and a host root with /proc/driver/nvidia/version."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpufleet.host.driver import DriverState, Platform, driver_problems, plan_driver
from gpufleet.host.driverstate import read_driver_state, read_platform
from tests.driver_standins import DriverHost, nvrm_line

KERNEL = "6.1.0-41-amd64"
DEBIAN12 = Platform("Debian", "Debian", "12", "bookworm", KERNEL)


def state_of(
    host: DriverHost, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, branch: str = "580", **plan
) -> DriverState:
    """What the reader finds on ``host``, for the module and version package of the driver plan."""
    host.install(tmp_path / "bin", tmp_path / "root")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    driver = plan_driver(DEBIAN12, branch=branch, **plan)
    read = read_driver_state(
        KERNEL, driver.kernel_module, driver.nouveau_blacklist, driver.version_package, str(tmp_path / "root")
    )
    return DriverState.from_dict(read)


def test_a_host_as_planned_has_no_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state = state_of(DriverHost(), tmp_path, monkeypatch)
    assert state.module == "nvidia" and state.module_version == "580.95.05" and state.held
    assert driver_problems(state, branch="580") == []


def test_debians_renamed_module_is_the_one_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Debian's packages install nvidia-current-open.ko; the plan names it, so modinfo asks for that name."""
    host = DriverHost(module="nvidia-current-open", version="535.247.01", held=("nvidia-open-kernel-dkms",))
    state = state_of(host, tmp_path, monkeypatch, branch="535", source="debian")
    assert driver_problems(state, branch="535") == []


def test_a_module_other_than_the_planned_one_is_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    host = DriverHost(module="nvidia-current", version="535.247.01", license="NVIDIA", loaded="")
    state = state_of(host, tmp_path, monkeypatch, branch="535", source="debian")
    assert driver_problems(state, branch="535") == [
        f"the nvidia-current-open module for kernel {KERNEL} is not installed "
        "(modinfo: modinfo: ERROR: Module nvidia-current-open not found.)",
        "no NVIDIA driver is loaded (/proc/driver/nvidia/version is missing)",
        "the driver's packages are not held: an upgrade could replace the driver",
    ]


def test_another_branch_with_proprietary_modules_reports_each_difference(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    host = DriverHost(version="570.86.15", license="NVIDIA")
    state = state_of(host, tmp_path, monkeypatch)
    assert driver_problems(state, branch="580") == [
        f"the nvidia module for kernel {KERNEL} is 570.86.15; the release pins branch 580",
        f"the nvidia module for kernel {KERNEL} is licensed 'NVIDIA' (proprietary); open modules are 'Dual MIT/GPL'",
        "driver 570.86.15 is loaded; the release pins branch 580",
        "the loaded driver 570.86.15 uses the proprietary kernel modules; expected open",
    ]
    assert driver_problems(state, branch="570", kernel_modules="proprietary") == []


def test_a_pending_reboot_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state = state_of(DriverHost(loaded=nvrm_line("580.82.07")), tmp_path, monkeypatch)
    assert driver_problems(state, branch="580") == [
        f"driver 580.82.07 is loaded but 580.95.05 is installed for kernel {KERNEL}: "
        "reboot (or reload the nvidia modules) to run it"
    ]


def test_nouveau_persistenced_and_holds_are_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    host = DriverHost(
        nouveau_loaded=True,
        nouveau_blacklisted=False,
        initramfs_blacklist=False,
        persistenced="disabled",
        persistenced_failed=True,
        persistenced_condition=False,
        held=(),
    )
    state = state_of(host, tmp_path, monkeypatch)
    assert driver_problems(state, branch="580") == [
        "nouveau is loaded: the NVIDIA driver cannot own the GPUs",
        "modprobe's configuration does not blacklist nouveau",
        f"the initramfs of kernel {KERNEL} lacks the nouveau blacklist",
        "nvidia-persistenced.service is disabled, not enabled",
        "nvidia-persistenced.service failed",
        "nvidia-persistenced.service lacks ConditionPathExists=/dev/nvidiactl (it fails where no driver loads)",
        "the driver's packages are not held: an upgrade could replace the driver",
    ]
    # hold: false (nvidia_driver_hold) accepts unheld packages
    assert "the driver's packages are not held" not in " ".join(driver_problems(state, branch="580", hold=False))


def test_a_host_without_a_gpu_need_not_load_the_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    state = state_of(DriverHost(loaded=""), tmp_path, monkeypatch)
    assert driver_problems(state, branch="580", must_be_loaded=False) == []
    assert driver_problems(state, branch="580") == [
        "no NVIDIA driver is loaded (/proc/driver/nvidia/version is missing)"
    ]


def test_an_unreadable_version_line_and_a_bad_module_type_are_reported():
    state = DriverState(KERNEL, "nvidia", "580.95.05", "Dual MIT/GPL", proc_version="garbage")
    healthy = {"nouveau_blacklisted": True, "initramfs_blacklist": True, "persistenced_enabled": "enabled"}
    state = replace(state, persistenced_condition=True, held=True, **healthy)
    assert driver_problems(state, branch="580") == [
        "/proc/driver/nvidia/version says 'garbage', not an NVRM version line"
    ]
    assert driver_problems(state, branch="580", kernel_modules="closed") == [
        "nvidia_driver_kernel_modules is 'closed'; expected one of open, proprietary"
    ]


@pytest.mark.parametrize(
    ("os_release", "expected"),
    [
        (
            'ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n',
            {"distribution": "Debian", "os_family": "Debian", "distribution_major_version": "12"},
        ),
        (
            'ID=ubuntu\nID_LIKE=debian\nVERSION_ID="24.04"\nVERSION_CODENAME=noble\n',
            {"distribution": "Ubuntu", "os_family": "Debian", "distribution_major_version": "24"},
        ),
        (
            'ID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n',
            {"distribution": "Rocky", "os_family": "RedHat", "distribution_major_version": "9"},
        ),
    ],
)
def test_platform_is_named_as_ansible_names_it(tmp_path: Path, os_release: str, expected: dict):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").write_text(os_release)
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/osrelease").write_text(KERNEL + "\n")
    platform = read_platform(str(tmp_path))
    assert {k: platform[k] for k in expected} == expected
    assert platform["kernel"] == KERNEL


def test_lab_verify_judges_the_driver_it_reads_through_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`gpufleet lab verify`'s driver check: the reader's scripts run (here by this machine's python, in place of
    the host's over SSH) against the stand-ins; the plan for this machine's distribution names the module."""
    import subprocess
    import sys

    from gpufleet.lab.report import driver_mismatches

    def run_python(script: str) -> str:
        done = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, check=True)
        return done.stdout

    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\n')
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text(KERNEL + "\n")
    DriverHost().install(tmp_path / "bin", root)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:/usr/bin:/bin")
    assert driver_mismatches(run_python, "580", str(root)) == []
    assert driver_mismatches(run_python, "570", str(root)) == [
        f"NVIDIA driver: the nvidia module for kernel {KERNEL} is 580.95.05; the release pins branch 570",
        "NVIDIA driver: driver 580.95.05 is loaded; the release pins branch 570",
    ]
