"""ansible/playbooks/verify.yml run for real by ansible-playbook, against this machine (connection local).

This machine is no converged GPU host, so each scenario gives the play a plan this machine does meet (one of its
real kernel arguments, its real 2 MiB page count on NUMA node 0, a kubelet drop-in in a temporary directory), or
that plan with one change, and stands in for the NVIDIA tools (``modinfo``, ``nvidia-smi``, ``dcgmi`` on PATH, a
``/proc/driver/nvidia/version`` file). The roles' verify tasks and the play's checks run unchanged; what the tests
look at is what a user sees: the exit status and the table.

Each scenario is a host of one inventory, so that two runs of the playbook (one that passes, one that fails) check
them all: a host's plan is its ``verify_test_plan`` (the extra var ``gpufleet_plan``, which outranks the plan the
play computes, is a template of it), its stack its ``verify_test_stack``, and its stand-ins come first on PATH
through its ``ansible_python_interpreter``, a script that puts the host's ``bin`` directory on PATH and runs this
Python.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.ansible_playbook import ansible_playbook
from tests.conftest import Shared
from tests.driver_standins import DriverHost, nvrm_line

PLAYBOOKS = ("ansible/playbooks/verify.yml", "ansible/playbooks/mig.yml")
NODE0_2M = Path("/sys/devices/system/node/node0/hugepages/hugepages-2048kB/nr_hugepages")
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\n"
DCGM_PASS = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| Persistence Mode          | Pass                                           |
+---------------------------+------------------------------------------------+
"""
DCGM_FAIL = DCGM_PASS.replace(
    "| Persistence Mode          | Pass                                           |\n",
    "| Persistence Mode          | Fail                                           |\n"
    "| Error                     | Persistence mode for GPU 1 is currently disab  |\n"
    "|                           | led.                                           |\n",
)
# The plan and stack of a host: host variables, through extra vars that outrank the play's own (set_fact, vars)
EXTRA_VARS = {
    "gpufleet_plan": "{{ verify_test_plan }}",
    "gpufleet_stack": "{{ verify_test_stack | default('lab-local') }}",
}
BRANCH_580 = {"nvidia_driver_branch": "580"}
# A bare-metal DRA stack: group nvl72 (GB200 NVL72, NVLink across hosts: ComputeDomains, nvidia-imex masked) and hgx
NVL72 = "tests/fixtures/owners/Pulumi.prod-nvl72.yaml"
KERNEL = os.uname().release  # the kernel ansible_facts report here: its modules.dep lists the host's driver
# What each owner leaves on a host (gpufleet.host.owners), planted below the host's root: TEST DOUBLES of a DKMS module
# listed in modules.dep, the GPU Operator's driver root mounted and its lock file, the device plugin's kubelet socket
# and the DRA kubelet plugin's registration socket (plain files: the check reads names, not sockets)
HOST_MODULE = {f"lib/modules/{KERNEL}/modules.dep": "updates/dkms/nvidia.ko.xz:\nupdates/dkms/nvidia-uvm.ko.xz: "
               "updates/dkms/nvidia.ko.xz\nkernel/fs/fuse/fuse.ko.xz:\n"}  # fmt: skip
OPERATOR_DRIVER = {
    "proc/mounts": "proc /proc proc rw 0 0\noverlay /run/nvidia/driver overlay rw,relatime 0 0\n",
    "run/nvidia/nvidia-driver.pid": "4242\n",
}
DEVICE_PLUGIN = {
    "var/lib/kubelet/device-plugins/nvidia-gpu.sock": "",
    "var/lib/kubelet/device-plugins/kubelet.sock": "",
}
DRA_PLUGIN = {"var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock": ""}
DEBIAN_535 = {"nvidia_driver_branch": "535", "nvidia_driver_source": "debian"}

pytestmark = pytest.mark.skipif(not NODE0_2M.exists(), reason="this machine has no 2 MiB hugepage counter on node 0")


