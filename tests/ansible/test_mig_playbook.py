"""ansible/playbooks/mig.yml: which hosts take part, which layout each gets, and the rollout (serial,
max_fail_percentage) the stack gives; run by ansible-playbook on local connections, against the bare-metal stack
with MIG host groups (tests/fixtures/gpu-software/Pulumi.prod-onprem.yaml)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.plan import hosts
from tests.ansible_playbook import ansible_env, ansible_playbook
from tests.conftest import FIXTURES, REPO
from tests.lab.standins import FAKE_NVIDIA, fake_gpu_state

STACK = FIXTURES / "gpu-software/Pulumi.prod-onprem.yaml"
spec = importlib.util.spec_from_file_location("gpufleet_mig", REPO / "ansible/plugins/filter/gpufleet_mig.py")
filters = importlib.util.module_from_spec(spec)
spec.loader.exec_module(filters)

INVENTORY = """\
all:
  vars: {ansible_connection: local, ansible_python_interpreter: %s, mig_parted_binary: %s}
  children:
    hgx_mig: {hosts: {mig-1: {mig_parted_binary: /nonexistent/mig-parted}, mig-2: {}}}
    hgx_small: {hosts: {small-1: {}}}
    hgx_whole: {hosts: {whole-1: {}}}
    cpu: {hosts: {cpu-1: {}}}
"""


def stack_with_rollout(tmp_path: Path, serial: int, max_fail_percentage: int) -> Path:
    text = STACK.read_text().replace(
        "    inventory: inventories/prod-onprem\n",
        "    inventory: inventories/prod-onprem\n"
        f"    rollout: {{serial: {serial}, max_fail_percentage: {max_fail_percentage}}}\n",
    )
    path = tmp_path / "Pulumi.prod-onprem.yaml"
    path.write_text(text)
    return path


def fake_mig_parted(tmp_path: Path) -> dict[str, str]:
    """The lab's test double of nvidia-mig-parted (8 H100s, MIG off) in tmp_path/gpus; the environment it reads."""
    gpus = tmp_path / "gpus"
    gpus.mkdir(exist_ok=True)
    (gpus / "state.json").write_text(json.dumps(fake_gpu_state(load_catalog(), "H100-SXM5-80GB", 8)))
    shutil.copy(FAKE_NVIDIA, gpus / "nvidia-mig-parted")  # the double acts as the tool it is named after
    (gpus / "nvidia-mig-parted").chmod(0o755)
    return {"GPUFLEET_FAKE_GPU_DIR": str(gpus)}


def run_mig(tmp_path: Path, stack: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess[str]:
    """mig.yml on five local hosts: mig-1 lacks nvidia-mig-parted (its run fails), the others have the double."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY % (sys.executable, tmp_path / "gpus/nvidia-mig-parted"))
    return ansible_playbook(
        "-i", inventory, "ansible/playbooks/mig.yml", *args,
        local=False, extra_vars={"gpufleet_stack": str(stack)}, env=ansible_env(**(env or {})),
    )  # fmt: skip


def recap_hosts(output: str) -> set[str]:
    recap = output[output.index("PLAY RECAP") :]
    return {line.split()[0] for line in recap.splitlines()[1:] if " : ok=" in line}


# -- the filter ---------------------------------------------------------------------------------------------------


def test_only_groups_with_a_mig_layout_take_part():
    groups = hosts.stack_view(hosts.plan_file(STACK))["mig_host_groups"]
    assert filters.gpufleet_mig_hosts(groups) == "hgx_mig:hgx_small"
    assert filters.gpufleet_mig_hosts(groups, "mig-1") == "hgx_mig:hgx_small:&mig-1"
    assert filters.gpufleet_mig_hosts([]) == "!all"  # no host at all, rather than every host (the lab's stack)


def test_the_role_sees_every_layout_of_its_config_and_all_disabled():
    off = [{"devices": "all", "mig-enabled": False}]
    config = hosts.stack_view(hosts.plan_file(STACK))["mig_parted_config"]
    assert list(filters.gpufleet_mig_configs(config)) == ["all-disabled", "h100-half-3g", "h100-7x1g"]
    custom = {"version": "v1", "mig-configs": {"half": [{"devices": [0], "mig-enabled": True}]}}
    assert filters.gpufleet_mig_configs(custom) == {"half": custom["mig-configs"]["half"], "all-disabled": off}
    mine = {"version": "v1", "mig-configs": {"all-disabled": [{"devices": [0, 1], "mig-enabled": False}]}}
    assert filters.gpufleet_mig_configs(mine) == mine["mig-configs"]  # a config's own all-disabled is kept
    assert filters.gpufleet_mig_configs({}) == {"all-disabled": off}


# -- the play -----------------------------------------------------------------------------------------------------


def test_the_play_targets_the_mig_groups_hosts_only(tmp_path: Path):
    proc = run_mig(tmp_path, STACK, "--list-hosts")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = {line.strip() for line in proc.stdout.split("hosts (3):")[1].splitlines() if line.strip()}
    assert listed == {"mig-1", "mig-2", "small-1"}


@pytest.mark.parametrize("serial", [1, 2])
def test_batches_come_from_the_stack(tmp_path: Path, serial: int):
    # no host has nvidia-mig-parted: the first batch fails whole, and the rollout stops there
    proc = run_mig(tmp_path, stack_with_rollout(tmp_path, serial, 0), "-e", "mig_parted_binary=/nonexistent/mig-parted")
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "/nonexistent/mig-parted does not exist" in proc.stdout
    assert len(recap_hosts(proc.stdout)) == serial


needs_systemctl = pytest.mark.skipif(shutil.which("systemctl") is None, reason="the mig role's handler needs systemctl")


@needs_systemctl
@pytest.mark.parametrize(("max_fail_percentage", "carries_on"), [(0, False), (50, True)])
def test_tolerated_failures_come_from_the_stack(tmp_path: Path, max_fail_percentage: int, carries_on: bool):
    # one batch of three; mig-1 fails (1 of 3 = 33 %): above 0 % the others stop, within 50 % they carry on
    stack = stack_with_rollout(tmp_path, 3, max_fail_percentage)
    proc = run_mig(tmp_path, stack, "--check", env=fake_mig_parted(tmp_path))
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert "/nonexistent/mig-parted does not exist" in proc.stdout
    assert ("MIG layout h100-7x1g would be applied" in proc.stdout) is carries_on


@needs_systemctl
def test_check_mode_says_which_layout_each_host_would_get_and_changes_nothing(tmp_path: Path):
    existed = Path("/etc/nvidia-mig-manager").exists()
    proc = run_mig(tmp_path, STACK, "--check", "--diff", "--limit", "mig-2,small-1", env=fake_mig_parted(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert proc.stdout.count("MIG layout h100-half-3g would be applied") == 1  # mig-2
    assert proc.stdout.count("MIG layout h100-7x1g would be applied") == 1  # small-1
    assert "+Environment=MIG_PARTED_SELECTED_CONFIG=h100-7x1g" in proc.stdout
    assert Path("/etc/nvidia-mig-manager").exists() == existed
