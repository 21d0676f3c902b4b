"""Bad topology facts: a recorded host tree with one fact broken is refused with a FactsError naming the sysfs or
procfs file, through the planner (read_host, then plan) and through `gpufleet topology plan` (exit 1, one line;
--json), never planned on a guess, never a hang, an unbounded read or a traceback. Legitimate oddities keep their
documented fallbacks (numa_node -1; a GPU on a NUMA node without CPUs: tests/unit/host/test_topology.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gpufleet.catalog import load_catalog
from gpufleet.cli import main
from gpufleet.host.hostfacts import FactsError, read_host
from gpufleet.host.topology import plan
from gpufleet.spec.models import TuningProfile
from tests.conftest import FIXTURES, REPO

HOSTS = FIXTURES / "hosts"
CATALOG_MAP = load_catalog().gpus_by_pci_id
GPU0 = "sys/bus/pci/devices/0000:19:00.0"  # hgx-h200: GPU 0, on NUMA node 0 (CPUs 0-47,96-143)
NODE = "sys/devices/system/node"
CPU = "sys/devices/system/cpu"


def host_tree(tmp_path: Path, machine: str = "hgx-h200") -> Path:
    root = tmp_path / machine
    shutil.copytree(HOSTS / machine, root, symlinks=True)
    return root


def write(text: str | bytes, rel: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        path.unlink()
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return mutate


def remove(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


def symlink_loop(rel: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        path = root / rel
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        path.symlink_to(path.name)  # points at itself

    return mutate


def directory(rel: str) -> Callable[[Path], None]:
    def mutate(root: Path) -> None:
        (root / rel).unlink()
        (root / rel).mkdir()

    return mutate


# (test id, how the tree is broken, the file the error must name, what it must say)
BAD_FACTS = [
    ("gpu-numa-node-that-does-not-exist", write("5\n", f"{GPU0}/numa_node"), f"{GPU0}/numa_node",
     r"names NUMA node 5, which sys/devices/system/node does not have \(nodes 0-1\)"),
    ("gpu-numa-node-not-a-number", write("zero\n", f"{GPU0}/numa_node"), f"{GPU0}/numa_node",
     r"holds 'zero', not an integer"),
    ("gpu-numa-node-below-minus-one", write("-2\n", f"{GPU0}/numa_node"), f"{GPU0}/numa_node",
     r"holds -2: not a NUMA node \(-1 means none\)"),
    ("node-cpulist-missing", remove(f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist", r"is missing"),
    ("node-cpulist-reversed-range", write("95-48,144-191\n", f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist",
     r"is not a CPU list: the range 95-48 is reversed"),
    ("node-cpulist-garbage", write("48-95,zz\n", f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist",
     r"is not a CPU list: 'zz' is neither a CPU number nor a range"),
    ("node-cpulist-beyond-any-kernel", write("48-95,144-70000\n", f"{NODE}/node1/cpulist"),
     f"{NODE}/node1/cpulist", r"is not a CPU list: CPU 70000 is beyond"),
    ("node-cpulist-not-utf8", write(b"48-95,144-191\xff\n", f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist",
     r"is not UTF-8 text \(byte 0xff at offset 13\)"),
    ("node-cpulist-a-directory", directory(f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist",
     r"is a directory, not a regular file"),
    ("node-cpulist-symlink-loop", symlink_loop(f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist",
     r"cannot be read: "),
    ("gpu-directory-symlink-loop", symlink_loop(GPU0), f"{GPU0}/vendor", r"cannot be read: "),
    ("node-meminfo-without-memtotal", write("Node 1 MemFree: 1 kB\n", f"{NODE}/node1/meminfo"),
     f"{NODE}/node1/meminfo", r"has no 'MemTotal: <n> kB' line"),
    ("cpus-in-two-nodes", write("40-95,144-191\n", f"{NODE}/node1/cpulist"), f"{NODE}/node1/cpulist",
     r"lists CPU 40, which node0/cpulist lists too"),
    ("smt-siblings-that-disagree", write("1-2\n", f"{CPU}/cpu1/topology/thread_siblings_list"),
     f"{CPU}/cpu2/topology/thread_siblings_list",
     r"CPU 2 is in the core 2,98 here and in the core 1-2,97: the thread_siblings_list files of CPUs 1-2,97-98"
     r" disagree"),
    ("smt-siblings-on-two-nodes", lambda root: [write("0-47,96-142\n", f"{NODE}/node0/cpulist")(root),
                                                write("48-95,143-191\n", f"{NODE}/node1/cpulist")(root)],
     f"{CPU}/cpu47/topology/thread_siblings_list",
     r"the SMT siblings 47,143 are not all on NUMA node 0: sys/devices/system/node/node1/cpulist lists CPU 143"),
]  # fmt: skip
IDS = [case[0] for case in BAD_FACTS]


@pytest.mark.parametrize(("mutate", "rel", "reason"), [case[1:] for case in BAD_FACTS], ids=IDS)
def test_the_planner_refuses_bad_facts_naming_the_file(tmp_path: Path, mutate, rel: str, reason: str):
    root = host_tree(tmp_path)
    mutate(root)
    with pytest.raises(FactsError) as caught:
        plan(read_host(str(root), CATALOG_MAP), TuningProfile(hugepages_1g_per_gpu=2), "h200")
    assert caught.value.path == str(root / rel)
    assert re.search(reason, caught.value.reason), caught.value.reason
    assert str(caught.value) == f"{root / rel}: {caught.value.reason}"


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``gpufleet ARGS`` in this process, as __main__ runs it (the internal-error guard included)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    captured = capsys.readouterr()
    return exited.value.code, captured.out, captured.err


@pytest.mark.parametrize(("mutate", "rel", "reason"), [case[1:] for case in BAD_FACTS], ids=IDS)
def test_topology_plan_exits_1_with_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate, rel: str, reason: str
):
    root = host_tree(tmp_path)
    mutate(root)
    code, out, err = run_cli(capsys, "topology", "plan", "--host-root", str(root))
    assert (code, out) == (1, ""), err
    assert err.startswith(f"error: host hgx-h200: {root / rel}: ") and err.count("\n") == 1, err
    assert re.search(reason, err), err
    code, out, err = run_cli(capsys, "topology", "plan", "--host-root", str(root), "--json")
    assert (code, err) == (1, "")
    report = json.loads(out)
    assert report["ok"] is False and report["host"] == "hgx-h200" and report["path"] == str(root / rel)
    assert report["error"].startswith(f"{root / rel}: ") and re.search(reason, report["error"])


def test_the_planner_itself_refuses_a_gpu_on_a_node_the_facts_do_not_have():
    """Facts from anywhere (the Ansible module's, hand-made): a GPU on a node that is not there used to be planned
    with its hugepages dropped and an empty gres.conf Cores=."""
    facts = read_host(str(HOSTS / "hgx-h200"), CATALOG_MAP)
    facts["gpus"][0]["numa_node"] = 7
    with pytest.raises(FactsError, match=r"0000:19:00.0/numa_node: names NUMA node 7, which sys/devices/system/node"):
        plan(facts, TuningProfile(hugepages_1g_per_gpu=2), "h200")


def test_numa_node_minus_one_stays_the_documented_unknown(tmp_path: Path):
    root = host_tree(tmp_path, "workstation-l40s")  # one NUMA node
    for gpu in (root / "sys/bus/pci/devices").iterdir():
        if (gpu / "class").read_text().startswith("0x03"):
            (gpu / "numa_node").write_text("-1\n")
    facts = read_host(str(root), CATALOG_MAP)
    assert [g["numa_node"] for g in facts["gpus"]] == [None, None]
    assert {g.numa_node for g in plan(facts, TuningProfile(), "ws").gpus} == {0}


# -- input that could block or read without end: run in a child process with a deadline and a memory cap, so that
# -- a regression fails the test instead of hanging or exhausting the machine


def fifo(root: Path) -> None:
    os.mkfifo(root / "proc/meminfo")  # nobody writes to it: a blocking open would wait forever


def dev_zero(root: Path) -> None:
    (root / f"{NODE}/node0/meminfo").symlink_to("/dev/zero")  # endless


def huge_file(root: Path) -> None:
    (root / "proc/cmdline").write_text("x" * (2 * 1024 * 1024))


# (test id, the file, what replaces it, what the error must say)
UNBOUNDED = [
    ("fifo", "proc/meminfo", fifo, r"is a named pipe \(FIFO\), not a regular file"),
    ("dev-zero", f"{NODE}/node0/meminfo", dev_zero, r"is a character device, not a regular file"),
    ("huge-file", "proc/cmdline", huge_file, r"is larger than 1024 KiB"),
]


def bounded(args: list[str]) -> subprocess.CompletedProcess[str]:
    def cap_memory() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
        timeout=60,
        preexec_fn=cap_memory,
    )


PROBE = """
import json, sys
from gpufleet.host.hostfacts import FactsError, read_host
try:
    read_host(sys.argv[1])
except FactsError as exc:
    print(json.dumps({"path": exc.path, "reason": exc.reason}))
"""


@pytest.mark.parametrize(("rel", "replace", "reason"), [case[1:] for case in UNBOUNDED], ids=[c[0] for c in UNBOUNDED])
def test_fifos_device_files_and_huge_files_are_refused_without_blocking(tmp_path: Path, rel: str, replace, reason: str):
    root = host_tree(tmp_path, "lab-vm")
    (root / rel).unlink()
    replace(root)
    probe = bounded(["-c", PROBE, str(root)])
    assert probe.returncode == 0, probe.stderr
    refused = json.loads(probe.stdout)
    assert refused["path"] == str(root / rel) and re.search(reason, refused["reason"]), refused
    cli = bounded(["-m", "gpufleet", "topology", "plan", "--host-root", str(root)])
    assert cli.returncode == 1 and cli.stdout == "", cli.stderr
    assert cli.stderr.startswith(f"error: host lab-vm: {root / rel}: ") and cli.stderr.count("\n") == 1, cli.stderr


# -- what the host says is printed as it is


def test_host_text_is_printed_literally_not_as_markup_or_emoji(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    """Text read from the host (the kernel release, interface names) went through rich markup: `[/x]` crashed the
    command (exit 3), `[bold]` vanished and `:fire:` printed an emoji."""
    root = host_tree(tmp_path, "dgx-h100")
    (root / "proc/sys/kernel/osrelease").write_text("5.15.0-[/x]-:fire:-\x1b[31m\n")
    (nic,) = root.glob("sys/bus/pci/devices/*/net/ibp24s0")
    nic.rename(nic.parent / "[bold]ib:fire:")
    code, out, err = run_cli(capsys, "topology", "plan", "--host-root", str(root))
    assert code == 0, err
    assert "kernel 5.15.0-[/x]-:fire:-\\x1b[31m, 2 NUMA node(s)" in out
    assert "GPU 0 0000:1b:00.0 H100-SXM5-80GB  CPUs 1-13,113-125  NIC [bold]ib:fire: (infiniband)" in out
    assert "\x1b" not in out and "\N{FIRE}" not in out


# -- the Ansible side: the filter turns FactsError into a task failure, parse_cpulist's refusals too


def load_filters():
    spec = importlib.util.spec_from_file_location("gpufleet_filters", REPO / "ansible/plugins/filter/gpufleet.py")
    filters = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(filters)
    return filters


def test_the_plan_filter_fails_with_the_file_on_contradicting_facts():
    from ansible.errors import AnsibleFilterError

    facts = read_host(str(HOSTS / "hgx-h200"), CATALOG_MAP)
    facts["gpus"][0]["numa_node"] = 7
    with pytest.raises(AnsibleFilterError, match=r"host h200: .*0000:19:00.0/numa_node: names NUMA node 7"):
        load_filters().gpufleet_topology_plan(facts, {}, "h200")


def test_the_cpus_filter_refuses_a_reversed_range():
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match=r"gpufleet_cpus: '7-0' is not a CPU list: the range 7-0 is reversed"):
        load_filters().gpufleet_cpus("7-0")
