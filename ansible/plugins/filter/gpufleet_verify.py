"""Controller-side filters of ``ansible/playbooks/verify.yml``: what each NVIDIA check reads means, what a failed
check says, and the one table that reports every host.

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
            "gpufleet_verify_report": gpufleet_verify_report,
        }
