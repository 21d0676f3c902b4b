"""``gpufleet size``: the memory a model needs to serve or train, and the smallest MIG instance or AMD Instinct
partition, GPUs and Azure sizes that hold it (formulas: docs/sizing.md; AMD: docs/amd.md)."""

from __future__ import annotations

import datetime as _dt
import re
from typing import TYPE_CHECKING, Annotated, Literal

import typer
from rich import box
from rich.table import Table

from gpufleet.cli.common import (
    EXIT_INVALID,
    JsonOpt,
    RootOpt,
    emit_json,
    err,
    out,
    print_table,
    project_root,
    shown,
    usage_error,
)

if TYPE_CHECKING:
    from gpufleet.catalog.llm import LanguageModel
    from gpufleet.fleet.sizing import Option, Request, Sizing

_TRAINING_ONLY = ("optimizer_bytes", "checkpointing", "zero_stage", "shard_degree", "micro_batch", "seq_len")
_INFERENCE_ONLY = ("dtype", "kv_dtype", "context", "concurrency")
_MAX_SHAPE = 1e7  # larger than any model's parameters (billions) or dimension: a typo, and float overflow beyond
_SHAPE = ("active_params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab")

ModelOpt = Annotated[
    str | None, typer.Option("--model", "-m", help="Catalog model or Hugging Face id (llama-3.1-70b, Qwen/Qwen2.5-7B).")
]
ParamsOpt = Annotated[float | None, typer.Option("--params", help="Instead of --model: parameters, in billions.")]
ActiveOpt = Annotated[float | None, typer.Option("--active-params", help="MoE: active parameters, billions.")]
LayersOpt = Annotated[int | None, typer.Option("--layers", help="With --params: transformer layers.")]
HiddenOpt = Annotated[int | None, typer.Option("--hidden", help="With --params: hidden size.")]
HeadsOpt = Annotated[int | None, typer.Option("--heads", help="With --params: attention heads.")]
KvHeadsOpt = Annotated[int | None, typer.Option("--kv-heads", help="With --params: KV heads (GQA).")]
HeadDimOpt = Annotated[int | None, typer.Option("--head-dim", help="With --params: head dimension.")]
VocabOpt = Annotated[int | None, typer.Option("--vocab", help="With --params: vocabulary size.")]
ModeOpt = Annotated[Literal["inference", "training"], typer.Option("--mode", help="Serve or train the model.")]
DtypeOpt = Annotated[str | None, typer.Option("--dtype", help="Weights: fp32 bf16 fp16 fp8 int8 int4 [bf16].")]
KvDtypeOpt = Annotated[
    str | None, typer.Option("--kv-dtype", help="KV cache dtype [the weights' when 16/32-bit, else bf16].")
]
ContextOpt = Annotated[int | None, typer.Option("--context", help="Tokens per sequence (prompt + output) [4096].")]
ConcurrencyOpt = Annotated[int | None, typer.Option("--concurrency", help="Sequences served at once [1].")]
OptBytesOpt = Annotated[
    float | None, typer.Option("--optimizer-bytes", help="Optimizer state bytes per parameter [12: Adam, fp32].")
]
CkptOpt = Annotated[
    bool | None, typer.Option("--checkpointing/--no-checkpointing", help="Activation checkpointing [on].")
]
ZeroOpt = Annotated[int | None, typer.Option("--zero-stage", help="ZeRO stage 0-3 (3 = FSDP full shard) [0].")]
ShardOpt = Annotated[int | None, typer.Option("--shard-degree", help="GPUs the ZeRO/FSDP states are sharded over [1].")]
MicroOpt = Annotated[int | None, typer.Option("--micro-batch", help="Sequences per GPU per step [1].")]
SeqOpt = Annotated[int | None, typer.Option("--seq-len", help="Training sequence length [4096].")]
GpuOpt = Annotated[
    str | None,
    typer.Option(
        "--gpu", help="Only this GPU (name, PCI id or nvidia-smi name); adds its MIG or AMD partition option."
    ),
]
RegionOpt = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="Azure region for $/hour from the price tables (the project's azure_prices.yaml, then"
        " ~/.config/gpufleet's, then the shipped one); without it no price is shown (null).",
    ),
]
PoolOpt = Annotated[
    bool, typer.Option("--write-pool", help="Print the stack YAML (a gpu_pools entry) of the best Azure option.")
]


