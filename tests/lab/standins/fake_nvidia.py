#!/usr/bin/env python3
"""A TEST DOUBLE of NVIDIA's ``nvidia-smi`` and ``nvidia-mig-parted``, for lab VMs (which have no GPU).

Installed inside a lab VM only (never on a real host) as ``/usr/local/bin/nvidia-smi`` and
``/usr/local/bin/nvidia-mig-parted`` (symlinks to this file; it acts on the name it is called by). It keeps the
GPUs' MIG state in a JSON file and enforces the placement rules it is given (the gpufleet catalog's profiles:
compute slices, memory slices, allowed starts, max count), so that the ``mig`` role's drain -> apply -> assert ->
uncordon and failure -> rollback paths run for real against something that refuses what a GPU would refuse.

Behaviour follows the vendors' documentation for the subset the roles use:

- ``nvidia-mig-parted apply|assert -f CONFIG -c NAME`` (also ``--config-file``/``--selected-config`` and the
  ``MIG_PARTED_CONFIG_FILE``/``MIG_PARTED_SELECTED_CONFIG`` variables); config ``version: v1``,
  ``mig-configs: {NAME: [{device-filter: ["0x233010DE"...], devices: all|[i...], mig-enabled: bool,
  mig-devices: {profile: count}}]}`` (entries whose ``device-filter`` names other PCI device ids are skipped).
  ``assert`` exits 1 when the GPUs do not match; ``apply`` exits 1 on an impossible layout and changes nothing.
  ``export`` prints the current state as a config named ``current``.
- ``nvidia-smi -L``, ``nvidia-smi --query-gpu=index,name,pci.bus_id,mig.mode.current --format=csv,noheader``,
  ``nvidia-smi mig -lgi``.

GPU clients: ``<state dir>/dev/nvidia<index>`` stands for the GPU's device node. As on a real GPU, whose MIG mode
cannot change while a process holds it ("In use by another client"), ``apply`` refuses to switch MIG mode on a
GPU that a process has open (found through ``/proc/<pid>/fd``) and changes nothing.

Fault injection (tests only): when ``<state dir>/fail-next-apply`` exists, the next ``apply`` changes the first
GPU it would change, deletes that file and exits 1 — a half-applied layout, as after a real failure.
State: ``$GPUFLEET_FAKE_GPU_DIR`` (default ``/var/lib/gpufleet-fake-gpu``) ``/state.json``:
``{"gpus": [{"index", "name", "pci", "model", "device_id", "mig_enabled", "instances": [{"profile", "start"}]}],
"profiles": {MODEL: {PROFILE: {"compute", "memory", "starts", "max", "media_extensions"}}},
"slices": {MODEL: [compute, memory]}, "media_extension_instances": {MODEL: n}}``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

STATE_DIR = Path(os.environ.get("GPUFLEET_FAKE_GPU_DIR", "/var/lib/gpufleet-fake-gpu"))


class Refused(Exception):
    pass


def load_state() -> dict[str, Any]:
    return json.loads((STATE_DIR / "state.json").read_text())


def save_state(state: dict[str, Any]) -> None:
    tmp = STATE_DIR / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
    tmp.replace(STATE_DIR / "state.json")


def read_config(path: str) -> dict[str, Any]:
    text = Path(path).read_text()
    try:
        import yaml  # python3-yaml

        return yaml.safe_load(text)
    except ImportError:
        return json.loads(text)  # JSON is YAML too


def place(model: str, wanted: dict[str, int], state: dict[str, Any]) -> list[dict[str, Any]]:
    """Start slices for ``wanted`` instances on one GPU of ``model``, or Refused (what the GPU would refuse)."""
    profiles = state["profiles"].get(model)
    if profiles is None:
        raise Refused(f"GPU model {model} has no MIG")
    compute_total, memory_total = state["slices"][model]
    items: list[str] = []
    for name, count in wanted.items():
        if name not in profiles:
            raise Refused(f"profile {name} does not exist on {model}")
        if count > profiles[name]["max"]:
            raise Refused(f"{count} x {name} exceeds its maximum of {profiles[name]['max']} per GPU")
        items += [name] * count
    media = sum(1 for p in items if profiles[p]["media_extensions"])
    if media > state["media_extension_instances"][model]:
        raise Refused(
            f"{media} instances with media extensions (+me); the GPU has {state['media_extension_instances'][model]}"
        )
    if sum(profiles[p]["compute"] for p in items) > compute_total:
        raise Refused(f"the instances need more than the GPU's {compute_total} compute slices")
    items.sort(key=lambda p: (-profiles[p]["memory"], p))
    used = [False] * memory_total
    out: list[dict[str, Any]] = []

    def search(i: int) -> bool:
        if i == len(items):
            return True
        p = profiles[items[i]]
        for start in p["starts"]:
            span = range(start, start + p["memory"])
            if span.stop <= memory_total and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                out.append({"profile": items[i], "start": start})
                if search(i + 1):
                    return True
                out.pop()
                for s in span:
                    used[s] = False
        return False

    if not search(0):
        raise Refused(f"no placement of {dict(sorted(wanted.items()))} on the memory slices of {model}")
    return sorted(out, key=lambda x: x["start"])


def desired(config: dict[str, Any], name: str, gpus: list[dict[str, Any]]) -> dict[int, tuple[bool, dict[str, int]]]:
    if config.get("version") != "v1":
        raise Refused("config version must be v1")
    entries = config.get("mig-configs", {}).get(name)
    if entries is None:
        raise Refused(f"config {name!r} is not in the file")
    out: dict[int, tuple[bool, dict[str, int]]] = {}
    for entry in entries:
        device_filter = entry.get("device-filter")
        if isinstance(device_filter, str):
            device_filter = [device_filter]
        devices = entry["devices"]
        indices = [g["index"] for g in gpus] if devices == "all" else list(devices)
        for i in indices:
            model_id = next((g["device_id"] for g in gpus if g["index"] == i), None)
            if device_filter and model_id not in device_filter:
                continue  # the entry is for another GPU model (mig-parted matches the PCI device id)
            out[i] = (bool(entry["mig-enabled"]), dict(entry.get("mig-devices") or {}))
    return out


def current(gpu: dict[str, Any]) -> tuple[bool, dict[str, int]]:
    counts: dict[str, int] = {}
    for inst in gpu["instances"]:
        counts[inst["profile"]] = counts.get(inst["profile"], 0) + 1
    return gpu["mig_enabled"], counts


def mig_parted(argv: list[str]) -> int:
    if not argv or argv[0] not in ("apply", "assert", "export"):
        print("usage: nvidia-mig-parted apply|assert|export [-f FILE] [-c NAME]", file=sys.stderr)
        return 2
    command, args = argv[0], argv[1:]
    file = os.environ.get("MIG_PARTED_CONFIG_FILE")
    name = os.environ.get("MIG_PARTED_SELECTED_CONFIG")
    i = 0
    while i < len(args):
        if args[i] in ("-f", "--config-file"):
            file, i = args[i + 1], i + 2
        elif args[i] in ("-c", "--selected-config"):
            name, i = args[i + 1], i + 2
        else:
            i += 1  # other flags (--debug, --mode-only...) do not change this double's behaviour
    state = load_state()
    gpus = state["gpus"]
    if command == "export":
        groups = [
            {"devices": [g["index"]], "mig-enabled": g["mig_enabled"], "mig-devices": current(g)[1]} for g in gpus
        ]
        print(json.dumps({"version": "v1", "mig-configs": {"current": groups}}, indent=2))
        return 0
    if not file or not name:
        print("error: a config file (-f) and a selected config (-c) are required", file=sys.stderr)
        return 2
    try:
        want = desired(read_config(file), name, gpus)
        if command == "assert":
            wrong = [g["index"] for g in gpus if g["index"] in want and current(g) != want[g["index"]]]
            if wrong:
                print(f"Assertion failure: GPUs {wrong} do not match config {name!r}", file=sys.stderr)
                return 1
            print("Selected MIG configuration currently applied")
            return 0
        plans = {}
        for g in gpus:  # validate everything before changing anything
            if g["index"] in want:
                enabled, counts = want[g["index"]]
                if counts and not enabled:
                    raise Refused(f"GPU {g['index']}: mig-devices given with mig-enabled false")
                plans[g["index"]] = (enabled, place(g["model"], counts, state) if enabled else [])
    except (Refused, KeyError, TypeError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    held = {
        g["index"]: holders
        for g in gpus
        if g["index"] in plans and g["mig_enabled"] != plans[g["index"]][0]
        for holders in [gpu_holders(g["index"])]
        if holders
    }
    if held:
        for index, pids in sorted(held.items()):
            print(
                f"error: GPU {index}: cannot change MIG mode: in use by another client (pids {pids})", file=sys.stderr
            )
        return 1
    fail = STATE_DIR / "fail-next-apply"
    for g in gpus:
        if g["index"] in plans and current(g) != want[g["index"]]:
            g["mig_enabled"], g["instances"] = plans[g["index"]]
            if fail.exists():
                fail.unlink()
                save_state(state)
                print(f"error: injected failure after reconfiguring GPU {g['index']}", file=sys.stderr)
                return 1
    save_state(state)
    print("MIG configuration applied successfully")
    return 0


def gpu_holders(index: int) -> list[int]:
    """The processes that have the GPU's device node open."""
    node = str(STATE_DIR / "dev" / f"nvidia{index}")
    pids = []
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            if any(os.readlink(fd) == node for fd in fd_dir.iterdir()):
                pids.append(int(fd_dir.parent.name))
        except OSError:  # the process ended, or it is not ours to read
            continue
    return sorted(pids)


