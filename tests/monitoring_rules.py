"""promtool for the monitoring tests: ``promtool check rules`` and ``promtool test rules`` on gpufleet's generated
rules, and a unit test per alert built from the same plan (a series that must fire it, one that must not)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpufleet.kube.monitoring import ACTIVITY, IDLE_HOURS, PRESENT

PROMTOOL_SECONDS = 120


def promtool() -> str:
    """The promtool ``make setup`` installed into the virtualenv (scripts/install_promtool.sh), else one on PATH."""
    beside = Path(sys.executable).parent / "promtool"
    found = str(beside) if beside.is_file() else shutil.which("promtool")
    assert found, "promtool is not installed: run make setup (scripts/install_promtool.sh)"
    return found


def run_promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=PROMTOOL_SECONDS, check=False,
    )  # fmt: skip


def write_rules(groups: list[dict[str, Any]], directory: Path) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


GPU = {"gpu": "0", "UUID": "GPU-0f1e2d3c", "modelName": "NVIDIA H100 80GB HBM3", "node": "aks-node-0"}


@dataclass(frozen=True)
class Case:
    """One alert's unit test: series that fire it and series that do not, at ``eval_time``."""

    rule: dict[str, Any]
    firing: list[tuple[str, dict[str, str], str]]  # (metric, labels, promtool values)
    quiet: list[tuple[str, dict[str, str], str]]
    eval_time: str
    labels: dict[str, str]  # the firing alert's labels (the expression's output labels and the rule's)
    value: float  # the firing alert's $value

    def annotations(self) -> dict[str, str]:
        """The rule's annotations expanded the way Prometheus's templates do for this alert."""

        def expand(text: str) -> str:
            text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: self.labels[m.group(1)], text)
            text = text.replace("{{ $value | humanizePercentage }}", f"{self.value * 100:.4g}%")
            return text.replace("{{ $value }}", f"{self.value:g}")

        return {k: expand(v) for k, v in self.rule["annotations"].items()}


def _series(items: list[tuple[str, dict[str, str], str]]) -> list[dict[str, str]]:
    out = []
    for metric, labels, values in items:
        inner = ", ".join(f'{k}="{v}"' for k, v in labels.items())
        out.append({"series": f"{metric}{{{inner}}}", "values": values})
    return out


def unit_tests(case: Case) -> list[dict[str, Any]]:
    """promtool's tests of one case: the alert fires with its labels and annotations, and stays quiet."""
    name = case.rule["alert"]
    fired = {"exp_labels": case.labels, "exp_annotations": case.annotations()}
    test = {"interval": "1m", "alert_rule_test": [{"eval_time": case.eval_time, "alertname": name}]}
    return [
        {**test, "input_series": _series(case.firing),
         "alert_rule_test": [{"eval_time": case.eval_time, "alertname": name, "exp_alerts": [fired]}]},
        {**test, "input_series": _series(case.quiet),
         "alert_rule_test": [{"eval_time": case.eval_time, "alertname": name, "exp_alerts": []}]},
    ]  # fmt: skip


def _gpu(pool: str) -> dict[str, str]:
    return {**GPU, "pool": pool}


def _health_case(rule: dict[str, Any], pool: str) -> Case:
    """The health alerts: one GPU's counters or gauges, faulty and healthy."""
    name, labels = rule["alert"], _gpu(pool)
    out = {**labels, **rule["labels"]}
    counter = {  # name: (metric, firing values, quiet values, eval time, $value)
        "GpuFallenOffBus": ("DCGM_FI_DEV_XID_ERRORS", "0 0 79 79 79 79", "0 0 13 13 13 13", "5m", 79.0),
        "GpuDoubleBitEccErrors": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0 0 0 2 2 2 2", "0x6", "6m", 2.0),
        "GpuRowRemapFailure": ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "0 1 1 1", "0 0 0 0", "3m", 1.0),
        # 30 s of every minute held down: 50 % of the time; 1 s of every minute: under 2 %
        "GpuThermalThrottling": ("DCGM_FI_DEV_THERMAL_VIOLATION", "0+30000000000x30", "0+1000000000x30", "20m", 0.5),
        "GpuPowerThrottling": ("DCGM_FI_DEV_POWER_VIOLATION", "0+30000000000x30", "0+1000000000x30", "20m", 0.5),
        "GpuNvlinkErrors": ("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "0 0 0 5 5 5", "0x5", "5m", 0.0),
    }
    metric, bad, good, at, value = counter[name]
    return Case(rule, [(metric, labels, bad)], [(metric, labels, good)], at, out, value)


def _idle_case(rule: dict[str, Any]) -> Case:
    pool = rule["labels"]["pool"]
    minutes = (IDLE_HOURS + 1) * 60
    labels = _gpu(pool)
    out = {"node": labels["node"], "pool": pool, **rule["labels"]}
    return Case(
        rule, [(ACTIVITY, labels, f"0x{minutes}")], [(ACTIVITY, labels, f"0.5x{minutes}")], f"{minutes}m", out, 0.0
    )


def _mig_case(rule: dict[str, Any], layout: dict[str, int]) -> Case:
    """A node whose MIG instances are the plan's (quiet), and one with an instance of ``rule``'s profile missing."""
    pool, profile = rule["labels"]["pool"], rule["labels"]["profile"]

    def node(missing: int) -> list[tuple[str, dict[str, str], str]]:
        series = [(PRESENT, _gpu(pool), "60x50")]
        for name, count in layout.items():
            for i in range(count - (missing if name == profile else 0)):
                labels = {**_gpu(pool), "gpu": str(i % 8), "GPU_I_PROFILE": name, "GPU_I_ID": str(i)}
                series.append((ACTIVITY, labels, "0.3x50"))
        return series

    out = {"node": GPU["node"], "pool": pool, **rule["labels"]}
    return Case(rule, node(1), node(0), "45m", out, float(layout[profile] - 1))


def cases(groups: list[dict[str, Any]], mig_layouts: dict[str, dict[str, int]], pool: str) -> list[Case]:
    """A case for every alerting rule of ``groups`` (``pool``: where the cluster-wide alerts' GPU sits)."""
    out = []
    for group in groups:
        for rule in group["rules"]:
            if rule["alert"] == "GpuNodeIdle":
                out.append(_idle_case(rule))
            elif rule["alert"] == "GpuMigLayoutDrift":
                out.append(_mig_case(rule, mig_layouts[rule["labels"]["pool"]]))
            else:
                out.append(_health_case(rule, pool))
    return out


def write_tests(cases_: list[Case], rules: Path) -> Path:
    """One promtool test file for ``cases_``, beside ``rules``. Rules sharing an alert name (one per pool) are tested
    one case at a time, since promtool checks every alert of that name."""
    tests = [t for case in cases_ for t in unit_tests(case)]
    path = rules.parent / "rules_test.yaml"
    doc = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