def size(
    model: ModelOpt = None,
    params: ParamsOpt = None,
    active_params: ActiveOpt = None,
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    heads: HeadsOpt = None,
    kv_heads: KvHeadsOpt = None,
    head_dim: HeadDimOpt = None,
    vocab: VocabOpt = None,
    mode: ModeOpt = "inference",
    dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    context: ContextOpt = None,
    concurrency: ConcurrencyOpt = None,
    optimizer_bytes: OptBytesOpt = None,
    checkpointing: CkptOpt = None,
    zero_stage: ZeroOpt = None,
    shard_degree: ShardOpt = None,
    micro_batch: MicroOpt = None,
    seq_len: SeqOpt = None,
    gpu: GpuOpt = None,
    region: RegionOpt = None,
    write_pool: PoolOpt = False,
    as_json: JsonOpt = False,
    root: RootOpt = None,
) -> None:
    """Right-size a model: memory breakdown (weights, KV cache, activations, optimizer, overhead; GB = 10^9 bytes)
    and the options that hold it, best first: the smallest MIG instance or AMD Instinct partition (with --gpu), whole
    NVIDIA and AMD Instinct GPUs with their tensor/pipeline-parallel degrees, Azure sizes with node counts, each with
    headroom, a memory-bandwidth bound on decode tokens/s and $/hour (with --region: the price tables of
    docs/azure.md, each price's table and date shown). Exit 1 for a bad input or when nothing fits."""
    given = {k: v for k, v in locals().items() if v is not None and k != "root"}
    _check_usage(given, mode, write_pool, as_json)
    from gpufleet.catalog import UnknownGpu, load_catalog
    from gpufleet.catalog.llm import UnknownModel
    from gpufleet.cli.cost import priced_catalog_or_exit
    from gpufleet.fleet import sizing

    catalog = priced_catalog_or_exit(project_root(root)) if region is not None else load_catalog()
    try:
        lm = _model(given)
        request = _request(given, mode)
        target = catalog.gpu(gpu) if gpu is not None else None
        result = sizing.size(lm, request, catalog, today=_dt.date.today(), gpu=target, region=region)
    except (sizing.SizingError, UnknownModel, UnknownGpu) as exc:
        err.print(f"[red]error:[/red] {shown(exc)}")
        raise typer.Exit(EXIT_INVALID) from None
    if write_pool:
        _print_pool(result)
    elif as_json:
        emit_json(result.to_dict())
    else:
        _print(result, lm, request)


def _check_usage(given: dict[str, object], mode: str, write_pool: bool, as_json: bool) -> None:
    """Options that contradict each other are usage errors (exit 2)."""
    if ("model" in given) == ("params" in given):
        raise usage_error("give a catalog model (--model NAME) or a model's shape (--params N --layers ...), one")
    if "model" in given and (shape := [k for k in _SHAPE if k in given]):
        raise usage_error(f"--{shape[0].replace('_', '-')} describes a custom model: use it with --params, not --model")
    wrong = _INFERENCE_ONLY if mode == "training" else _TRAINING_ONLY
    if misplaced := [k for k in wrong if k in given]:
        raise usage_error(f"--{misplaced[0].replace('_', '-')} does not apply to --mode {mode}")
    if write_pool and as_json:
        raise usage_error("--write-pool prints YAML: leave out --json")


def _model(given: dict[str, object]) -> LanguageModel:
    from gpufleet.catalog.llm import LanguageModel, load_models
    from gpufleet.fleet.sizing import SizingError

    if "model" in given:
        return load_models().model(str(given["model"]))
    numbers = {k: given[k] for k in ("params", *_SHAPE) if k in given}
    for key, value in numbers.items():
        if not isinstance(value, int | float) or not 0 < value <= _MAX_SHAPE:
            raise SizingError(f"--{key.replace('_', '-')} must be positive and at most {_MAX_SHAPE:g}, not {value}")
    params = float(numbers["params"])  # type: ignore[arg-type]
    active = numbers.get("active_params")
    if active is not None and float(active) > params:  # type: ignore[arg-type]
        raise SizingError(f"--active-params {active} exceeds --params {params:g}")
    heads, kv = numbers.get("heads"), numbers.get("kv_heads")
    if isinstance(heads, int) and isinstance(kv, int) and heads % kv:
        raise SizingError(f"--heads {heads} is not a multiple of --kv-heads {kv}")
    return LanguageModel(
        name=f"custom-{params:g}b",
        parameters_b=params,
        active_parameters_b=active,
        layers=numbers.get("layers"),
        hidden_size=numbers.get("hidden"),
        attention_heads=heads,
        kv_heads=kv,
        head_dim=numbers.get("head_dim"),
        vocab_size=numbers.get("vocab"),
    )


def _request(given: dict[str, object], mode: str) -> Request:
    from gpufleet.fleet.sizing import Inference, Training

    g = given.get
    if mode == "training":
        return Training(
            optimizer_bytes=float(g("optimizer_bytes", 12)),  # type: ignore[arg-type]
            checkpointing=bool(g("checkpointing", True)),
            zero_stage=int(g("zero_stage", 0)),  # type: ignore[call-overload]
            shard_degree=int(g("shard_degree", 1)),  # type: ignore[call-overload]
            micro_batch=int(g("micro_batch", 1)),  # type: ignore[call-overload]
            seq_len=int(g("seq_len", 4096)),  # type: ignore[call-overload]
        )
    dtype = str(g("dtype", "bf16")).lower()
    default_kv = dtype if dtype in ("fp32", "bf16", "fp16") else "bf16"
    return Inference(
        dtype=dtype,  # type: ignore[arg-type]  (Inference checks it: an unknown dtype is a SizingError)
        kv_dtype=str(g("kv_dtype", default_kv)).lower(),  # type: ignore[arg-type]
        context=int(g("context", 4096)),  # type: ignore[call-overload]
        concurrency=int(g("concurrency", 1)),  # type: ignore[call-overload]
    )


