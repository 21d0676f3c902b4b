"""The lab's TEST DOUBLE of the amdgpu driver's partition files and of amd-smi (tests/lab/standins/fake_amd.py)
behaves as the kernel and AMD document (../shared/reference/amd-instinct.md sections 1 and 2): a compute write
applies at once or is refused (EINVAL) for a pair the MI300X does not run, a memory write only records a request
that a driver reload applies, and the reload puts every GPU in the driver's compute mode for its memory mode. It is
run as the lab runs it: as a process (``amd-smi``, ``fake_amd.py reload``) on a tree in a temporary directory.

(Its natural home is tests/unit/lab beside test_fake_nvidia.py; it lives here with the other AMD host tests.)"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet.host.hostfacts import amd_gpu_partitions
from tests.lab.standins import FAKE_AMD

COMPUTE = ("SPX", "DPX", "QPX", "CPX")
MEMORY = ("NPS1", "NPS2", "NPS4")
# the amdgpu driver's rule on MI300X (fact sheet section 1): compute mode -> the memory modes it runs with
MI300X_PAIRS = {"SPX": {"NPS1"}, "DPX": {"NPS1", "NPS2"}, "QPX": {"NPS1", "NPS4"}, "CPX": {"NPS1", "NPS4"}}
OFFERED_MEMORY = {"NPS1", "NPS4"}  # the double's available_memory_partition (the lab's MI300X)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    assert run(root, "build", "--gpus", "2").returncode == 0
    return root


def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``fake_amd.py ARGS`` (``amd-smi ARGS`` when the first is amd-smi: the double by that name) on the tree
    ``root``."""
    if not (root.parent / "amd-smi").exists():
        root.parent.mkdir(parents=True, exist_ok=True)
        (root.parent / "amd-smi").symlink_to(FAKE_AMD)
    tool = [str(root.parent / "amd-smi"), *args[1:]] if args[:1] == ("amd-smi",) else [str(FAKE_AMD), *args]
    return subprocess.run(
        [sys.executable, *tool],
        env={**os.environ, "GPUFLEET_FAKE_AMD_SYSFS": str(root)},
        capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL, timeout=60,
    )  # fmt: skip


def modes(root: Path) -> list[tuple[str, str]]:
    """(compute, memory) of each GPU as its files show them, read by gpufleet's own reader."""
    return [(g["partition"]["compute"], g["partition"]["memory"]) for g in amd_gpu_partitions(str(root))]


def state(root: Path) -> dict:
    return json.loads((root.parent / "state.json").read_text())


def smi_view(root: Path) -> list[tuple[int, str, str, int]]:
    """(GPU, compute, memory, partition id) of each entry of ``amd-smi static --partition``."""
    proc = run(root, "amd-smi", "static", "--partition")
    assert proc.returncode == 0, proc.stderr
    entries = []
    for block in proc.stdout.strip().split("\n\n"):
        fields = dict(line.strip().split(": ", 1) for line in block.splitlines() if ": " in line)
        entries.append((int(fields["GPU"]), fields["COMPUTE_PARTITION"], fields["MEMORY_PARTITION"],
                        int(fields["PARTITION_ID"])))  # fmt: skip
    return entries


def test_the_tree_is_what_gpufleets_reader_and_amd_smi_see(sysfs: Path):
    found = amd_gpu_partitions(str(sysfs))
    assert [(g["pci"], g["device"]) for g in found] == [("0000:05:00.0", "74a1"), ("0000:25:00.0", "74a1")]
    assert found[0]["partition"] == {
        "compute": "SPX",
        "memory": "NPS1",
        "available_compute": ["SPX", "DPX", "QPX", "CPX"],
        "available_memory": ["NPS1", "NPS4"],
    }
    assert smi_view(sysfs) == [(0, "SPX", "NPS1", 0), (1, "SPX", "NPS1", 0)]


@pytest.mark.parametrize(("compute", "memory"), list(itertools.product(COMPUTE, ["NPS1", "NPS4"])))
def test_a_compute_write_applies_at_once_only_for_a_pair_the_mi300x_runs(tmp_path: Path, compute: str, memory: str):
    """From each memory mode the double offers (reached by a reload), a compute write either switches the GPU or
    is refused with EINVAL and changes nothing: exactly the driver's pairs."""
    root = tmp_path / "sys"
    start = "SPX" if memory == "NPS1" else "CPX"
    assert run(root, "build", "--gpus", "1", "--compute", start, "--memory", memory).returncode == 0
    proc = run(root, "write", "0000:05:00.0", "compute", compute.lower())  # the kernel takes any case
    if memory in MI300X_PAIRS[compute]:
        assert proc.returncode == 0, proc.stderr
        assert modes(root) == [(compute, memory)]
    else:
        assert proc.returncode == 1
        assert proc.stderr.strip() == f"error: Invalid argument: 0000:05:00.0: {compute} does not run with memory" \
            f" partition {memory}"  # fmt: skip
        assert modes(root) == [(start, memory)]


def test_the_double_refuses_to_build_a_pair_the_mi300x_does_not_run(tmp_path: Path):
    proc = run(tmp_path / "sys", "build", "--compute", "SPX", "--memory", "NPS4")
    assert proc.returncode != 0 and "SPX with NPS4 is no MI300X partition mode" in proc.stderr