@dataclass(frozen=True)
class Tools:
    """Stand-ins for the NVIDIA tools: nvidia-smi's persistence answer, dcgmi's diagnostic and exit status, and
    what the nvidia_driver role's verify tasks read (``driver``: tests/driver_standins.py)."""

    driver: DriverHost = field(default_factory=DriverHost)
    persistence: str = "0, Enabled\n1, Enabled\n"
    dcgm: str | None = DCGM_PASS  # None: no dcgmi on the host
    dcgm_rc: int = 0
    kernel_log: str = ""  # what the journalctl stand-in prints: the NVIDIA driver's Xid lines of this boot


@dataclass(frozen=True)
class Scenario:
    """One host of a run: how its plan differs from the met one (its kernel arguments, pages more on node 0), its
    stand-ins (None: none, as on this machine), the nvidia_driver variables its inventory sets, its host group and
    stack, and the verdict its row must show."""

    host: str
    verdict: str
    kernel_args: tuple[str, ...] | None = None  # None: one this machine booted with
    more_pages: int = 0
    tools: Tools | None = field(default_factory=Tools)
    variables: dict[str, Any] = field(default_factory=lambda: dict(BRANCH_580))
    group: str | None = None
    stack: str | None = None
    ssh_port: int | None = None  # an SSH host at 127.0.0.1:PORT instead of a local connection
    planted: dict[str, str] = field(default_factory=dict)  # files below the host's root: path -> content
    remediation: dict[str, Any] | None = None  # gpufleet's remediation state on the host (None: never remediated)


def debian_module(installed: str) -> Tools:
    """Debian's own driver packages (branch 535, open modules; Debian renames nvidia.ko) with ``installed`` the one
    module modinfo knows."""
    return Tools(DriverHost(module=installed, version="535.247.01", held=("nvidia-open-kernel-dkms",)))


EVERY_CHECK_FAILS = Tools(
    DriverHost(version="570.86.15", license="NVIDIA", loaded=nvrm_line("570.86.15", open_modules=False)),
    persistence="0, Enabled\n1, Disabled\n",
    dcgm=DCGM_FAIL,
    dcgm_rc=226,
)
DOWN = Scenario("down", "UNREACHABLE", tools=None, variables={}, ssh_port=1)
IMEX_MASKED = Tools(DriverHost(imex_enabled="masked"))
# The NVIDIA driver's kernel log line for a GPU that fell off the bus, as journalctl -o short-monotonic prints it
XID_79 = (
    "[ 5107.644336] gpu-7 kernel: NVRM: Xid (PCI:0000:41:00): 79, pid='<unknown>', name=<unknown>,"
    " GPU has fallen off the bus.\n"
)
REMEDIATED = {  # gpufleet's state on a host ansible/remediate.yml power-cycled (the Xid was in the boot before)
    "boot_id": "a-boot-before",
    "handled_through": -1,
    "out_of_service": None,
    "history": [
        {
            "time": "2026-11-27T08:40:00Z",
            "action": "power-cycle",
            "why": "Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:41:00 calls for power-cycle",
            "result": "power-cycle done, no new Xid: back in service",
        }
    ],
}
OUT_OF_SERVICE = {
    "boot_id": "b", "out_of_service": "Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE) on 0000:41:00 calls for cordon"
}  # fmt: skip
PASSING = [
    Scenario("planned", "ok"),
    Scenario("debian-open", "ok", tools=debian_module("nvidia-current-open"), variables=DEBIAN_535),
    # one owner each, the planned ones: the host's driver, the DRA kubelet plugin; nvidia-imex masked
    Scenario("nvl72-dra", "ok", tools=IMEX_MASKED, group="nvl72", stack=NVL72, planted=HOST_MODULE | DRA_PLUGIN),
    Scenario("remediated", "ok", remediation=REMEDIATED),
]
FAILING = [
    Scenario("debian-proprietary", "FAIL", tools=debian_module("nvidia-current"), variables=DEBIAN_535),
    Scenario("debian-cuda", "FAIL", tools=debian_module("nvidia"), variables=DEBIAN_535),
    Scenario("hugepages-changed", "FAIL", more_pages=10),
    Scenario("every-check-fails", "FAIL", kernel_args=("gpufleet.never=1",), tools=EVERY_CHECK_FAILS),
    DOWN,
    # no stand-ins: without an NVIDIA GPU, a driver branch or dcgmi, the NVIDIA checks do not apply
    Scenario("mig-group", "FAIL", tools=None, variables={}, group="hgx_small",
             stack="tests/fixtures/gpu-software/Pulumi.prod-onprem.yaml"),
    # a second owner planted: the GPU Operator's driver container beside the host's driver, the device plugin beside
    # the DRA kubelet plugin; and a running nvidia-imex where the DRA driver runs ComputeDomains
    Scenario("two-drivers", "FAIL", group="hgx", stack=NVL72, planted=HOST_MODULE | OPERATOR_DRIVER),
    Scenario("two-advertisers", "FAIL", tools=IMEX_MASKED, group="nvl72", stack=NVL72,
             planted=DEVICE_PLUGIN | DRA_PLUGIN),
    Scenario("imex-running", "FAIL", tools=Tools(DriverHost(imex_enabled="enabled", imex_active="active")),
             group="nvl72", stack=NVL72),
    # an Xid 79 this boot that ansible/remediate.yml has not handled yet; a host remediate.yml took out of service
    Scenario("xid-79", "FAIL", tools=Tools(kernel_log=XID_79)),
    Scenario("out-of-service", "FAIL", remediation=OUT_OF_SERVICE),
    # a host meant to run the NVIDIA driver (nvidia_driver_branch) without dcgmi: it cannot be diagnosed
    Scenario("no-dcgmi", "FAIL", tools=Tools(dcgm=None)),
]  # fmt: skip
LIMITED_OUT = "other"  # in the failing run's inventory, left out by --limit