def nvidia_smi(argv: list[str]) -> int:
    state = load_state()
    gpus = state["gpus"]
    if argv[:1] == ["-L"]:
        for g in gpus:
            print(f"GPU {g['index']}: {g['name']} (UUID: GPU-fake-{g['index']:04d})")
            for n, inst in enumerate(g["instances"]):
                print(f"  MIG {inst['profile']:<12} Device {n:>2}: (UUID: MIG-fake-{g['index']:04d}-{n:02d})")
        return 0
    query = next((a.split("=", 1)[1] for a in argv if a.startswith("--query-gpu=")), None)
    if query is not None:
        fields = {"index": "index", "name": "name", "pci.bus_id": "pci", "mig.mode.current": "mig_enabled"}
        for g in gpus:
            row = []
            for f in query.split(","):
                value = g[fields[f]]
                row.append(("Enabled" if value else "Disabled") if f == "mig.mode.current" else str(value))
            print(", ".join(row))
        return 0
    if argv[:2] == ["mig", "-lgi"]:
        profiles = state["profiles"]
        print("| GPU   Name                 Instance   Placement |")
        for g in gpus:
            for n, inst in enumerate(g["instances"]):
                size = profiles[g["model"]][inst["profile"]]["memory"]
                print(f"|   {g['index']}  MIG {inst['profile']:<16} {n:>3}       {inst['start']}:{size}       |")
        return 0
    print("this nvidia-smi is a gpufleet lab test double; supported: -L, --query-gpu=..., mig -lgi", file=sys.stderr)
    return 2


def main() -> int:
    tool = Path(sys.argv[0]).name
    if tool == "nvidia-mig-parted":
        return mig_parted(sys.argv[1:])
    if tool == "nvidia-smi":
        return nvidia_smi(sys.argv[1:])
    print(f"call this test double as nvidia-smi or nvidia-mig-parted, not {tool}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