@pytest.mark.parametrize(("memory", "auto"), [("NPS4", "CPX"), ("NPS1", "SPX")])
def test_a_memory_write_is_only_a_request_until_a_reload_applies_it_with_the_drivers_compute_mode(
    tmp_path: Path, memory: str, auto: str
):
    root = tmp_path / "sys"
    other = "NPS1" if memory == "NPS4" else "NPS4"
    assert run(root, "build", "--gpus", "2", "--compute", "CPX", "--memory", other).returncode == 0
    assert run(root, "write", "0000:05:00.0", "memory", memory).stdout.strip() == (
        "0000:05:00.0: NPS mode change requested, please remove and reload the driver"
    )
    assert modes(root) == [("CPX", other)] * 2  # the file still shows the current mode
    assert smi_view(root)[0][2] == other
    reloaded = run(root, "reload")
    assert reloaded.returncode == 0, reloaded.stderr
    # the hive's request: both GPUs, each in the driver's compute mode for it (NPS4 -> CPX, NPS1 -> SPX)
    assert modes(root) == [(auto, memory)] * 2
    assert state(root)["gpus"][0]["requested_memory"] is None


def test_a_reload_without_a_request_puts_every_gpu_back_in_the_default_compute_mode(tmp_path: Path):
    """AMD: the GPU "will always revert back to this default SPX mode when ... the amdgpu driver is unloaded and
    reloaded"."""
    root = tmp_path / "sys"
    assert run(root, "build", "--gpus", "2", "--compute", "CPX", "--memory", "NPS1").returncode == 0
    assert run(root, "reload").returncode == 0
    assert modes(root) == [("SPX", "NPS1")] * 2


def test_a_memory_mode_the_gpu_does_not_offer_is_refused(sysfs: Path):
    for mode in ("NPS2", "NPS8", "bogus"):  # NPS2 is not in this MI300X's available_memory_partition
        proc = run(sysfs, "write", "0000:05:00.0", "memory", mode)
        assert proc.returncode == 1 and "Invalid argument" in proc.stderr, mode
    assert run(sysfs, "reload").returncode == 0
    assert modes(sysfs) == [("SPX", "NPS1")] * 2


def test_writes_to_the_plain_files_are_taken_as_the_kernel_would_have_taken_them(sysfs: Path):
    """What a role writes into the files directly: a refused compute mode is put back, a memory mode becomes the
    request and the file shows the current mode again (at the double's next run)."""
    gpu0, gpu1 = (sysfs / "bus/pci/devices" / pci for pci in ("0000:05:00.0", "0000:25:00.0"))
    (gpu0 / "current_compute_partition").write_text("CPX\n")  # runs with NPS1: applied
    (gpu1 / "current_memory_partition").write_text("NPS4\n")  # a request
    assert smi_view(sysfs)[0] == (0, "CPX", "NPS1", 0)
    assert modes(sysfs) == [("CPX", "NPS1"), ("SPX", "NPS1")]
    assert [g["requested_memory"] for g in state(sysfs)["gpus"]] == ["NPS4", "NPS4"]  # the hive's
    (gpu1 / "current_compute_partition").write_text("bogus\n")
    assert run(sysfs, "sync").returncode == 0
    assert modes(sysfs)[1] == ("SPX", "NPS1")
    assert state(sysfs)["log"][-1] == "refused current_compute_partition 'bogus': Invalid argument: 0000:25:00.0:" \
        " 'bogus' is no compute partition mode of this GPU"  # fmt: skip
    assert run(sysfs, "reload").returncode == 0
    assert modes(sysfs) == [("CPX", "NPS4")] * 2


def test_amd_smi_lists_secondary_partitions_after_their_gpu(sysfs: Path):
    assert run(sysfs, "amd-smi", "set", "--gpu", "1", "--compute-partition", "DPX").returncode == 0
    assert run(sysfs, "amd-smi", "set", "--gpu", "0", "--compute-partition", "QPX").returncode == 0
    assert smi_view(sysfs) == [
        (0, "QPX", "NPS1", 0), (1, "QPX", "NPS1", 1), (2, "QPX", "NPS1", 2), (3, "QPX", "NPS1", 3),
        (4, "DPX", "NPS1", 0), (5, "DPX", "NPS1", 1),
    ]  # fmt: skip
    # a set on a secondary partition is refused: set calls work on the primary partition only
    proc = run(sysfs, "amd-smi", "set", "--gpu", "5", "--compute-partition", "SPX")
    assert proc.returncode == 1 and "GPU 5 is partition 1 of 0000:25:00.0: set the primary" in proc.stderr
    assert modes(sysfs) == [("QPX", "NPS1"), ("DPX", "NPS1")]


def test_amd_smi_set_memory_partition_records_it_for_the_next_reload(sysfs: Path):
    proc = run(sysfs, "amd-smi", "set", "--memory-partition", "NPS4")
    assert proc.returncode == 0, proc.stderr
    assert "takes effect after a driver reload" in proc.stdout
    assert modes(sysfs) == [("SPX", "NPS1")] * 2
    assert run(sysfs, "amd-smi", "set", "--gpu", "all", "--compute-partition", "SPX").returncode == 0
    assert run(sysfs, "reload").returncode == 0
    assert smi_view(sysfs) == [(i, "CPX", "NPS4", i % 8) for i in range(16)]
    # SPX fails while NPS4 is active (AMD's troubleshooting guide): return to NPS1 first
    refused = run(sysfs, "amd-smi", "set", "--gpu", "all", "--compute-partition", "SPX")
    assert refused.returncode == 1 and "SPX does not run with memory partition NPS4" in refused.stderr


def test_amd_smi_says_what_it_does_not_do(sysfs: Path):
    proc = run(sysfs, "amd-smi", "metric", "--ecc")
    assert proc.returncode == 2 and "TEST DOUBLE" in proc.stderr
