"""Controller-side filters of ``ansible/playbooks/verify.yml``: what each NVIDIA and AMD check reads means (the AMD
ones also judge the ``amd_driver`` and ``amd_partition`` roles' verify tasks), what a failed check says, and the one
table that reports every host.

Each host records, as facts, a list of results ``{check, status, detail}`` (``status``: ``ok``, ``fail`` or ``skip``,
``detail``: the failure message or why the check does not apply), ``gpufleet_verify_unreachable`` or
``gpufleet_verify_error`` when it could not be checked at all, ``gpufleet_verify_done`` once every check ran, and
``gpufleet_verify_dcgm`` (``{level, tests}``) once its DCGM diagnostic ran.
The functions here are pure: the table is the same text whatever runs them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpufleet.common.plaindata import plain_data

CELL = {"ok": "ok", "fail": "FAIL", "skip": "skip"}


def _oneline(text: Any) -> str:
    return " ".join(str(text or "").split())


# -- what a failed check says -----------------------------------------------------------------------------------


def _message(result: Mapping[str, Any]) -> str:
    msg = _oneline(result.get("msg"))
    msg = re.sub(r"^(Task|Action) failed: ", "", msg)
    extra = _oneline(result.get("stderr"))
    if extra and extra not in msg:
        msg = f"{msg}: {extra}" if msg else extra
    return msg


def gpufleet_verify_failure(result: Any) -> str:
    """The message of a failed task (``ansible_failed_result`` in a rescue), on one line: an assert's ``fail_msg``,
    each failed loop item's message, or a command's ``msg: stderr``."""
    result = plain_data(result) if result is not None else {}
    if not isinstance(result, dict):
        return _oneline(result) or "failed"
    items = [r for r in result.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    messages = [_message(r) for r in items] or [_message(result)]
    return "; ".join(dict.fromkeys(m for m in messages if m)) or "failed (no message)"


# -- what the NVIDIA checks read --------------------------------------------------------------------------------


def gpufleet_persistence_mismatches(stdout: str, rc: int = 0, error: str = "") -> list[str]:
    """The GPUs whose persistence mode is not Enabled, from ``nvidia-smi --query-gpu=index,persistence_mode
    --format=csv,noheader``; empty when every GPU has it."""
    if int(rc or 0) != 0:
        return [f"nvidia-smi failed (rc {rc}): {_oneline(error) or _oneline(stdout) or 'no output'}"]
    rows = [[f.strip() for f in line.split(",")] for line in str(stdout or "").splitlines() if line.strip()]
    if not rows:
        return ["nvidia-smi lists no GPU"]
    off = [f"GPU {r[0]} ({r[-1]})" for r in rows if r[-1] != "Enabled"]
    return [f"persistence mode is off on {', '.join(off)}"] if off else []


def _dcgm_rows(stdout: str) -> list[tuple[str, str]]:
    """``| name | value |`` rows of dcgmi's table. dcgmi cuts a long value into chunks of the column's width, on
    continuation rows (empty name): a chunk shorter than the widest one ended in a space, which the padding hides."""
    rows: list[tuple[str, list[str]]] = []
    for line in str(stdout or "").splitlines():
        cells = line.split("|")
        if len(cells) != 4 or cells[1].startswith("-"):
            continue
        name, chunk = cells[1].strip(), cells[2].removeprefix(" ").rstrip()
        if name:
            rows.append((name, [chunk.strip()]))
        elif rows:
            rows[-1][1].append(chunk)
    joined = []
    for name, chunks in rows:
        width = max(len(c) for c in chunks)
        text = "".join(c if len(c) == width or i == len(chunks) - 1 else c + " " for i, c in enumerate(chunks))
        joined.append((name, text))
    return joined


DCGM_RESULTS = ("Pass", "Fail", "Warn", "Skip")  # the first word of a test's Result cell
DCGM_DETAILS = ("Error", "Warning", "Info")  # rows under a test that say why


def gpufleet_dcgm_tests(stdout: str) -> list[dict[str, str]]:
    """Each test of ``dcgmi diag``'s table: ``{test, result, detail}`` (result: the cell, ``Pass``, ``Fail``,
    ``Skip``, ``Warn``, maybe followed by the GPUs, e.g. ``Fail - GPU: 1``; detail: its ``Error``/``Warning``/``Info``
    rows, joined). Rows that are no test (the header, the version and device rows) are left out."""
    tests: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    for name, value in _dcgm_rows(stdout):
        if name in DCGM_DETAILS and current is not None:
            current["detail"] = "; ".join(filter(None, (current["detail"], _oneline(value))))
        elif value.split(" ", 1)[0] in DCGM_RESULTS:
            current = {"test": name, "result": value, "detail": ""}
            tests.append(current)
        else:
            current = None
    return tests


def gpufleet_dcgm_failures(stdout: str, rc: int = 0, error: str = "", level: int | str = 1) -> list[str]:
    """The failed tests of ``dcgmi diag -r LEVEL`` (a ``Fail`` row, with the ``Error``/``Warning`` rows under it);
    empty when it passed."""
    failures = [
        f"{t['test']}: {t['result']}" + (f" ({t['detail']})" if t["detail"] else "")
        for t in gpufleet_dcgm_tests(stdout)
        if t["result"].startswith("Fail")
    ]
    if not failures and int(rc or 0) != 0:
        last = (str(stdout or "").strip().splitlines() or [""])[-1]
        why = _oneline(error) or _oneline(last) or "no output"
        failures.append(f"dcgmi diag -r {level} failed (rc {rc}): {why}")
    return failures


def gpufleet_owner_conflicts(owners: Any, expected: Any) -> list[str]:
    """The owners the host shows (``gpu_owners``' ``owners``) against its plan (``expected``: ``{driver,
    advertiser}``, from the host view's ``driver_owner`` and ``advertiser``): gpufleet.host.owners.owner_conflicts."""
    from gpufleet.host.owners import owner_conflicts

    return owner_conflicts(plain_data(owners) or {}, plain_data(expected) or {})