def plan(scenario: Scenario) -> dict[str, Any]:
    """The plan of ``scenario``'s host: one this machine meets (a kernel argument it booted with, its 2 MiB pages on
    node 0, the kubelet drop-in run_verify writes) but for the scenario's changes."""
    booted = [Path("/proc/cmdline").read_text().split()[0]]
    return {
        "kernel_args": booted if scenario.kernel_args is None else list(scenario.kernel_args),
        "hugepages": [{"numa_node": 0, "size_kib": 2048, "count": int(NODE0_2M.read_text()) + scenario.more_pages}],
        "kubelet": {"cpuManagerPolicy": "static"},
        "system_cpu_affinity": [],
        "irqbalance_banned_cpus": "",
        "sriov": [],
    }


def install_tools(tmp_path: Path, tools: Tools) -> dict[str, Any]:
    """Write ``tools`` into tmp_path/bin (the driver's files below tmp_path/root) and a Python for the host that
    finds them first on PATH; the host variables that use them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    standins = {"nvidia-smi": (tools.persistence, 0)}
    if tools.dcgm is not None:
        standins["dcgmi"] = (tools.dcgm, tools.dcgm_rc)
    if tools.kernel_log:  # the kernel's messages of this boot, of which the check keeps the Xid lines
        standins["journalctl"] = (tools.kernel_log, 0)
    for tool, (text, rc) in standins.items():
        (tmp_path / f"{tool}.out").write_text(text)
        (bin_dir / tool).write_text(f"#!/bin/sh\ncat '{tmp_path / f'{tool}.out'}'\nexit {rc}\n")
        (bin_dir / tool).chmod(0o755)
    tools.driver.install(bin_dir, tmp_path / "root")
    python = tmp_path / "python"
    python.write_text(f"#!/bin/sh\nPATH='{bin_dir}':\"$PATH\" exec '{sys.executable}' \"$@\"\n")
    python.chmod(0o755)
    return {
        "ansible_python_interpreter": str(python),
        "nvidia_driver_host_root": str(tmp_path / "root"),
        "gpufleet_host_root": str(tmp_path / "root"),
        "nvidia_driver_secure_boot": False,
    }


def host_vars(tmp_path: Path, scenario: Scenario) -> dict[str, Any]:
    """The inventory's variables of ``scenario``'s host (its stand-ins below tmp_path/HOST)."""
    if scenario.ssh_port is not None:
        connection = {"ansible_host": "127.0.0.1", "ansible_port": scenario.ssh_port, "ansible_connection": "ssh",
                      "ansible_ssh_common_args": "-o ConnectTimeout=5"}  # fmt: skip
    else:
        connection = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    tools = install_tools(tmp_path / scenario.host, scenario.tools) if scenario.tools else {}
    for path, content in scenario.planted.items():
        (tmp_path / scenario.host / "root" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / scenario.host / "root" / path).write_text(content)
    stack = {"verify_test_stack": scenario.stack} if scenario.stack else {}
    state = tmp_path / scenario.host / "remediation.json"  # the host's state file, where remediate.yml writes it
    if scenario.remediation is not None:
        state.parent.mkdir(parents=True, exist_ok=True)
        state.write_text(json.dumps(scenario.remediation))
    remediation = {"gpufleet_remediation_file": str(state)}
    return connection | tools | scenario.variables | stack | remediation | {"verify_test_plan": plan(scenario)}


def run_verify(tmp_path: Path, scenarios: list[Scenario], *args: str) -> tuple[int, str, Any]:
    """verify.yml on an inventory of ``scenarios``' hosts (plus LIMITED_OUT): (exit status, output, the JSON report
    it wrote, None when it wrote none)."""
    (tmp_path / "kubelet.conf").write_text(KUBELET)
    hosts = {s.host: host_vars(tmp_path, s) for s in scenarios if s.group is None}
    hosts[LIMITED_OUT] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    groups: dict[str, dict[str, Any]] = {}
    for s in scenarios:
        if s.group:
            groups.setdefault(s.group, {"hosts": {}})["hosts"][s.host] = host_vars(tmp_path, s)
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": hosts, "children": groups}}))  # JSON is YAML
    report = tmp_path / "report.json"
    variables = EXTRA_VARS | {
        "numa_pinning_kubelet_dropin": str(tmp_path / "kubelet.conf"),
        "gpufleet_verify_report_file": str(report),
    }
    proc = ansible_playbook("-i", inventory, *args, "ansible/playbooks/verify.yml", local=False, extra_vars=variables)
    return proc.returncode, proc.stdout + proc.stderr, json.loads(report.read_text()) if report.exists() else None


def passing(shared: Shared) -> list[Any]:
    return shared("verify-passing", lambda tmp: run_verify(tmp, PASSING, "--limit", f"all:!{LIMITED_OUT}"))


def failing(shared: Shared) -> list[Any]:
    # --limit: the report is a task of the verifying play (a play on localhost would be skipped, and the run pass)
    return shared("verify-failing", lambda tmp: run_verify(tmp, FAILING, "--limit", f"all:!{LIMITED_OUT}"))


@pytest.fixture(scope="module")
def passing_run(shared: Shared) -> tuple[int, str]:
    rc, output, _ = passing(shared)
    return rc, output


@pytest.fixture(scope="module")
def failing_run(shared: Shared) -> tuple[int, str]:
    rc, output, _ = failing(shared)
    return rc, output


def table(output: str) -> list[str]:
    """The lines the play printed as its table (the default callback shows them as a JSON list)."""
    section = output[output.index("TASK [Print the table]") :]
    section = section[: section.index("\n}\n")]
    return [json.loads(m) for m in re.findall(r'^\s+("(?:[^"\\]|\\.)*"),?$', section, re.M)]


def row(lines: list[str], host: str) -> dict[str, str]:
    header = next(line.split() for line in lines if line.startswith("host "))
    cells = next(line.split() for line in lines if line.split()[:1] == [host])
    return dict(zip(header, cells, strict=True))


def failures(lines: list[str], host: str) -> list[str]:
    """The table's failure lines of ``host``."""
    return [line for line in lines[lines.index("failures:") + 1 :] if line.startswith(f"  {host}  ")]


