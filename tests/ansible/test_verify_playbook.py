"""ansible/playbooks/verify.yml run for real by ansible-playbook, against this machine (connection local).

This machine is no converged GPU host, so each test gives the play the plan this machine does meet (``-e
gpufleet_plan=...``: one of its real kernel arguments, its real 2 MiB page count on NUMA node 0, a kubelet drop-in
in a temporary directory) and stands in for the NVIDIA tools (``modinfo``, ``nvidia-smi``, ``dcgmi`` on PATH, a
``/proc/driver/nvidia/version`` file). The roles' verify tasks and the play's checks run unchanged; what the
tests look at is what a user sees: the exit status and the table.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.ansible_playbook import ansible_env, ansible_playbook
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

pytestmark = pytest.mark.skipif(not NODE0_2M.exists(), reason="this machine has no 2 MiB hugepage counter on node 0")


def met_plan(tmp_path: Path, **changes) -> dict:
    """A plan this machine meets: a kernel argument it booted with, its 2 MiB pages on node 0, a kubelet drop-in."""
    (tmp_path / "kubelet.conf").write_text(KUBELET)
    plan = {
        "kernel_args": [Path("/proc/cmdline").read_text().split()[0]],
        "hugepages": [{"numa_node": 0, "size_kib": 2048, "count": int(NODE0_2M.read_text())}],
        "kubelet": {"cpuManagerPolicy": "static"},
        "system_cpu_affinity": [],
        "irqbalance_banned_cpus": "",
        "sriov": [],
    }
    return {"gpufleet_plan": plan | changes, "numa_pinning_kubelet_dropin": str(tmp_path / "kubelet.conf")}


def nvidia_tools(
    tmp_path: Path,
    driver: DriverHost | None = None,
    *,
    persistence: str = "0, Enabled\n1, Enabled\n",
    dcgm: str = DCGM_PASS,
    dcgm_rc: int = 0,
) -> dict:
    """Stand-ins for the NVIDIA tools on PATH (tmp_path/bin): nvidia-smi, dcgmi, and what the nvidia_driver role's
    verify tasks read (``driver``: by default the driver of branch 580 as planned, tests/driver_standins.py, below
    the host root tmp_path/root); the vars that use them."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    outputs = {"nvidia-smi": (persistence, 0), "dcgmi": (dcgm, dcgm_rc)}
    for tool, (text, rc) in outputs.items():
        (tmp_path / f"{tool}.out").write_text(text)
        (bin_dir / tool).write_text(f"#!/bin/sh\ncat '{tmp_path / f'{tool}.out'}'\nexit {rc}\n")
        (bin_dir / tool).chmod(0o755)
    (driver or DriverHost()).install(bin_dir, tmp_path / "root")
    return {
        "nvidia_driver_branch": "580",
        "nvidia_driver_host_root": str(tmp_path / "root"),
        "nvidia_driver_secure_boot": False,
    }


def run_verify(tmp_path: Path, extra: dict, inventory: str = "localhost,", nvidia: bool = False, *args: str):
    variables = {"ansible_python_interpreter": sys.executable, **extra}
    return ansible_playbook(
        "-i", inventory, "-c", "local", *args, "ansible/playbooks/verify.yml",
        local=False, extra_vars=variables, env=ansible_env(tmp_path / "bin" if nvidia else None),
    )  # fmt: skip


def table(output: str) -> list[str]:
    """The lines the play printed as its table (the default callback shows them as a JSON list)."""
    section = output[output.index("TASK [Print the table]") :]
    section = section[: section.index("\n}\n")]
    return [json.loads(m) for m in re.findall(r'^\s+("(?:[^"\\]|\\.)*"),?$', section, re.M)]