# -- what the AMD checks read -----------------------------------------------------------------------------------

AMD_RELOAD = "modprobe -r amdgpu && modprobe amdgpu"


def amd_release_field(version: str, kind: str = "rocm") -> str:
    """The release number as AMD's package versions carry it (``amdgpu-dkms 1:6.14.14.30100100-2212064.22.04``,
    ``rocminfo 1.0.0.70001-...``): ROCm ``7.0.1`` -> ``70001`` (major, then minor and patch in two digits each); an
    Instinct driver release (``kind`` amdgpu, from 30.10 on) ``30.10.1`` -> ``30100100`` (major, minor, patch and
    point release in two digits each: AMD's Instinct driver version scheme); driver releases numbered like ROCm's
    (6.4.1, before 30.10) as ROCm's."""
    parts = [int(p) for p in str(version).split(".")] + [0, 0]
    if kind == "amdgpu" and parts[0] >= 30:
        return "".join(f"{p:02d}" for p in parts[:4])
    return f"{parts[0]}{parts[1]:02d}{parts[2]:02d}"


def _release_mismatches(versions: Mapping[str, Any], options: Mapping[str, Any], missing: str) -> list[str]:
    problems = []
    for kind, names in (("amdgpu", options.get("driver_packages") or []), ("rocm", options.get("rocm_packages") or [])):
        release = str(options.get(f"{kind}_version"))
        field = amd_release_field(release, kind)
        for name in names:
            version = str(versions.get(name) or "")
            if not version or version == "(none)":
                problems.append(f"{name} {missing}")
            elif f".{field}-" not in version.split(":", 1)[-1]:
                what = "amdgpu" if kind == "amdgpu" else "ROCm"
                problems.append(f"{name} {version} is not {what} {release}'s (AMD's versions of it carry .{field}-)")
    return problems


def gpufleet_amd_release_mismatches(versions: Any, options: Any) -> list[str]:
    """The packages whose version in ``versions`` (name -> version: apt's candidates, ``(none)`` or "" for none)
    is not the pinned release's (``options``: ``{amdgpu_version, rocm_version, driver_packages, rocm_packages}``;
    :func:`amd_release_field`); empty when every one is."""
    return _release_mismatches(plain_data(versions) or {}, plain_data(options) or {}, "has no candidate")