SHOWN_OPTIONS = 12


def _hardware(o: Option) -> str:
    if o.kind == "mig":
        return f"MIG {o.mig_profile} of {o.gpu}"
    if o.kind == "partition":
        return f"{o.amd_partition} partition of {o.gpu} ({o.partition_gib:g} GiB)"
    if o.kind == "vm":
        return f"{o.nodes} x {o.vm_size}"
    return f"{o.gpus} x {o.gpu}"


def _num(value: float | None, fmt: str, none: str) -> str:
    return none if value is None else format(value, fmt)


def _print(result: Sizing, lm: LanguageModel, request: Request) -> None:
    from gpufleet.fleet.sizing import Inference

    mem = result.memory
    what = (
        f"{request.dtype} weights, {request.kv_dtype} KV cache, {request.context} tokens x {request.concurrency}"
        if isinstance(request, Inference)
        else f"per GPU, ZeRO stage {request.zero_stage} over {request.shard_degree}"
    )
    table = Table(title=f"{shown(result.model)} {result.mode} ({shown(what)}), GB = 10^9 bytes", box=box.SIMPLE_HEAD)
    table.add_column("memory")
    table.add_column("GB", justify="right")
    rows = [("weights", mem.weights), ("KV cache", mem.kv_cache), ("activations", mem.activations)]
    rows += [("optimizer + gradients", mem.optimizer), ("overhead (1 GB/GPU + 10 %)", mem.overhead)]
    for name, value in [*rows, ("total on one GPU", mem.total)]:
        table.add_row(name, f"{value:,.2f}")
    print_table(table)
    options = Table(title="options, best first", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("hardware", "GPUs (TPxPP)", "link", "free GB", "tok/s", "$/hour"):
        options.add_column(col, no_wrap=True, justify="left" if col in ("hardware", "link") else "right")
    for o in result.options[:SHOWN_OPTIONS]:
        options.add_row(
            shown(_hardware(o)),
            f"{o.gpus} ({o.tensor_parallel}x{o.pipeline_parallel})",
            (o.interconnect or "-").replace("InfiniBand", "IB"),
            f"{o.headroom_gb:,.1f}",
            _num(o.decode_tokens_per_s, ",.0f", "?"),
            _num(o.usd_per_hour, ",.2f", "no price"),
        )
    print_table(options)
    if len(result.options) > SHOWN_OPTIONS:
        out.print(f"[dim]{len(result.options) - SHOWN_OPTIONS} more options: --json lists them all[/dim]")
    for note in result.notes:
        out.print(f"[dim]note: {shown(note)}[/dim]")
    for line in _price_lines(result.options[:SHOWN_OPTIONS]):
        out.print(f"[dim]{shown(line)}[/dim]")
    if lm.source:
        out.print(f"[dim]model source: {shown(lm.source)}[/dim]")


def _price_lines(options: tuple[Option, ...]) -> list[str]:
    """Where the prices shown come from: per region, table and date, the sizes priced from it."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for o in options:
        if o.price is not None and o.vm_size is not None:
            key = (o.price.region, o.price.table, o.price.as_of.isoformat())
            groups.setdefault(key, []).append(o.vm_size)
    return [
        f"prices in {region} from {table}, as of {as_of}: {', '.join(dict.fromkeys(sizes))}"
        for (region, table, as_of), sizes in groups.items()
    ]


def pool_name(model: str) -> str:
    """An AKS Linux pool name from a model name: lowercase letters and digits, a letter first, at most 12."""
    slug = re.sub(r"[^a-z0-9]", "", model.lower())
    return (slug if slug[:1].isalpha() else "m" + slug)[:12]


def pool_yaml(result: Sizing) -> str | None:
    """The ``gpu_pools:`` entry of the best Azure option, or None when no Azure size holds the model."""
    best = next((o for o in result.options if o.kind == "vm"), None)
    if best is None:
        return None
    amd = "  # AMD Instinct: pin release.amd_gpu_operator, which installs its driver and device plugin (docs/amd.md)\n"
    return (
        "gpu_pools:\n"
        f"  # gpufleet size: {result.model} ({result.mode}) on {best.gpus} x {best.gpu},"
        f" TP {best.tensor_parallel} x PP {best.pipeline_parallel}, headroom {best.headroom_gb:.1f} GB\n"
        + (amd if best.vendor == "amd" else "")
        + f"  - name: {pool_name(result.model)}\n"
        f"    vm_size: {best.vm_size}\n"
        f"    count: {best.nodes}\n"
    )


def _print_pool(result: Sizing) -> None:
    text = pool_yaml(result)
    if text is None:
        err.print(f"[red]error:[/red] no Azure size in the catalog holds {shown(result.model)}: no pool to write")
        raise typer.Exit(EXIT_INVALID)
    out.print(text, markup=False, end="")