def row(lines: list[str], host: str) -> dict[str, str]:
    header = next(line.split() for line in lines if line.startswith("host "))
    cells = next(line.split() for line in lines if line.split()[:1] == [host])
    return dict(zip(header, cells, strict=True))


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_playbook_passes_syntax_check_from_the_repository_root(playbook: str):
    proc = ansible_playbook("--syntax-check", "-i", "localhost,", playbook, local=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_host_in_its_planned_state_passes_every_check(tmp_path: Path):
    proc = run_verify(tmp_path, met_plan(tmp_path) | nvidia_tools(tmp_path), nvidia=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr
    lines = table(proc.stdout)
    assert lines[0] == "gpufleet verify (lab-local): all 1 ok"
    assert row(lines, "localhost") == {
        "host": "localhost",
        "result": "ok",
        "cmdline": "ok",
        "hugepages": "ok",
        "cpu-pinning": "ok",
        "sriov": "skip",
        "vfio": "skip",
        "driver": "ok",
        "persistence": "ok",
        "mig": "skip",
        "dcgm": "ok",
    }
    assert "failures:" not in lines
    assert "  sriov on localhost: the plan has no SR-IOV device" in lines
    assert "  vfio on localhost: no VMs in its host group" in lines
    assert "  mig on localhost: no MIG layout for its host groups" in lines


@pytest.mark.parametrize(
    ("installed", "driver"), [("nvidia-current-open", "ok"), ("nvidia-current", "FAIL"), ("nvidia", "FAIL")]
)
def test_debians_renamed_module_is_the_planned_one(tmp_path: Path, installed: str, driver: str):
    """With Debian's own packages (branch 535, open modules) the plan names the module nvidia-current-open (Debian
    renames nvidia.ko): that one is read; another module (proprietary nvidia-current, CUDA's nvidia) is not it."""
    host = DriverHost(module=installed, version="535.247.01", held=("nvidia-open-kernel-dkms",))
    tools = nvidia_tools(tmp_path, host) | {"nvidia_driver_branch": "535", "nvidia_driver_source": "debian"}
    proc = run_verify(tmp_path, met_plan(tmp_path) | tools, nvidia=True)
    assert proc.returncode == (0 if driver == "ok" else 2), proc.stdout[-4000:]
    lines = table(proc.stdout)
    assert row(lines, "localhost")["driver"] == driver
    if driver == "FAIL":
        failures = "\n".join(lines[lines.index("failures:") + 1 :])
        assert "the nvidia-current-open module for kernel " in failures
        assert "is not installed (modinfo: modinfo: ERROR: Module nvidia-current-open not found.)" in failures


def test_a_changed_hugepage_count_fails_the_run_with_the_table(tmp_path: Path):
    count = int(NODE0_2M.read_text())
    extra = met_plan(tmp_path, hugepages=[{"numa_node": 0, "size_kib": 2048, "count": count + 10}])
    # --limit: the report is a task of the verifying play (a play on localhost would be skipped, and the run pass)
    proc = run_verify(tmp_path, extra | nvidia_tools(tmp_path), "localhost,other,", True, "--limit", "localhost")
    assert proc.returncode == 2, proc.stdout[-4000:]
    lines = table(proc.stdout)
    assert lines[0] == "gpufleet verify (lab-local): 1 of 1 host(s) failed"
    cells = row(lines, "localhost")
    assert cells["result"] == "FAIL" and cells["hugepages"] == "FAIL"
    # the failure hides no other check: each ran and passed
    assert [cells[c] for c in ("cmdline", "cpu-pinning", "driver", "persistence", "dcgm")] == ["ok"] * 5
    failures = lines[lines.index("failures:") + 1 :]
    assert (
        failures[0] == f"  localhost  hugepages: NUMA node 0 has {count} hugepages of 2048 kB; the plan is {count + 10}"
    )
    assert "1 of 1 host(s) failed verification: localhost (FAIL)" in proc.stdout


def test_every_failing_check_is_reported_with_its_reason(tmp_path: Path):
    extra = met_plan(tmp_path, kernel_args=["gpufleet.never=1"]) | nvidia_tools(
        tmp_path,
        DriverHost(version="570.86.15", license="NVIDIA", loaded=nvrm_line("570.86.15", open_modules=False)),
        persistence="0, Enabled\n1, Disabled\n",
        dcgm=DCGM_FAIL,
        dcgm_rc=226,
    )
    proc = run_verify(tmp_path, extra, nvidia=True)
    assert proc.returncode == 2, proc.stdout[-4000:]
    lines = table(proc.stdout)
    cells = row(lines, "localhost")
    assert [cells[c] for c in ("cmdline", "hugepages", "driver", "persistence", "dcgm")] == [
        "FAIL",
        "ok",
        "FAIL",
        "FAIL",
        "FAIL",
    ]
    failures = "\n".join(lines[lines.index("failures:") + 1 :])
    assert "cmdline: /proc/cmdline is" in failures and "missing ['gpufleet.never=1']" in failures
    assert (
        "driver: the nvidia module for kernel " in failures and "is 570.86.15; the release pins branch 580" in failures
    )
    assert "driver 570.86.15 is loaded; the release pins branch 580" in failures
    assert "the loaded driver 570.86.15 uses the proprietary kernel modules; expected open" in failures
    assert "is licensed 'NVIDIA' (proprietary); open modules are 'Dual MIT/GPL'" in failures
    assert "persistence: persistence mode is off on GPU 1 (Disabled)" in failures
    assert "dcgm: Persistence Mode: Fail (Persistence mode for GPU 1 is currently disabled.)" in failures


def test_unreachable_host_is_in_the_table_and_fails_the_run(tmp_path: Path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n"
        "    down: {ansible_host: 127.0.0.1, ansible_port: 1, ansible_connection: ssh,"
        " ansible_ssh_common_args: -o ConnectTimeout=5}\n"
        f"    localhost: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n"
    )
    # no stand-ins: without an NVIDIA GPU, a driver branch or dcgmi, the NVIDIA checks do not apply
    proc = run_verify(tmp_path, met_plan(tmp_path), str(inventory))
    assert proc.returncode == 2, proc.stdout[-4000:]
    lines = table(proc.stdout)
    assert row(lines, "down")["result"] == "UNREACHABLE"
    assert set(row(lines, "down").values()) == {"down", "UNREACHABLE", "-"}
    assert row(lines, "localhost")["result"] == "ok"
    assert any(line.startswith("  down  unreachable: ") and "port 1" in line for line in lines), "\n".join(lines)
    skipped = "\n".join(lines[lines.index("skipped:") + 1 :])
    assert "driver, persistence on localhost: no NVIDIA GPU, and nvidia_driver_branch is not set" in skipped
    assert "dcgm on localhost: dcgmi is not installed" in skipped


def test_host_of_a_group_with_a_mig_layout_is_checked_against_that_layout(tmp_path: Path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    hgx_small:\n      hosts:\n"
        f"        localhost: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n"
    )
    extra = met_plan(tmp_path) | {"gpufleet_stack": "tests/fixtures/gpu-software/Pulumi.prod-onprem.yaml"}
    proc = run_verify(tmp_path, extra, str(inventory))
    assert proc.returncode == 2, proc.stdout[-4000:]
    # the group's layout (h100-7x1g) is asserted; nvidia-mig-parted is not on this machine, so the check fails
    assert "TASK [mig : Assert the GPUs carry h100-7x1g]" in proc.stdout
    assert row(table(proc.stdout), "localhost")["mig"] == "FAIL"