def gpufleet_amdgpu_problems(state: Any, options: Any) -> list[str]:
    """How a host's AMD driver stack differs from its pins. ``state``: ``{packages: {name: installed version},
    module: the amdgpu module's version for the running kernel (modinfo; "" for none or the kernel's own, which has
    no version), loaded: whether amdgpu is loaded, loaded_version: /sys/module/amdgpu/version ("" when loaded without
    one: the kernel's own driver)}``; ``options``: ``{amdgpu_version, rocm_version, driver_packages, rocm_packages,
    must_be_loaded, kernel}``. Empty when the installed packages carry the pinned releases and, where the host has
    AMD GPUs (``must_be_loaded``), amdgpu-dkms's module is the one loaded."""
    state, options = plain_data(state) or {}, plain_data(options) or {}
    problems = [
        p if p.endswith(" is not installed") else f"{p}: is AMD's repository pinned above the distribution's packages?"
        for p in _release_mismatches(state.get("packages") or {}, options, "is not installed")
    ]
    if options.get("must_be_loaded"):
        module, loaded = str(state.get("module") or ""), str(state.get("loaded_version") or "")
        kernel = options.get("kernel") or "the running kernel"
        if not module:
            problems.append(f"no amdgpu module of amdgpu-dkms for {kernel} (dkms status says why)")
        elif not state.get("loaded"):
            problems.append(f"amdgpu {module} is installed but not loaded")
        elif loaded != module:
            running = f"amdgpu {loaded}" if loaded else "the kernel's own amdgpu"
            problems.append(f"{running} is loaded, not amdgpu-dkms's {module}: reboot into it")
    return problems


def _smi_primaries(stdout: str) -> list[dict[str, str]]:
    """Each GPU of ``amd-smi static --partition`` that is a physical GPU's primary partition (PARTITION_ID 0, or
    none given), in amd-smi's order: ``{gpu, compute, memory}``. Secondary partitions (DPX, QPX, CPX) follow their
    GPU with IDs 1 and up."""
    entries: list[dict[str, str]] = []
    for line in str(stdout or "").splitlines():
        key, sep, value = line.strip().partition(":")
        key, value = key.strip().upper(), value.strip()
        if not sep:
            continue
        if key == "GPU":
            entries.append({"gpu": value})
        elif entries and key in ("COMPUTE_PARTITION", "MEMORY_PARTITION", "PARTITION_ID"):
            entries[-1][{"COMPUTE_PARTITION": "compute", "MEMORY_PARTITION": "memory", "PARTITION_ID": "id"}[key]] = (
                value.upper()
            )
    return [e for e in entries if e.get("id", "0") == "0"]


def _gpu_list(gpus: Sequence[Mapping[str, Any]]) -> str:
    from gpufleet.host.hostfacts import format_cpulist  # the kernel's list format: 0-3,6

    if len(gpus) == 1:
        return f"GPU {gpus[0]['index']} ({gpus[0]['pci']})"
    return f"GPUs {format_cpulist(int(g['index']) for g in gpus)}"


def gpufleet_amd_partition_problems(gpus: Any, smi_output: str | None = None, reload_ok: bool = True) -> list[str]:
    """How each planned AMD GPU's partitions differ from its plan. ``gpus``: the ``amd_gpu_partition`` module's
    ``gpus`` (PCI order, with sysfs's ``compute``/``memory`` and the planned ``want_compute``/``want_memory``);
    ``smi_output``: ``amd-smi static --partition``, whose primary partitions are the GPUs in the same order (None:
    judge sysfs's view). A memory partition left for a driver reload that ``reload_ok`` (amd_partition_reload_ok) did
    not allow says so. Empty when every planned GPU is as planned."""
    gpus = plain_data(gpus) or []
    source, seen = "sysfs", [(g.get("compute"), g.get("memory")) for g in gpus]
    if smi_output is not None:
        primaries = _smi_primaries(smi_output)
        if len(primaries) != len(gpus):
            return [f"amd-smi lists {len(primaries)} GPU(s) (primary partitions), sysfs {len(gpus)} AMD GPU(s)"]
        source, seen = "amd-smi", [(p.get("compute"), p.get("memory")) for p in primaries]
    wrong: dict[tuple[str, Any, Any], list[Mapping[str, Any]]] = {}
    for gpu, (compute, memory) in zip(gpus, seen, strict=True):
        planned = (("memory", memory, gpu.get("want_memory")), ("compute", compute, gpu.get("want_compute")))
        for what, have, want in planned:
            if want and have != want:
                wrong.setdefault((what, have, want), []).append(gpu)
    pending = any(what == "memory" for what, _, _ in wrong) and not reload_ok
    problems = []
    for (what, have, want), items in wrong.items():
        line = f"{_gpu_list(items)}: {what} partition {have}, planned {want} ({source})"
        if what == "memory" and pending:
            line += f": it takes a driver reload ({AMD_RELOAD}), which amd_partition_reload_ok does not allow"
        elif pending:
            line += ": left for after that reload"
        problems.append(line)
    return problems


