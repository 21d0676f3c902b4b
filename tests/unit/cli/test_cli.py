"""The gpufleet command line as a user runs it: a separate process, exit codes, human and JSON output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.cli import GROUPS
from tests.conftest import REPO, gpufleet


def test_validate_all_example_stacks():
    proc = gpufleet("validate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 stack(s) valid" in proc.stdout
    report = json.loads(gpufleet("validate", "--json").stdout)
    assert sorted(r["stack"] for r in report) == [
        "dev-westeurope",
        "lab-local",
        "prod-eastus",
        "prod-westeurope",
        "staging-westeurope",
    ]
    assert all(r["ok"] and r["errors"] == [] for r in report)


def test_validate_from_a_subdirectory_finds_the_project_root():
    assert gpufleet("validate", "prod-eastus", cwd=REPO / "gpufleet").returncode == 0


def test_validate_prints_file_line_path_message_and_exits_1():
    proc = gpufleet("validate", "tests/fixtures/invalid/vm_size_retired.yaml")
    assert proc.returncode == 1
    assert (
        "tests/fixtures/invalid/vm_size_retired.yaml:19: aks.gpu_pools[0].vm_size: 'Standard_NC6s_v3' was retired"
        " on 2025-09-30" in proc.stdout
    )
    assert "1 of 1 stack(s) invalid, 1 error(s)" in proc.stdout


def test_validate_json_schema():
    proc = gpufleet("validate", "--json", "tests/fixtures/invalid/spot_with_max_surge.yaml", "dev-westeurope")
    assert proc.returncode == 1
    bad, good = json.loads(proc.stdout)
    assert good == {"stack": "dev-westeurope", "ok": True, "errors": []}
    assert bad["ok"] is False
    assert bad["errors"] == [
        {
            "file": "tests/fixtures/invalid/spot_with_max_surge.yaml",
            "line": 22,
            "path": "aks.gpu_pools[0].upgrade.max_surge",
            "message": "spot pools get no surge nodes on upgrade; use max_unavailable instead",
        }
    ]


@pytest.mark.parametrize(
    "args", [("validate", "no-such-stack"), ("validate", "missing/file.yaml"), ("validate", "--bogus"), ("frobnicate",)]
)
def test_usage_errors_exit_2(args):
    proc = gpufleet(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip()


def test_validate_with_no_stack_files_is_a_usage_error(tmp_path: Path):
    proc = gpufleet("validate", cwd=tmp_path)
    assert proc.returncode == 2 and "no stack files" in proc.stderr


def test_plan_json_and_human():
    proc = gpufleet("plan", "prod-eastus", "--json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    pools = {p["name"]: p for p in plan["pools"]}
    assert pools["nvlmig"]["gpu_model"] == "H100-NVL-94GB"
    assert pools["nvlmig"]["mig"]["instances_per_node"] == {"1g.12gb": 4, "2g.24gb": 2, "3g.47gb": 2}
    assert pools["t4spot"]["spot"] is True
    human = gpufleet("plan", "prod-eastus").stdout
    assert "nvlmig (AKS node pool nvlmigc749)  Standard_NC80adis_H100_v5: 2 x H100-NVL-94GB, 80 vCPU, 640 GiB" in human
    assert "MIG (operator-managed, nvl-balanced): 4 x 1g.12gb, 2 x 2g.24gb, 2 x 3g.47gb per node" in human


def test_plan_of_an_invalid_stack_plans_nothing_and_exits_1():
    proc = gpufleet("plan", "tests/fixtures/invalid/azure_linux_with_gb200.yaml", "--json")
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert (data["stack"], data["ok"]) == ("azure_linux_with_gb200", False)  # the stack's name, as validate gives it
    assert data["errors"][0]["path"] == "aks.gpu_pools[0].os_sku"
    text = gpufleet("plan", "tests/fixtures/invalid/azure_linux_with_gb200.yaml")
    assert text.stderr.startswith("invalid stack azure_linux_with_gb200: nothing planned\n")


@pytest.mark.parametrize("gpu", ["H100-SXM5-80GB", "10de:2330", "NVIDIA H100 80GB HBM3"])
def test_mig_profiles_accepts_every_gpu_identifier(gpu):
    proc = gpufleet("mig", "profiles", gpu, "--json")
    assert proc.returncode == 0
    data = json.loads(proc.stdout)
    assert data["gpu"] == "H100-SXM5-80GB" and data["mig"] is True
    assert (data["compute_slices"], data["memory_slices"]) == (7, 8)
    profiles = {p["name"]: p for p in data["profiles"]}
    assert profiles["3g.40gb"]["starts"] == [0, 4] and profiles["3g.40gb"]["max_count"] == 2
    human = gpufleet("mig", "profiles", gpu).stdout
    assert "{0,2,4,6}:2" in human


def test_mig_profiles_refuses_gpus_without_mig_and_unknown_gpus():
    proc = gpufleet("mig", "profiles", "Tesla T4", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout) | {"reason": ""} == {"gpu": "T4", "mig": False, "profiles": [], "reason": ""}
    assert "T4 (Turing) has no MIG" in gpufleet("mig", "profiles", "T4").stderr
    unknown = gpufleet("mig", "profiles", "H100-SXM-80GB")
    assert unknown.returncode == 1 and "did you mean 'H100-SXM5-80GB'" in unknown.stderr


def test_help_and_version():
    for args in (("--help",), ("validate", "--help"), ("plan", "--help"), ("mig", "profiles", "--help")):
        proc = gpufleet(*args)
        assert proc.returncode == 0 and "Usage" in proc.stdout, args
    assert gpufleet("--version").stdout.startswith("gpufleet ")


def test_validate_imports_neither_pulumi_nor_ansible():
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "gpufleet", "validate"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0
    imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "pydantic" in imported and "ruamel.yaml" in imported  # the check sees real imports
    leaked = sorted(m for m in imported if m.split(".")[0] in ("pulumi", "pulumi_azure_native", "ansible"))
    assert leaked == []


def test_topology_plan_json_contract():
    proc = gpufleet("topology", "plan", "--host-root", "tests/fixtures/hosts/dgx-h100", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"numa_nodes", "gpus", "reserved_cpus", "isolated_cpus", "hugepages", "kernel_args", "kubelet", "sriov",
            "gres_conf"} <= set(data)  # fmt: skip
    assert {"id", "cpus", "memory_mib"} <= set(data["numa_nodes"][0])
    assert {"pci", "model", "numa_node", "cpus", "nics"} <= set(data["gpus"][0])
    # the default profile: 56 cores per node, one for the system, four GPUs: the node's share, 13 cores each
    assert data["gpus"][0]["cpus"] == [*range(1, 14), *range(113, 126)]
    assert data["numa_nodes"][0]["cores_per_gpu"] == 13
    assert data["numa_nodes"][0]["choice"].startswith("56 cores, 1 for the system, 4 GPU(s): 13 cores each")


def test_topology_plan_human_picture_and_refusal():
    proc = gpufleet("topology", "plan", "--host-root", "tests/fixtures/hosts/dgx-h100")
    assert "NUMA node 1  CPUs 56-111,168-223 (56 cores), 1024 GiB" in proc.stdout
    assert "GPU 4 0000:9d:00.0 H100-SXM5-80GB  CPUs 57-69,169-181  NIC ibp154s0 (infiniband)" in proc.stdout
    assert "  56 cores, 1 for the system, 4 GPU(s): 13 cores each (the node's share, within cores_per_gpu 4-16)" in (
        proc.stdout
    )
    refused = gpufleet(
        "topology", "plan", "--host-root", "tests/fixtures/hosts/numa-unknown", "--cores-per-gpu", "9", "--json"
    )
    assert refused.returncode == 1
    assert json.loads(refused.stdout) == {
        "host": "numa-unknown",
        "ok": False,
        "error": "NUMA node 0 has 16 physical cores for 2 GPU(s); cores_per_gpu min 9 needs 18 (lower cores_per_gpu,"
        " e.g. --cores-per-gpu 8)",
    }


def test_topology_plan_overrides_and_their_usage_errors():
    def plan(*options: str) -> subprocess.CompletedProcess:
        return gpufleet("topology", "plan", "--host-root", "tests/fixtures/hosts/dgx-a100", *options)

    fixed = json.loads(plan("--cores-per-gpu", "6", "--reserve-cores", "4", "--json").stdout)
    assert {n["cores_per_gpu"] for n in fixed["numa_nodes"] if n["gpus"]} == {6}
    assert len(fixed["reserved_cpus"]) == 4 * 2  # four cores, SMT siblings with them
    ranged = json.loads(plan("--cores-per-gpu", "2-5", "--json").stdout)
    assert {n["cores_per_gpu"] for n in ranged["numa_nodes"] if n["gpus"]} == {5}
    for options, message in [
        (("--cores-per-gpu", "8-4"), "error: --cores-per-gpu: min (8) is above max (4)"),
        (("--cores-per-gpu", "eight"), "error: --cores-per-gpu 'eight': expected a number (8) or a range (4-16)"),
        (("--reserve-cores", "-1"), "error: --reserve-cores: Input should be greater than or equal to 0"),
    ]:
        proc = plan(*options)
        assert (proc.returncode, proc.stderr.strip()) == (2, message)


def test_topology_plan_refuses_a_gpu_the_catalog_does_not_know(tmp_path: Path):
    host = tmp_path / "h100-unknown"
    shutil.copytree(REPO / "tests/fixtures/hosts/dgx-h100", host, symlinks=True)
    (host / "sys/bus/pci/devices/0000:1b:00.0/device").write_text("0x2399\n")
    proc = gpufleet("topology", "plan", "--host-root", str(host))
    assert proc.returncode == 1
    assert "GPU 0000:1b:00.0 has PCI id 10de:2399, which gpufleet's catalog does not know" in proc.stderr
    assert "Type=unknown" not in proc.stdout


def test_topology_plan_takes_a_profile_from_the_stacks():
    proc = gpufleet("topology", "plan", "--host-root", "tests/fixtures/hosts/no-gpu", "--profile", "lab", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {(h["size_kib"], h["count"]) for h in data["hugepages"]} == {(1048576, 1), (2048, 64)}
    assert (
        gpufleet("topology", "plan", "--host-root", "tests/fixtures/hosts/no-gpu", "--profile", "nope").returncode == 2
    )
    assert gpufleet("topology", "plan", "--host-root", "/nonexistent").returncode == 2


@pytest.mark.parametrize("group", ["", *GROUPS])  # the top level and every group
def test_help_lists_each_command_with_a_one_line_summary(group: str):
    """``gpufleet --help`` and each group's list their commands one line each (the docstring, wrapped mid-sentence,
    is the command's own --help), on an 80-column terminal."""
    import os

    import typer.main

    from gpufleet.cli import app

    command = typer.main.get_command(app)
    if group:
        command = command.commands[group]  # type: ignore[attr-defined]
    commands = list(command.commands)  # type: ignore[attr-defined]
    proc = gpufleet(*([group] if group else []), "--help", env={**os.environ, "COLUMNS": "80", "TERM": "dumb"})
    assert proc.returncode == 0, proc.stderr
    box = proc.stdout.split("Commands", 1)[1]
    rows = [line.strip("│ ").rstrip() for line in box.splitlines() if line.startswith("│")]
    listed = [row.split()[0] for row in rows]
    assert listed == commands, f"a summary wrapped onto a second line: {rows}"
    assert all(len(row.split(maxsplit=1)) == 2 for row in rows)  # each has its summary