def skips(lines: list[str], host: str) -> dict[str, str]:
    """{check: reason} of the checks the table says were skipped on ``host`` (a line names checks and hosts)."""
    found = {}
    for line in lines[lines.index("skipped:") + 1 :]:
        checks, hosts, reason = re.fullmatch(r"  (.+?) on (.+?): (.+)", line).groups()
        if host in hosts.split(", "):
            found |= dict.fromkeys(checks.split(", "), reason)
    return found


def test_playbooks_pass_syntax_check_from_the_repository_root():
    proc = ansible_playbook("--syntax-check", "-i", "localhost,", *PLAYBOOKS, local=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [f"playbook: {p}" for p in PLAYBOOKS] == re.findall(r"^playbook: .+$", proc.stdout, re.M), proc.stdout


def test_hosts_in_their_planned_state_pass_every_check(passing_run):
    rc, output = passing_run
    assert rc == 0, output[-4000:]
    lines = table(output)
    assert lines[0] == f"gpufleet verify (lab-local): all {len(PASSING)} ok"
    assert row(lines, "planned") == {
        "host": "planned",
        "result": "ok",
        "cmdline": "ok",
        "hugepages": "ok",
        "cpu-pinning": "ok",
        "sriov": "skip",
        "vfio": "skip",
        "driver": "ok",
        "owners": "ok",
        "persistence": "ok",
        "mig": "skip",
        "dcgm": "ok",
        "health": "ok",
    }
    assert "failures:" not in lines
    assert skips(lines, "planned") == {
        "sriov": "the plan has no SR-IOV device",
        "vfio": "no VMs in its host group",
        "mig": "no MIG layout for its host groups",
    }


@pytest.mark.parametrize(
    ("host", "installed", "driver"),
    [("debian-open", "nvidia-current-open", "ok"), ("debian-proprietary", "nvidia-current", "FAIL"),
     ("debian-cuda", "nvidia", "FAIL")],
)  # fmt: skip
def test_debians_renamed_module_is_the_planned_one(request, host: str, installed: str, driver: str):
    """With Debian's own packages (branch 535, open modules) the plan names the module nvidia-current-open (Debian
    renames nvidia.ko): that one is read; another module (proprietary nvidia-current, CUDA's nvidia) is not it."""
    scenario = next(s for s in PASSING + FAILING if s.host == host)
    assert scenario.tools.driver.module == installed
    rc, output = request.getfixturevalue("passing_run" if driver == "ok" else "failing_run")
    assert rc == (0 if driver == "ok" else 2), output[-4000:]
    lines = table(output)
    assert row(lines, host)["driver"] == driver
    if driver == "FAIL":
        (failure,) = failures(lines, host)
        assert f"  {host}  driver: the nvidia-current-open module for kernel " in failure
        assert "is not installed (modinfo: modinfo: ERROR: Module nvidia-current-open not found.)" in failure


def test_a_failing_run_has_every_host_in_its_table_and_summary(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    bad = [s for s in FAILING if s.verdict != "ok"]
    assert lines[0] == f"gpufleet verify (lab-local): {len(bad)} of {len(FAILING)} host(s) failed"
    assert {s.host: row(lines, s.host)["result"] for s in FAILING} == {s.host: s.verdict for s in FAILING}
    assert not any(line.split()[:1] == [LIMITED_OUT] for line in lines)  # --limit left it out
    summary = re.search(rf"{len(bad)} of {len(FAILING)} host\(s\) failed verification: (.+?)\"", output)
    assert summary, output[-4000:]
    assert set(summary.group(1).split(", ")) == {f"{s.host} ({s.verdict})" for s in bad}


def test_a_changed_hugepage_count_fails_the_run_with_the_table(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    count = int(NODE0_2M.read_text())
    cells = row(table(output), "hugepages-changed")
    assert cells["result"] == "FAIL" and cells["hugepages"] == "FAIL"
    # the failure hides no other check: each ran and passed
    assert [cells[c] for c in ("cmdline", "cpu-pinning", "driver", "persistence", "dcgm")] == ["ok"] * 5
    assert failures(table(output), "hugepages-changed") == [
        f"  hugepages-changed  hugepages: NUMA node 0 has {count} hugepages of 2048 kB; the plan is {count + 10}"
    ]
    assert "hugepages-changed (FAIL)" in output[output.index("host(s) failed verification: ") :]


def test_every_failing_check_is_reported_with_its_reason(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    cells = row(lines, "every-check-fails")
    assert [cells[c] for c in ("cmdline", "hugepages", "driver", "persistence", "dcgm")] == [
        "FAIL",
        "ok",
        "FAIL",
        "FAIL",
        "FAIL",
    ]
    found = "\n".join(failures(lines, "every-check-fails"))
    assert "cmdline: /proc/cmdline is" in found and "missing ['gpufleet.never=1']" in found
    assert "driver: the nvidia module for kernel " in found and "is 570.86.15; the release pins branch 580" in found
    assert "driver 570.86.15 is loaded; the release pins branch 580" in found
    assert "the loaded driver 570.86.15 uses the proprietary kernel modules; expected open" in found
    assert "is licensed 'NVIDIA' (proprietary); open modules are 'Dual MIT/GPL'" in found
    assert "persistence: persistence mode is off on GPU 1 (Disabled)" in found
    assert "dcgm: Persistence Mode: Fail (Persistence mode for GPU 1 is currently disabled.)" in found


def test_unreachable_host_is_in_the_table_and_fails_the_run(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    assert row(lines, "down")["result"] == "UNREACHABLE"
    assert set(row(lines, "down").values()) == {"down", "UNREACHABLE", "-"}
    assert any(line.startswith("  down  unreachable: ") and "port 1" in line for line in lines), "\n".join(lines)
    # the hosts beside it were checked to the end: every check has its cell
    assert all("-" not in row(lines, s.host).values() for s in FAILING if s is not DOWN)


def test_host_of_a_group_with_a_mig_layout_is_checked_against_that_layout(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    # the group's layout (h100-7x1g) is asserted; nvidia-mig-parted is not on this machine, so the check fails
    assert re.search(r"^TASK \[mig : Assert the GPUs carry h100-7x1g\]", output, re.M)
    lines = table(output)
    assert row(lines, "mig-group") == {
        "host": "mig-group",
        "result": "FAIL",
        "cmdline": "ok",
        "hugepages": "ok",
        "cpu-pinning": "ok",
        "sriov": "skip",
        "vfio": "skip",
        "driver": "skip",
        "owners": "ok",
        "persistence": "skip",
        "mig": "FAIL",
        "dcgm": "skip",
        "health": "ok",
    }
    assert [line.split(":")[0] for line in failures(lines, "mig-group")] == ["  mig-group  mig"]
    # no stand-ins here: the NVIDIA checks do not apply, and the table says why
    reasons = skips(lines, "mig-group")
    why = "no NVIDIA GPU, and nvidia_driver_branch is not set"
    assert reasons["driver"] == reasons["persistence"] == reasons["dcgm"] == why


def test_a_dra_host_with_one_owner_each_and_imex_masked_passes(passing_run):
    rc, output = passing_run
    assert rc == 0, output[-4000:]
    cells = row(table(output), "nvl72-dra")
    assert cells["result"] == "ok" and cells["owners"] == "ok" and cells["driver"] == "ok"


def test_the_operators_driver_container_beside_the_hosts_driver_fails_owners(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    cells = row(lines, "two-drivers")
    assert cells["result"] == "FAIL" and cells["owners"] == "FAIL"
    assert cells["driver"] == "ok"  # the host's driver itself is the planned one
    assert failures(lines, "two-drivers") == [
        "  two-drivers  owners: driver: both the host's NVIDIA driver "
        f"(/lib/modules/{KERNEL}/updates/dkms/nvidia.ko.xz) and the GPU Operator's driver container "
        "(/run/nvidia/driver mounted, /run/nvidia/nvidia-driver.pid) own the driver; the plan's driver is the host's "
        "(the nvidia_driver role)"
    ]


def test_the_device_plugin_beside_the_dra_kubelet_plugin_fails_owners(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    cells = row(lines, "two-advertisers")
    assert cells["result"] == "FAIL" and cells["owners"] == "FAIL" and cells["driver"] == "ok"
    assert failures(lines, "two-advertisers") == [
        "  two-advertisers  owners: advertiser: both the device plugin "
        "(/var/lib/kubelet/device-plugins/nvidia-gpu.sock) and the DRA kubelet plugin "
        "(/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock) are registered; the plan's advertiser is dra"
    ]


def test_a_running_nvidia_imex_fails_the_driver_check_where_dra_runs_compute_domains(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    cells = row(lines, "imex-running")
    assert cells["result"] == "FAIL" and cells["driver"] == "FAIL" and cells["owners"] == "ok"
    (failure,) = failures(lines, "imex-running")
    why = "the DRA driver runs IMEX for this group's ComputeDomains (advertiser dra, NVLink across hosts)"
    assert failure == (
        f"  imex-running  driver: nvidia-imex.service is enabled, not masked: {why}; "
        f"nvidia-imex.service is running (active): {why}"
    )


def test_an_xid_not_yet_remediated_fails_the_health_check_and_names_the_action(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    cells = row(lines, "xid-79")
    assert cells["result"] == "FAIL" and cells["health"] == "FAIL" and cells["driver"] == "ok"
    assert failures(lines, "xid-79") == [
        "  xid-79  health: Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:41:00 calls for power-cycle,"
        " not done yet: run ansible/remediate.yml"
    ]


def test_a_host_out_of_service_fails_the_health_check_until_remediate_brings_it_back(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    assert row(lines, "out-of-service")["health"] == "FAIL"
    assert failures(lines, "out-of-service") == [
        "  out-of-service  health: out of service: Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE) on 0000:41:00 calls for cordon"
        " (ansible/remediate.yml brings it back)"
    ]


def test_a_remediated_host_passes_and_the_report_shows_its_last_remediation(passing_run):
    rc, output = passing_run
    assert rc == 0, output[-4000:]
    lines = table(output)
    assert row(lines, "remediated")["health"] == "ok"
    notes = lines[lines.index("notes:") + 1 :]
    assert (
        "  remediated  health: last remediation 2026-11-27T08:40:00Z: Xid 79"
        " (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS) on 0000:41:00 calls for power-cycle; power-cycle done, no new"
        " Xid: back in service"
    ) in notes


def test_a_host_meant_to_run_the_driver_without_dcgmi_is_not_admitted(failing_run):
    rc, output = failing_run
    assert rc == 2, output[-4000:]
    lines = table(output)
    cells = row(lines, "no-dcgmi")
    assert cells["result"] == "FAIL" and cells["dcgm"] == "FAIL" and cells["driver"] == "ok"
    assert failures(lines, "no-dcgmi") == [
        "  no-dcgmi  dcgm: dcgmi is not installed, so the stack's diagnostic (dcgmi diag -r 1) cannot run: install"
        " DCGM (the datacenter-gpu-manager package) on the host"
    ]


def test_the_json_report_records_each_hosts_checks_and_dcgm_tests(shared):
    rc, output, report = failing(shared)
    assert rc == 2, output[-4000:]
    assert report["stack"] == "lab-local" and report["ok"] is False
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", report["time"])
    assert set(report["hosts"]) == {s.host for s in FAILING}  # the host --limit left out is not in it
    every = report["hosts"]["every-check-fails"]
    assert every["result"] == "FAIL"
    assert every["checks"]["hugepages"] == {"status": "ok", "detail": ""}
    assert every["checks"]["dcgm"]["status"] == "fail"
    assert every["dcgm"] == {"level": 1, "tests": [
        {"test": "Denylist", "result": "Pass", "detail": ""},
        {"test": "Persistence Mode", "result": "Fail", "detail": "Persistence mode for GPU 1 is currently disabled."},
    ]}  # fmt: skip
    # the stack's level: a prod stack runs the long diagnostic (level 3) unless it says otherwise
    assert report["hosts"]["two-drivers"]["dcgm"]["level"] == 3
    assert report["hosts"]["no-dcgmi"]["dcgm"] == {"level": 1, "tests": []}
    assert report["hosts"]["mig-group"]["dcgm"] is None  # skipped: no NVIDIA GPU, no driver branch
    assert report["hosts"]["down"]["result"] == "UNREACHABLE" and "port 1" in report["hosts"]["down"]["detail"]


def test_a_passing_run_writes_a_passing_report(shared):
    rc, output, report = passing(shared)
    assert rc == 0, output[-4000:]
    assert report["ok"] is True
    assert {h: v["result"] for h, v in report["hosts"].items()} == {s.host: "ok" for s in PASSING}
    assert all(v["dcgm"]["tests"] and v["checks"]["dcgm"]["status"] == "ok" for v in report["hosts"].values())