# -- one table for every host -----------------------------------------------------------------------------------


def host_state(variables: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a host recorded (its ``gpufleet_verify_*`` facts), as plain data."""
    variables = variables or {}

    def get(key: str) -> Any:
        try:
            return plain_data(variables.get(key))
        except Exception as exc:  # a fact that cannot be templated is reported, not raised
            return f"<{key}: {exc}>"

    return {
        "results": get("gpufleet_verify_results") or [],
        "unreachable": get("gpufleet_verify_unreachable") or "",
        "error": get("gpufleet_verify_error") or "",
        "done": bool(get("gpufleet_verify_done")),
        "dcgm": get("gpufleet_verify_dcgm") or None,
    }


def host_verdict(state: Mapping[str, Any]) -> str:
    """``ok``, ``FAIL``, ``UNREACHABLE``, ``ERROR`` (could not be checked) or ``INCOMPLETE`` (its checks stopped)."""
    if state.get("unreachable"):
        return "UNREACHABLE"
    if state.get("error"):
        return "ERROR"
    if any(r.get("status") == "fail" for r in state.get("results", [])):
        return "FAIL"
    if not state.get("done"):
        return "INCOMPLETE"
    return "ok"


def _columns(states: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["check"] for s in states.values() for r in s.get("results", [])))


def _grid(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def render(states: Mapping[str, Mapping[str, Any]], title: str = "gpufleet verify") -> list[str]:
    """The report as lines: a heading, one row per host (a cell per check: ok, FAIL, skip, or - when it did not
    run), then each failure (host, check, message), each passed check's note (a host's last remediation) and each
    skipped check with its reason."""
    columns = _columns(states)
    verdicts = {host: host_verdict(s) for host, s in states.items()}
    bad = [h for h, v in verdicts.items() if v != "ok"]
    if not states:
        return [f"{title}: no host was verified (the host pattern matched none)"]
    heading = f"{title}: {len(bad)} of {len(states)} host(s) failed" if bad else f"{title}: all {len(states)} ok"
    rows = [["host", "result", *columns]]
    for host, state in states.items():
        cells = {r["check"]: CELL.get(r.get("status"), "?") for r in state.get("results", [])}
        rows.append([host, verdicts[host], *(cells.get(c, "-") for c in columns)])
    lines = [heading, "", *_grid(rows)]
    failures = []
    for host, state in states.items():
        if state.get("unreachable"):
            failures.append(f"  {host}  unreachable: {_oneline(state['unreachable'])}")
        elif state.get("error"):
            failures.append(f"  {host}  not checked: {_oneline(state['error'])}")
        failures += [
            f"  {host}  {r['check']}: {_oneline(r.get('detail')) or 'failed'}"
            for r in state.get("results", [])
            if r.get("status") == "fail"
        ]
        if verdicts[host] == "INCOMPLETE":
            failures.append(f"  {host}  its checks stopped before the end (the play's output says where)")
    if failures:
        lines += ["", "failures:", *failures]
    notes = [
        f"  {host}  {r['check']}: {_oneline(r.get('detail'))}"
        for host, state in states.items()
        for r in state.get("results", [])
        if r.get("status") == "ok" and r.get("detail")
    ]
    if notes:
        lines += ["", "notes:", *notes]
    by_check: dict[tuple[str, str], list[str]] = {}
    for host, state in states.items():
        for r in state.get("results", []):
            if r.get("status") == "skip":
                by_check.setdefault((r["check"], _oneline(r.get("detail")) or "does not apply"), []).append(host)
    skipped: dict[tuple[str, tuple[str, ...]], list[str]] = {}  # checks skipped on the same hosts for one reason
    for (check, reason), hosts in by_check.items():
        skipped.setdefault((reason, tuple(hosts)), []).append(check)
    if skipped:
        lines += ["", "skipped:"]
        lines += [f"  {', '.join(c)} on {', '.join(h)}: {reason}" for (reason, h), c in skipped.items()]
    return lines


def document(states: Mapping[str, Mapping[str, Any]], stack: str = "", time: str = "") -> dict[str, Any]:
    """The report as data (``-e gpufleet_verify_report_file=PATH`` writes it as JSON; ``gpufleet promote record
    --report`` reads it): ``{stack, time, ok, hosts: {host: {result, detail, checks: {check: {status, detail}},
    dcgm: {level, tests: [{test, result, detail}]} or null}}}``; ``result`` is the table's verdict, ``detail`` why a
    host could not be checked."""
    hosts = {}
    for host, state in states.items():
        hosts[host] = {
            "result": host_verdict(state),
            "detail": _oneline(state.get("unreachable") or state.get("error")),
            "checks": {
                r["check"]: {"status": r.get("status"), "detail": _oneline(r.get("detail"))}
                for r in state.get("results", [])
            },
            "dcgm": state.get("dcgm"),
        }
    ok = bool(hosts) and all(h["result"] == "ok" for h in hosts.values())
    return {"stack": stack, "time": time, "ok": ok, "hosts": hosts}


def report(
    states: Mapping[str, Mapping[str, Any]], title: str = "gpufleet verify", stack: str = "", time: str = ""
) -> dict[str, Any]:
    """``{ok, lines, failed: [host], summary, document}``: ``ok`` only when at least one host was verified and every
    host passed every check that applies to it; ``document``: :func:`document`, from the same states."""
    verdicts = {host: host_verdict(s) for host, s in states.items()}
    failed = [h for h, v in verdicts.items() if v != "ok"]
    if not states:
        summary = "no host was verified"
    elif failed:
        summary = f"{len(failed)} of {len(states)} host(s) failed verification: " + ", ".join(
            f"{h} ({verdicts[h]})" for h in failed
        )
    else:
        summary = f"all {len(states)} host(s) passed"
    return {
        "ok": bool(states) and not failed,
        "lines": render(states, title),
        "failed": failed,
        "summary": summary,
        "document": document(states, stack, time),
    }


def gpufleet_verify_report(
    hostvars: Mapping[str, Any], hosts: Sequence[str], title: str = "gpufleet verify", stack: str = "", time: str = ""
) -> dict:
    """:func:`report` of ``hosts`` from their facts in ``hostvars`` (a host without any is INCOMPLETE); ``stack`` and
    ``time`` (when the run reported) go into its ``document``."""
    states = {}
    for host in plain_data(list(hosts or [])):
        try:
            variables = hostvars[host]
        except KeyError:
            variables = None
        states[host] = host_state(variables)
    return report(states, title, str(stack or ""), str(time or ""))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "gpufleet_verify_failure": gpufleet_verify_failure,
            "gpufleet_persistence_mismatches": gpufleet_persistence_mismatches,
            "gpufleet_dcgm_tests": gpufleet_dcgm_tests,
            "gpufleet_dcgm_failures": gpufleet_dcgm_failures,
            "gpufleet_owner_conflicts": gpufleet_owner_conflicts,
            "gpufleet_amdgpu_problems": gpufleet_amdgpu_problems,
            "gpufleet_amd_release_mismatches": gpufleet_amd_release_mismatches,
            "gpufleet_amd_partition_problems": gpufleet_amd_partition_problems,
            "gpufleet_verify_report": gpufleet_verify_report,
        }
