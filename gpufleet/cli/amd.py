"""``gpufleet amd``: AMD Instinct partitions of a GPU model, does a compute x memory pair run on one GPU, fleet packing
of a partition demand with the Device Config Manager's profiles (docs/amd.md)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    command,
    emit_json,
    err,
    group,
    out,
    print_diagnostics,
    print_table,
    shown,
    usage_error,
    write_output_or_exit,
)

if TYPE_CHECKING:
    from gpufleet.catalog import AmdPartitionPair, Gpu
    from gpufleet.mig.amd_pack import AmdFleetPack, AmdModelPack, NodeProfile

amd_app = group(
    "AMD Instinct partitions (compute x memory) per GPU model.",
    help="AMD Instinct partitions: a model's compute x memory pairs (profiles), does a pair run on one GPU (check), and"
    " a fleet's partition demand on the fewest GPUs and nodes with AMD's Device Config Manager profiles (pack).",
)

GpuArg = Annotated[
    str,
    typer.Argument(help="GPU: catalog name (MI300X), alias (AMD Instinct MI300X) or PCI id (1002:74a1)."),
]
# what an NVIDIA GPU gets instead of each command
MIG_COMMAND = {"profiles": "gpufleet mig profiles", "check": "gpufleet mig check"}


def _amd_gpu_or_exit(name: str, as_json: bool, empty: dict[str, Any], instead: str) -> Gpu:
    """The AMD GPU with partitions ``name`` names, or exit 1 with the reason (JSON: ``empty`` with it): unknown (the
    closest name of its vendor), an NVIDIA GPU (``instead`` is its command), an AMD GPU without partitions."""
    from gpufleet.catalog import UnknownGpu, load_catalog
    from gpufleet.mig.amd_partitions import no_partitions_reason

    reason, shown_name = None, name
    try:
        gpu = load_catalog().gpu(name)
    except UnknownGpu as exc:
        reason = str(exc)
    else:
        shown_name = gpu.name
        if gpu.vendor != "amd":
            reason = f"{gpu.name} is an NVIDIA GPU: it has MIG, not AMD partitions; use {instead} {gpu.name}"
        elif gpu.partitions is None:
            reason = no_partitions_reason(gpu)
        else:
            return gpu
    if as_json:
        emit_json({"gpu": shown_name, **empty, "reason": reason})
    else:
        err.print(f"[red]error:[/red] {shown(reason)}")
    raise typer.Exit(EXIT_INVALID)


def _pair_dict(pair: AmdPartitionPair) -> dict[str, Any]:
    from gpufleet.mig.amd_partitions import dcm_applies

    return {
        "pair": pair.name,
        "compute": pair.compute,
        "memory": pair.memory,
        "logical_gpus": pair.logical_gpus,
        "memory_gib": pair.memory_gib,
        "documented": pair.documented,
        "dcm": dcm_applies(pair.compute, pair.memory),
    }


@command(amd_app, "profiles", "A GPU model's compute x memory partition pairs.")
def amd_profiles(gpu: GpuArg, as_json: JsonOpt = False) -> None:
    """The partition pairs of one AMD Instinct model: each compute mode (SPX, DPX, QPX, CPX) with each memory (NPS)
    mode it runs with, the logical GPUs one GPU becomes, the memory of each (the GPU's memory split evenly, as the
    driver does: derived, before driver reservations), whether AMD documents the pair for the model or only the
    amdgpu driver's rule allows it, and whether AMD's Device Config Manager applies it. Exit 1 for an unknown GPU,
    an NVIDIA GPU (gpufleet mig profiles) or one without partitions."""
    model = _amd_gpu_or_exit(gpu, as_json, {"partitions": False, "pairs": []}, MIG_COMMAND["profiles"])
    parts = model.partitions
    assert parts is not None
    if as_json:
        emit_json(
            {
                "gpu": model.name,
                "partitions": True,
                "geometry": parts.geometry,
                "xcds": parts.xcds,
                "compute_modes": list(parts.compute_modes),
                "memory_modes": list(parts.memory_modes),
                "pairs": [_pair_dict(p) for p in parts.pairs],
            }
        )
        return
    table = Table(
        title=f"{model.name}: {parts.xcds} XCDs, {model.memory_gib:g} GiB; compute {', '.join(parts.compute_modes)};"
        f" memory {', '.join(parts.memory_modes)}"
    )
    table.add_column("pair", no_wrap=True)
    for col in ("logical GPUs", "GiB each", "basis", "DCM"):
        table.add_column(col)
    for p in parts.pairs:
        row = _pair_dict(p)
        table.add_row(
            p.name,
            str(p.logical_gpus),
            f"{p.memory_gib:g}",
            "documented" if p.documented else "driver rule",
            "yes" if row["dcm"] else "no: host",
        )
    print_table(table)
    rule = parts.geometry.replace("gc-", "GC ")
    out.print(
        f"[dim]documented: AMD lists the pair for {model.name}; driver rule: the amdgpu driver's rule for {rule} allows"
        " it. GiB each: the GPU's memory split evenly (derived, before driver reservations). DCM: the AMD GPU"
        " Operator's Device Config Manager applies it; others need managed_by: host (the amd_partition role).[/dim]"
    )


@command(amd_app, "check", "Does a compute x memory pair run on one GPU.")
def amd_check(
    gpu: GpuArg,
    pair: Annotated[str, typer.Argument(help="The pair: COMPUTE+MEMORY, e.g. CPX+NPS4 (or cpx_nps4).")],
    as_json: JsonOpt = False,
) -> None:
    """Does this compute x memory pair run on one GPU of the model? Exit 0 with its logical GPUs and the memory of
    each, exit 1 with the reason (a mode the model lacks, or which modes each one runs with); a pair not written
    COMPUTE+MEMORY is a usage error (exit 2). --json: {gpu, pair, fits, logical_gpus, memory_gib, reason}."""
    from gpufleet.mig.amd_partitions import PairSyntaxError, check, parse_pair

    try:
        compute, memory = parse_pair(pair)
    except PairSyntaxError as exc:
        raise usage_error(str(exc)) from None
    name = f"{compute}+{memory}"
    empty = {"pair": name, "fits": False, "logical_gpus": None, "memory_gib": None}
    model = _amd_gpu_or_exit(gpu, as_json, empty, MIG_COMMAND["check"])
    result = check(model, compute, memory)
    if as_json:
        emit_json(result.to_dict())
    elif result.fits:
        basis = "documented by AMD" if result.documented else "the driver's rule; AMD does not list it for the model"
        dcm = "AMD's Device Config Manager applies it" if result.dcm else "apply it with managed_by: host"
        out.print(
            f"[green]fits[/green] one {model.name}: {name} makes {result.logical_gpus} logical GPUs of"
            f" {result.memory_gib:g} GiB each ({basis}; {dcm})"
        )
    else:
        out.print(f"[red]does not fit[/red]: {shown(result.reason)}")
    if not result.fits:
        raise typer.Exit(EXIT_INVALID)


@command(amd_app, "pack", "Pack a partition demand onto the fewest GPUs and nodes.")
def amd_pack(
    demand: Annotated[
        Path, typer.Option("--demand", help="Demand file (YAML): logical GPUs per pair, or by memory, per GPU model.")
    ],
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write the Device Config Manager's ConfigMap here ('-': stdout)."),
    ] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", help="The ConfigMap's namespace (default: kube-amd-gpu).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Pack a fleet's partition demand onto the fewest GPUs (a pair's logical GPUs over the logical GPUs one GPU
    gives, rounded up) and the fewest nodes (GPUs of one NPS mode share nodes, never GPUs of two: the driver sets the
    memory mode hive-wide), with the lower bounds it meets; each node layout as a Device Config Manager profile
    (the node label dcm.amd.com/gpu-config-profile picks it) and GPUs left free skipped. With -o, the ConfigMap
    holding DCM's config.json with every profile DCM applies; the others are the amd_partition role's
    (managed_by: host). Exit 1 with every error of the demand at file:line."""
    from gpufleet.catalog import load_catalog
    from gpufleet.mig.amd_demand import load_amd_demand
    from gpufleet.mig.amd_pack import pack
    from gpufleet.mig.amd_partitions import DCM_CONFIGMAP, dcm_configmap
    from gpufleet.spec.models import AMD_GPU_OPERATOR_NAMESPACE

    if namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise usage_error(f"--namespace {namespace[:70]!r}: a Kubernetes namespace: 1-63 lowercase letters, digits, -")
    if output is not None and str(output) != "-":
        if output.is_dir():
            raise usage_error(f"--output {output}: is a directory; name the file to write")
        if not output.resolve().parent.is_dir():
            raise usage_error(f"--output {output}: directory {output.resolve().parent} does not exist")
    loaded = load_amd_demand(demand, load_catalog())
    if not loaded.ok:
        if as_json:
            emit_json({"ok": False, "errors": [d.to_dict() for d in loaded.diagnostics]})
        else:
            print_diagnostics(err, loaded.diagnostics)
        raise typer.Exit(EXIT_INVALID)
    result = pack(loaded.demands)
    config = result.dcm_config()
    configmap = dcm_configmap(config, namespace or AMD_GPU_OPERATOR_NAMESPACE)
    if output is not None:
        _write_configmap(configmap, output)
    if as_json:
        emit_json(_pack_json(result, config))
    elif str(output) != "-":
        _print_pack(result)
        if output is not None:
            count = len(config["gpu-config-profiles"])
            out.print(f"Device Config Manager ConfigMap {DCM_CONFIGMAP} ({count} profiles) written to {shown(output)}")


