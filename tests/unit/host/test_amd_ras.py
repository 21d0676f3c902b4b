"""The AMD RAS reader (gpufleet/host/amd_ras.py): an AMD GPU's error counts and bad VRAM pages read from the files the
amdgpu driver writes (a tree in their shape, tests/fixtures/amd-ras, see its SOURCE), every other file and every
other device left alone, nothing guessed from a file it cannot read, and the module fit to ship to a host (standard
library only, Python 3.8, a script that prints its reading)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time

import pytest

from gpufleet.host.amd_ras import MAX_BYTES, parse_bad_pages, parse_counts, read_ras
from tests.conftest import FIXTURES, REPO

RAS = FIXTURES / "amd-ras" / "mi300x-faults"
MODULE = REPO / "gpufleet" / "host" / "amd_ras.py"


def test_the_fixture_reads_gpu_by_gpu():
    gpus = {g["pci"]: g for g in read_ras(str(RAS))["gpus"]}
    assert list(gpus) == ["0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0"]  # the NIC is no GPU
    sound = gpus["0000:05:00.0"]
    assert sound["counters"] == {
        "gfx": {"ue": 0, "ce": 0, "de": 0},
        "sdma": {"ue": 0, "ce": 0, "de": 0},
        "umc": {"ue": 0, "ce": 2, "de": 0},
    }  # features, version, schema: not counts
    assert sound["bad_pages"] == [{"pfn": "0x00001234", "size": "0x00001000", "flag": "reserved"}]
    assert sound["problems"] == []
    faulty = gpus["0000:26:00.0"]
    assert faulty["counters"]["umc"] == {"ue": 1, "ce": 5, "de": 0}
    assert [p["flag"] for p in faulty["bad_pages"]] == ["reserved", "pending", "failed"]
    resetting = gpus["0000:46:00.0"]
    assert resetting["counters"] == {"xgmi_wafl": {"ue": 0, "ce": 0}}  # the two-line format
    assert resetting["problems"] == ["ras/umc_err_count the driver says: Query currently inaccessible"]
    assert resetting["bad_pages"] == []
    assert gpus["0000:65:00.0"] == {"pci": "0000:65:00.0", "ras": False}


def test_the_kernels_count_lines_parse_and_anything_else_is_refused():
    assert parse_counts("ue: 3\nce: 12\n") == {"ue": 3, "ce": 12}
    assert parse_counts("ue: 0\nce: 1\nde: 2\n") == {"ue": 0, "ce": 1, "de": 2}
    for bad in ("Query currently inaccessible\n", "ue: 1\n", "ue: 1\nue: 2\nce: 0\n", "ue: -1\nce: 0\n", "garbage"):
        with pytest.raises(ValueError):
            parse_counts(bad)


def test_the_kernels_bad_page_lines_parse_and_anything_else_is_refused():
    # amdgpu_ras_sysfs_badpages_read: "0x%08x : 0x%08x : %1s\n"
    assert parse_bad_pages("0x0000ABCD : 0x00001000 : F\n") == [
        {"pfn": "0x0000abcd", "size": "0x00001000", "flag": "failed"}
    ]
    assert parse_bad_pages("") == []
    for bad in ("0x1 : 0x1000 : X\n", "1 : 2 : R\n", "0x1 0x1000 R\n"):
        with pytest.raises(ValueError):
            parse_bad_pages(bad)


def _gpu(root, pci: str = "0000:05:00.0"):
    device = root / "sys" / "bus" / "pci" / "devices" / pci
    (device / "ras").mkdir(parents=True)
    (device / "vendor").write_text("0x1002\n")
    (device / "class").write_text("0x120000\n")
    return device / "ras"


def test_a_fifo_in_place_of_a_count_is_reported_without_waiting(tmp_path):
    ras = _gpu(tmp_path)
    os.mkfifo(ras / "umc_err_count")
    (ras / "gfx_err_count").write_text("ue: 0\nce: 0\n")
    started = time.monotonic()
    (gpu,) = read_ras(str(tmp_path))["gpus"]
    assert time.monotonic() - started < 5
    assert gpu["counters"] == {"gfx": {"ue": 0, "ce": 0}}
    assert gpu["problems"] == ["ras/umc_err_count is not a regular file"]
    assert gpu["bad_pages"] is None  # no list: the driver keeps none (amdgpu.bad_page_threshold=0)


def test_an_oversized_or_binary_file_is_reported(tmp_path):
    ras = _gpu(tmp_path)
    (ras / "gpu_vram_bad_pages").write_bytes(b"0x00000001 : 0x00001000 : R\n" * (MAX_BYTES // 28 + 10))
    (ras / "umc_err_count").write_bytes(b"ue: \xff\n")
    (gpu,) = read_ras(str(tmp_path))["gpus"]
    assert gpu["problems"] == [
        "ras/umc_err_count is not UTF-8 text",
        f"ras/gpu_vram_bad_pages is larger than {MAX_BYTES // 1024} KiB",
    ]


def test_other_vendors_and_no_devices_read_as_no_gpu(tmp_path):
    nvidia = tmp_path / "sys" / "bus" / "pci" / "devices" / "0000:41:00.0"
    (nvidia / "ras").mkdir(parents=True)
    (nvidia / "vendor").write_text("0x10de\n")
    (nvidia / "class").write_text("0x030200\n")
    assert read_ras(str(tmp_path)) == {"gpus": []}
    assert read_ras(str(tmp_path / "nowhere")) == {"gpus": []}


def test_run_as_a_script_it_prints_its_reading():
    done = subprocess.run([sys.executable, str(MODULE), str(RAS)], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == read_ras(str(RAS))


def test_it_imports_only_the_standard_library_and_parses_as_python_3_8():
    source = MODULE.read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
