"""verify.yml's report: one table for every host, the failures and skips under it, and what the NVIDIA checks read
means (ansible/plugins/filter/gpufleet_verify.py, pure functions)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("gpufleet_verify", REPO / "ansible/plugins/filter/gpufleet_verify.py")
verify = importlib.util.module_from_spec(spec)
spec.loader.exec_module(verify)


def ok(check: str) -> dict:
    return {"check": check, "status": "ok", "detail": ""}


def fail(check: str, detail: str) -> dict:
    return {"check": check, "status": "fail", "detail": detail}


def skip(check: str, why: str) -> dict:
    return {"check": check, "status": "skip", "detail": why}


def host(*results: dict, done: bool = True, unreachable: str = "", error: str = "") -> dict:
    return {"results": list(results), "done": done, "unreachable": unreachable, "error": error}


CONVERGED = host(
    ok("cmdline"), ok("hugepages"), skip("driver", "no NVIDIA GPU"), skip("dcgm", "dcgmi is not installed")
)
HUGEPAGES_CHANGED = host(
    ok("cmdline"),
    fail("hugepages", "NUMA node 0 has 10 hugepages of 2048 kB; the plan is 64"),
    skip("driver", "no NVIDIA GPU"),
    skip("dcgm", "dcgmi is not installed"),
)


def cells(lines: list[str], name: str) -> list[str]:
    return next(line.split() for line in lines if line.split()[:1] == [name])


# -- the table ----------------------------------------------------------------------------------------------------


def test_converged_hosts_pass_with_one_row_each_and_skips_explained():
    report = verify.report({"lab-1": CONVERGED, "lab-2": CONVERGED}, "gpufleet verify (lab-local)")
    assert report["ok"] is True and report["failed"] == []
    lines = report["lines"]
    assert lines[0] == "gpufleet verify (lab-local): all 2 ok"
    assert cells(lines, "host") == ["host", "result", "cmdline", "hugepages", "driver", "dcgm"]
    assert cells(lines, "lab-1") == ["lab-1", "ok", "ok", "ok", "skip", "skip"]
    assert "failures:" not in lines
    # a skip is never silent: its reason is listed once for every host it applies to
    assert "  driver on lab-1, lab-2: no NVIDIA GPU" in lines
    assert "  dcgm on lab-1, lab-2: dcgmi is not installed" in lines


def test_a_changed_hugepage_count_fails_the_report_and_names_host_check_and_message():
    report = verify.report({"lab-1": CONVERGED, "lab-2": HUGEPAGES_CHANGED})
    assert report["ok"] is False and report["failed"] == ["lab-2"]
    lines = report["lines"]
    assert lines[0] == "gpufleet verify: 1 of 2 host(s) failed"
    assert cells(lines, "lab-2") == ["lab-2", "FAIL", "ok", "FAIL", "skip", "skip"]
    assert cells(lines, "lab-1")[1] == "ok"
    failures = lines[lines.index("failures:") + 1 :]
    assert failures[0] == "  lab-2  hugepages: NUMA node 0 has 10 hugepages of 2048 kB; the plan is 64"
    assert report["summary"] == "1 of 2 host(s) failed verification: lab-2 (FAIL)"


def test_columns_line_up_under_their_headers():
    lines = verify.render({"a-very-long-host-name": HUGEPAGES_CHANGED, "b": CONVERGED})
    header = next(line for line in lines if line.startswith("host"))
    rule = lines[lines.index(header) + 1]
    rows = [line for line in lines if line.startswith(("a-very", "b "))]
    for column in ("result", "cmdline", "hugepages", "driver", "dcgm"):
        start = header.index(column)
        assert rule[start] == "-" and rule[start - 2 : start] == "  "
        for row in rows:
            assert row[start - 2 : start] == "  " and row[start] != " ", (column, row)


def test_checks_that_did_not_run_show_a_dash_not_ok():
    partial = host(ok("cmdline"), done=False)
    lines = verify.render({"lab-1": CONVERGED, "lab-2": partial})
    assert cells(lines, "lab-2") == ["lab-2", "INCOMPLETE", "ok", "-", "-", "-"]
    assert any("lab-2  its checks stopped before the end" in line for line in lines)
    assert verify.report({"lab-2": partial})["ok"] is False


def test_unreachable_host_fails_the_report_with_its_ssh_error():
    down = host(done=False, unreachable="Failed to connect to the host via ssh: Connection refused")
    report = verify.report({"lab-1": CONVERGED, "lab-2": down})
    assert report["ok"] is False and report["failed"] == ["lab-2"]
    assert cells(report["lines"], "lab-2") == ["lab-2", "UNREACHABLE", "-", "-", "-", "-"]
    assert "  lab-2  unreachable: Failed to connect to the host via ssh: Connection refused" in report["lines"]
    assert report["summary"].endswith("lab-2 (UNREACHABLE)")


def test_a_host_whose_facts_failed_is_reported_not_checked():
    broken = host(done=False, error="gpu_topology: no /sys/devices/system/node")
    report = verify.report({"lab-1": broken})
    assert report["ok"] is False
    assert cells(report["lines"], "lab-1")[:2] == ["lab-1", "ERROR"]
    assert "  lab-1  not checked: gpu_topology: no /sys/devices/system/node" in report["lines"]


def test_no_verified_host_is_a_failure_not_a_pass():
    report = verify.report({})
    assert report["ok"] is False
    assert "no host was verified" in report["lines"][0]


def test_a_host_with_no_facts_at_all_is_incomplete():
    # gpufleet_verify_report reads hostvars: a host that recorded nothing (it failed before its first check)
    report = verify.gpufleet_verify_report({"lab-1": {"gpufleet_verify_results": [ok("cmdline")],
                                                      "gpufleet_verify_done": True}, "lab-2": {}},
                                           ["lab-1", "lab-2"])  # fmt: skip
    assert report["failed"] == ["lab-2"]
    assert cells(report["lines"], "lab-2")[:2] == ["lab-2", "INCOMPLETE"]


def test_failure_details_are_one_line_each():
    multi = host(fail("cpu-pinning", "drop-in /etc/x,\n  systemd CPUAffinity [0, 1]"))
    lines = verify.render({"lab-1": multi})
    assert "  lab-1  cpu-pinning: drop-in /etc/x, systemd CPUAffinity [0, 1]" in lines


# -- what a failed task says --------------------------------------------------------------------------------------


def test_failure_message_of_an_assert_is_its_fail_msg():
    result = {"failed": True, "assertion": "x", "msg": "NUMA node 0 has 10 hugepages of 2048 kB; the plan is 64"}
    assert verify.gpufleet_verify_failure(result) == "NUMA node 0 has 10 hugepages of 2048 kB; the plan is 64"


def test_failure_message_of_a_loop_lists_each_failed_item():
    result = {
        "failed": True,
        "msg": "One or more items failed",
        "results": [
            {"failed": False, "msg": "All assertions passed"},
            {"failed": True, "msg": "NUMA node 0 has 10 hugepages"},
            {"failed": True, "msg": "NUMA node 1 has 0 hugepages"},
        ],
    }
    assert verify.gpufleet_verify_failure(result) == "NUMA node 0 has 10 hugepages; NUMA node 1 has 0 hugepages"


def test_failure_message_of_a_command_carries_its_stderr():
    result = {"failed": True, "msg": "Task failed: non-zero return code", "rc": 1, "stderr": "no such file\n"}
    assert verify.gpufleet_verify_failure(result) == "non-zero return code: no such file"
    assert verify.gpufleet_verify_failure(None) == "failed (no message)"


@pytest.mark.parametrize(
    ("stdout", "rc", "expected"),
    [
        ("0, Enabled\n1, Enabled\n", 0, []),
        (
            "0, Enabled\n1, Disabled\n2, Disabled\n",
            0,
            ["persistence mode is off on GPU 1 (Disabled), GPU 2 (Disabled)"],
        ),
        ("", 0, ["nvidia-smi lists no GPU"]),
        (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
            9,
            ["nvidia-smi failed (rc 9): NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."],
        ),
    ],
)
def test_persistence_mode_must_be_enabled_on_every_gpu(stdout: str, rc: int, expected: list[str]):
    assert verify.gpufleet_persistence_mismatches(stdout, rc) == expected


# -- DCGM ---------------------------------------------------------------------------------------------------------

DCGM_PASS = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 580.95.05                                      |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| CUDA Main Library         | Pass                                           |
| Persistence Mode          | Pass                                           |
| Environment Variables     | Pass                                           |
+---------------------------+------------------------------------------------+
"""