def _pack_json(result: AmdFleetPack, config: dict[str, Any]) -> dict[str, Any]:
    """``amd pack --json``: the fleet's figures and bounds, per model its pairs, node profiles and notes; DCM's
    config.json."""
    models = []
    for m in result.models:
        models.append(
            {
                "gpu": m.gpu,
                "gpus_per_node": m.gpus_per_node,
                "mix_compute": m.mix_compute,
                "gpus": m.gpus,
                "gpus_lower_bound": m.gpus_lower_bound,
                "nodes": m.nodes,
                "nodes_lower_bound": m.nodes_lower_bound,
                "free_gpus": m.free_gpus,
                "optimal": m.optimal,
                "pairs": [
                    {**_pair_dict(p.pair), "partitions": p.partitions, "gpus": p.gpus, "spare_partitions": p.spare}
                    for p in m.pairs
                ],
                "profiles": [
                    {
                        "name": p.name,
                        "memory": p.memory,
                        "nodes": p.nodes,
                        "groups": [{"compute": c, "gpus": n} for c, n in p.groups],
                        "free_gpus": p.free,
                        "dcm": p.dcm,
                        "dcm_reasons": list(p.dcm_reasons),
                        "amd_partitions": p.layout.model_dump(mode="json"),
                    }
                    for p in m.profiles
                ],
                "notes": list(m.notes),
            }
        )
    return {
        "ok": True,
        "gpus": result.gpus,
        "gpus_lower_bound": result.gpus_lower_bound,
        "nodes": result.nodes,
        "nodes_lower_bound": result.nodes_lower_bound,
        "free_gpus": result.free_gpus,
        "optimal": result.optimal,
        "models": models,
        "dcm_config": config,
    }


