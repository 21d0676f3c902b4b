"""The lab's test double of nvidia-smi / nvidia-mig-parted refuses what a GPU refuses, and its fault injection
leaves a half-applied layout (what the mig role's rollback must repair)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpufleet import mig
from tests.lab.standins import FAKE_NVIDIA, fake_gpu_state

CONFIG = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "balanced": [
            {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
            {"devices": [1], "mig-enabled": True, "mig-devices": {"3g.40gb": 2}},
        ],
        "impossible": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "1g.10gb": 1}}],
    },
}


@pytest.fixture
def gpu_dir(tmp_path: Path, catalog) -> Path:
    (tmp_path / "state.json").write_text(json.dumps(fake_gpu_state(catalog, "H100-SXM5-80GB", 2)))
    (tmp_path / "config.yaml").write_text(json.dumps(CONFIG))
    for tool in ("nvidia-smi", "nvidia-mig-parted"):
        (tmp_path / tool).symlink_to(FAKE_NVIDIA)
    return tmp_path


def run(gpu_dir: Path, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPUFLEET_FAKE_GPU_DIR": str(gpu_dir)}
    return subprocess.run(
        [sys.executable, str(gpu_dir / tool), *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_apply_then_assert(gpu_dir: Path):
    config = str(gpu_dir / "config.yaml")
    assert run(gpu_dir, "nvidia-mig-parted", "assert", "-f", config, "-c", "balanced").returncode == 1
    assert run(gpu_dir, "nvidia-mig-parted", "apply", "-f", config, "-c", "balanced").returncode == 0
    assert run(gpu_dir, "nvidia-mig-parted", "assert", "-f", config, "-c", "balanced").returncode == 0
    modes = run(gpu_dir, "nvidia-smi", "--query-gpu=index,name,mig.mode.current", "--format=csv,noheader")
    assert modes.stdout.splitlines() == ["0, NVIDIA H100 80GB HBM3, Enabled", "1, NVIDIA H100 80GB HBM3, Enabled"]
    listing = run(gpu_dir, "nvidia-smi", "-L").stdout
    assert listing.count("MIG 3g.40gb") == 3 and listing.count("MIG 1g.10gb") == 2


def test_an_impossible_layout_is_refused_and_changes_nothing(gpu_dir: Path):
    before = (gpu_dir / "state.json").read_text()
    result = run(gpu_dir, "nvidia-mig-parted", "apply", "-f", str(gpu_dir / "config.yaml"), "-c", "impossible")
    assert result.returncode == 1 and "no placement" in result.stderr
    assert (gpu_dir / "state.json").read_text() == before


def test_injected_failure_leaves_a_half_applied_layout(gpu_dir: Path):
    config = str(gpu_dir / "config.yaml")
    (gpu_dir / "fail-next-apply").touch()
    assert run(gpu_dir, "nvidia-mig-parted", "apply", "-f", config, "-c", "balanced").returncode == 1
    exported = json.loads(run(gpu_dir, "nvidia-mig-parted", "export").stdout)["mig-configs"]["current"]
    assert [g["mig-enabled"] for g in exported] == [True, False]  # GPU 0 changed, GPU 1 not
    assert run(gpu_dir, "nvidia-mig-parted", "assert", "-f", config, "-c", "balanced").returncode == 1
    # the injection is one-shot: restoring the previous layout works
    assert run(gpu_dir, "nvidia-mig-parted", "apply", "-f", config, "-c", "all-disabled").returncode == 0
    assert run(gpu_dir, "nvidia-mig-parted", "assert", "-f", config, "-c", "all-disabled").returncode == 0


def test_the_double_agrees_with_the_planner_on_every_small_multiset(catalog):
    """Two independent placement searches (the double's and gpufleet.mig.check) must agree, so the double
    enforces the catalog's rules rather than its own idea of them."""
    sys.path.insert(0, str(FAKE_NVIDIA.parent))
    try:
        import fake_nvidia
    finally:
        sys.path.pop(0)
    for model in ("H100-SXM5-80GB", "A30-24GB"):
        gpu = catalog.gpu(model)
        state = fake_gpu_state(catalog, model, 1)
        names = [p.name for p in gpu.mig.profiles]
        for size in range(1, 5):
            for combo in itertools.combinations_with_replacement(names, size):
                wanted = {n: combo.count(n) for n in set(combo)}
                try:
                    fake_nvidia.place(gpu.name, wanted, state)
                    fits = True
                except fake_nvidia.Refused:
                    fits = False
                assert fits == mig.check(gpu, wanted).fits, (model, wanted)


def test_entries_for_another_gpu_model_are_skipped_like_mig_parted_does(gpu_dir: Path, catalog):
    from tests.lab.standins import lab_mig_config

    config = lab_mig_config(catalog)  # written by gpufleet's mig outputs, with H100 device filters
    config["mig-configs"]["a100-only"] = [
        {"device-filter": ["0x20B010DE"], "devices": "all", "mig-enabled": True, "mig-devices": {"7g.40gb": 1}}
    ]
    path = gpu_dir / "lab.yaml"
    path.write_text(json.dumps(config))
    assert run(gpu_dir, "nvidia-mig-parted", "apply", "-f", str(path), "-c", "a100-only").returncode == 0
    exported = json.loads(run(gpu_dir, "nvidia-mig-parted", "export").stdout)["mig-configs"]["current"]
    assert [g["mig-enabled"] for g in exported] == [False, False]  # nothing matched the H100s
    assert run(gpu_dir, "nvidia-mig-parted", "apply", "-f", str(path), "-c", "h100-balanced").returncode == 0
    assert run(gpu_dir, "nvidia-mig-parted", "assert", "-f", str(path), "-c", "h100-balanced").returncode == 0