DCGM_FAIL = DCGM_PASS.replace(
    "| Persistence Mode          | Pass                                           |\n",
    "| Persistence Mode          | Fail                                           |\n"
    "| Error                     | Persistence mode for GPU 0 is currently disab  |\n"
    "|                           | led. The DCGM diagnostic requires peristence   |\n"
    "|                           | mode to be enabled.                            |\n",
)


def test_dcgm_diag_that_passes_has_no_failures():
    assert verify.gpufleet_dcgm_failures(DCGM_PASS, 0) == []


def test_dcgm_diag_failure_names_the_test_and_its_error_unwrapped():
    assert verify.gpufleet_dcgm_failures(DCGM_FAIL, 226) == [
        "Persistence Mode: Fail (Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic requires "
        "peristence mode to be enabled.)"
    ]


def test_dcgm_diag_that_cannot_run_reports_its_exit_status():
    problems = verify.gpufleet_dcgm_failures("Error: unable to establish a connection to the host engine.", 255)
    assert problems == ["dcgmi diag -r 1 failed (rc 255): Error: unable to establish a connection to the host engine."]


# DCGM 3.x and later print the GPUs a result is about after it
DCGM_FAIL_ON_GPU = DCGM_PASS.replace(
    "| Persistence Mode          | Pass                                           |\n",
    "| Persistence Mode          | Fail - GPU: 1                                  |\n"
    "| Warning                   | GPU 1 Persistence mode is disabled.            |\n",
)