def _print_model(m: AmdModelPack) -> None:
    """A model's pairs (logical GPUs asked, GPUs), notes, node profiles, and its figures against the bounds."""
    pairs = Table(title=f"{m.gpu}: nodes of {m.gpus_per_node} GPUs")
    pairs.add_column("pair", no_wrap=True)
    for col in ("logical GPUs asked", "GPUs", "spare logical GPUs", "GiB each", "basis"):
        pairs.add_column(col)
    for p in m.pairs:
        basis = "documented" if p.pair.documented else "driver rule"
        pairs.add_row(p.pair.name, str(p.partitions), str(p.gpus), str(p.spare), f"{p.pair.memory_gib:g}", basis)
    print_table(pairs)
    for note in m.notes:
        out.print(f"  {note}", markup=False)
    nodes = Table(title=f"{m.gpu}: node profiles (node label dcm.amd.com/gpu-config-profile)")
    nodes.add_column("profile", no_wrap=True)
    for col in ("NPS", "GPUs", "free", "nodes", "applied by"):
        nodes.add_column(col)
    for p in m.profiles:
        groups = ", ".join(f"{c} x{n}" for c, n in p.groups)
        nodes.add_row(p.name, p.memory, groups, str(p.free), str(p.nodes), _applied_by(p))
    print_table(nodes)
    if not all(p.dcm for p in m.profiles):
        out.print(
            "  [dim]the Device Config Manager applies the model's pairs but NPS4 with a mode other than CPX; the other"
            " profiles are set by the amd_partition role (amd_partitions with managed_by: host)[/dim]"
        )
    state = "optimal" if m.optimal else "not proven optimal"
    out.print(
        f"{m.gpu}: {m.nodes} nodes (lower bound {m.nodes_lower_bound}), {m.gpus} GPUs (lower bound"
        f" {m.gpus_lower_bound}), {m.free_gpus} GPUs free: {state}"
    )


def _applied_by(profile: NodeProfile) -> str:
    """Who sets a node profile's partitions: AMD's Device Config Manager, or the host role, naming the modes DCM
    does not apply."""
    from gpufleet.mig.amd_partitions import DCM_COMPUTE_MODES, DCM_MEMORY_MODES, DCM_NPS4_COMPUTE

    if profile.dcm:
        return "Device Config Manager"
    modes = [profile.memory] if profile.memory not in DCM_MEMORY_MODES else []
    modes += [c for c, _ in profile.groups if c not in DCM_COMPUTE_MODES]
    if profile.memory == "NPS4":
        modes += [f"{c} with NPS4" for c, _ in profile.groups if c in DCM_COMPUTE_MODES and c != DCM_NPS4_COMPUTE]
    return f"amd_partition role (not DCM's: {', '.join(modes)})"


def _print_pack(result: AmdFleetPack) -> None:
    for m in result.models:
        _print_model(m)
    state = "optimal" if result.optimal else "not proven optimal"
    out.print(
        f"fleet: {result.nodes} nodes, lower bound {result.nodes_lower_bound}; {result.gpus} GPUs, lower bound"
        f" {result.gpus_lower_bound}; {result.free_gpus} GPUs free; {state}"
    )


def _configmap_yaml(configmap: dict[str, Any]) -> str:
    """The ConfigMap as YAML, its ``config.json`` a literal block (as AMD's examples write it)."""
    from io import StringIO

    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import LiteralScalarString

    data = {**configmap, "data": {k: LiteralScalarString(v) for k, v in configmap["data"].items()}}
    stream = StringIO()
    yaml = YAML(typ="rt")
    yaml.width = 4096
    yaml.dump(data, stream)
    return stream.getvalue()


def _write_configmap(configmap: dict[str, Any], output: Path) -> None:
    """The ConfigMap to ``output`` ('-': stdout), crash-safely; exit 1 with one line when it cannot be written."""
    write_output_or_exit(_configmap_yaml(configmap), output)