def test_dcgm_diag_tests_are_each_test_with_its_result_and_why_not_the_metadata():
    assert verify.gpufleet_dcgm_tests(DCGM_FAIL) == [
        {"test": "Denylist", "result": "Pass", "detail": ""},
        {"test": "NVML Library", "result": "Pass", "detail": ""},
        {"test": "CUDA Main Library", "result": "Pass", "detail": ""},
        {
            "test": "Persistence Mode",
            "result": "Fail",
            "detail": "Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic requires peristence mode "
            "to be enabled.",
        },
        {"test": "Environment Variables", "result": "Pass", "detail": ""},
    ]


def test_dcgm_diag_failure_on_one_gpu_is_a_failure():
    assert verify.gpufleet_dcgm_failures(DCGM_FAIL_ON_GPU, 226, "", 3) == [
        "Persistence Mode: Fail - GPU: 1 (GPU 1 Persistence mode is disabled.)"
    ]


def test_dcgm_diag_that_cannot_run_names_the_level_it_ran():
    problems = verify.gpufleet_dcgm_failures("", 255, "unable to connect", 3)
    assert problems == ["dcgmi diag -r 3 failed (rc 255): unable to connect"]


def test_the_report_document_has_each_hosts_verdict_checks_and_dcgm_tests():
    dcgm = {"level": 2, "tests": verify.gpufleet_dcgm_tests(DCGM_PASS)}
    states = {
        "gpu-1": host(ok("cmdline"), ok("dcgm")) | {"dcgm": dcgm},
        "gpu-2": host(ok("cmdline"), fail("dcgm", "Memory: Fail")) | {"dcgm": {"level": 2, "tests": []}},
        "cpu-1": host(ok("cmdline"), skip("dcgm", "no NVIDIA GPU")),
        "gone": host(done=False, unreachable="ssh: connect to host gone port 22: Connection refused"),
    }
    made = verify.report(states, "t", "prod-eastus", "2026-11-27T09:00:00Z")
    doc = made["document"]
    assert (doc["stack"], doc["time"], doc["ok"]) == ("prod-eastus", "2026-11-27T09:00:00Z", False)
    assert {h: v["result"] for h, v in doc["hosts"].items()} == {
        "gpu-1": "ok", "gpu-2": "FAIL", "cpu-1": "ok", "gone": "UNREACHABLE"
    }  # fmt: skip
    assert doc["hosts"]["gpu-1"]["dcgm"] == dcgm and doc["hosts"]["cpu-1"]["dcgm"] is None
    assert doc["hosts"]["gpu-2"]["checks"]["dcgm"] == {"status": "fail", "detail": "Memory: Fail"}
    assert doc["hosts"]["gone"]["detail"].startswith("ssh: connect to host gone")
    assert made["failed"] == ["gpu-2", "gone"]  # the table and the document say the same
