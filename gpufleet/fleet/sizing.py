"""Right-sizing: how much GPU memory a model needs to serve or train, and the smallest hardware that holds it.

Pure functions over the model catalog (:mod:`gpufleet.catalog.llm`) and the hardware catalog, no I/O. Every
figure is in GB = 10^9 bytes. The formulas, their sources and the margins are in docs/sizing.md; in short:

Inference
  weights     = parameters x bytes(dtype)
  kv_cache    = layers x 2 x kv_heads x head_dim x bytes(kv dtype) x context x concurrency
                (an MLA model caches its latent instead of 2 x kv_heads x head_dim; a sliding-window layer caches at
                most its window)
  activations = the working set of one prefill chunk through one layer plus the logits of one decode step:
                T x hidden x 34 bytes (Korthikanti et al. 2022: one layer's 16-bit activations, the attention
                scores left to a fused kernel) + concurrency x vocab x 4 bytes, T = min(context x concurrency, 8192)
Training (per GPU; ZeRO stage s over a sharding degree N, FSDP full shard = stage 3)
  weights     = parameters x 2 (bf16), / N from stage 3
  optimizer   = gradients (parameters x 2, / N from stage 2) + optimizer states (parameters x 12: fp32 master
                copy, Adam momentum and variance, / N from stage 1): the 16 bytes per parameter of mixed-precision
                Adam (Rajbhandari et al. 2020, ZeRO)
  activations = per layer s x b x h x (34 + 5 a s / h) bytes, or 2 x s x b x h with full activation checkpointing plus
                one layer recomputed (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
                Transformer Models"), plus fp32 logits s x b x vocab x 4
Both: overhead = 1 GB per GPU (CUDA context, framework) + 10 % of the rest (allocator fragmentation, buffers).

Hardware: NVIDIA GPUs (whole, MIG instances) and AMD Instinct GPUs (whole, and compute x memory partitions, the MIG
counterpart: :mod:`gpufleet.mig.amd_partitions`), bare and on the Azure sizes a pool can use.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from gpufleet.catalog import Catalog, Gpu, Price, VmSize
from gpufleet.catalog.llm import LanguageModel

GB = 1e9
GIB = 2**30
DTYPE_BYTES: dict[str, float] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "int4": 0.5}
Dtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
# Stated margins (ours, not measured: docs/sizing.md says why they are there and how to change them).
OVERHEAD_PER_GPU_GB = 1.0
OVERHEAD_FRACTION = 0.10
PREFILL_CHUNK_TOKENS = 8192
# Korthikanti et al. 2022, section 4: bytes of 16-bit activations per token and hidden unit in one layer, without
# the attention-score term (5as/h) and with full recomputation (2: the layer's input only).
ACTIVATION_BYTES_PER_LAYER = 34
CHECKPOINTED_BYTES_PER_LAYER = 2
# Mixed-precision Adam (ZeRO paper, section 3.1): 2 bytes bf16 weights + 2 bytes gradients + 12 bytes optimizer states.
TRAINING_WEIGHT_BYTES = 2
TRAINING_GRADIENT_BYTES = 2
ADAM_STATE_BYTES = 12
# Tensor parallelism stays inside one NVLink domain (an HGX board / one VM); more GPUs are pipeline stages.
MAX_TENSOR_PARALLEL = 8
# AMD Instinct OAM GPUs of one node are joined all to all by AMD Infinity Fabric (xGMI): on Azure's ND MI300X v5, 128
# GB/s per GPU (896 GB/s aggregate; Microsoft's ndmi300xv5-series page, ../shared/reference/amd-instinct.md section 5).
# gpufleet takes it as NVLink's counterpart inside a node: a tensor-parallel group of up to this many GPUs of one node
# talks over it, not over PCIe (the size's `nvlink: false` says "no NVLink", not "PCIe only"). Link bandwidth is not in
# the decode bound, for NVLink neither.
INFINITY_FABRIC = "Infinity Fabric"
INFINITY_FABRIC_GPUS = 8
MAX_GPUS = 64
# Beyond these a request is a typo, not a plan (and the arithmetic would overflow a float).
MAX_TOKENS = 100_000_000
MAX_COUNT = 1_000_000


class SizingError(ValueError):
    """A request that cannot be sized (missing shape, bad number, nothing fits); the message is one line."""


@dataclass(frozen=True)
class Inference:
    dtype: Dtype = "bf16"
    kv_dtype: Dtype = "bf16"
    context: int = 4096
    concurrency: int = 1

    def __post_init__(self) -> None:
        for name in ("dtype", "kv_dtype"):
            if getattr(self, name) not in DTYPE_BYTES:
                raise SizingError(f"unknown {name} {getattr(self, name)!r}; valid: {', '.join(DTYPE_BYTES)}")
        if not (1 <= self.context <= MAX_TOKENS and 1 <= self.concurrency <= MAX_COUNT):
            raise SizingError(
                f"context (1-{MAX_TOKENS:,}) and concurrency (1-{MAX_COUNT:,}) are positive whole numbers"
            )


@dataclass(frozen=True)
class Training:
    optimizer_bytes: float = ADAM_STATE_BYTES
    checkpointing: bool = True
    zero_stage: int = 0
    shard_degree: int = 1
    micro_batch: int = 1
    seq_len: int = 4096

    def __post_init__(self) -> None:
        if self.zero_stage not in (0, 1, 2, 3):
            raise SizingError(f"ZeRO stage {self.zero_stage}: valid 0, 1, 2, 3 (3 = FSDP full shard)")
        if not 0 <= self.optimizer_bytes <= 64:
            raise SizingError(f"optimizer bytes per parameter: 0-64, not {self.optimizer_bytes:g}")
        if min(self.shard_degree, self.micro_batch, self.seq_len) < 1:
            raise SizingError("shard degree, micro-batch and sequence length are positive whole numbers")
        if max(self.shard_degree, self.micro_batch) > MAX_COUNT or self.seq_len > MAX_TOKENS:
            raise SizingError(f"shard degree and micro-batch go up to {MAX_COUNT:,}, sequence length to {MAX_TOKENS:,}")
        if self.shard_degree > 1 and self.zero_stage == 0:
            raise SizingError("a shard degree above 1 needs ZeRO stage 1, 2 or 3 (3 = FSDP full shard)")


Request = Inference | Training


@dataclass(frozen=True)
class Memory:
    """GB. ``split`` is what tensor/pipeline parallelism divides among GPUs (inference weights and KV cache); the
    rest is on every GPU. Training figures are already per GPU (after ZeRO sharding)."""

    weights: float
    kv_cache: float
    activations: float
    optimizer: float
    split: float

    def per_gpu(self, gpus: int = 1) -> float:
        """What one of ``gpus`` GPUs holds, overhead included."""
        base = self.split / gpus + (self.weights + self.kv_cache + self.activations + self.optimizer - self.split)
        return OVERHEAD_PER_GPU_GB + (1 + OVERHEAD_FRACTION) * base

    @property
    def overhead(self) -> float:
        return self.per_gpu(1) - (self.weights + self.kv_cache + self.activations + self.optimizer)

    @property
    def total(self) -> float:
        return self.per_gpu(1)

    def to_dict(self) -> dict[str, float]:
        keys = ("weights", "kv_cache", "activations", "optimizer", "overhead", "total")
        return {k: round(getattr(self, k), 3) for k in keys}


def _require(model: LanguageModel, what: str, *fields: str) -> None:
    missing = [f for f in fields if getattr(model, f) is None]
    if missing:
        flags = " ".join("--" + f.replace("_size", "").replace("_", "-") for f in missing)
        raise SizingError(f"{model.name}: {what} needs {', '.join(missing)} (give {flags})")


def kv_bytes_per_token(model: LanguageModel, kv_dtype: Dtype, context: int) -> float:
    """Bytes of KV cache one sequence of ``context`` tokens holds, divided by ``context`` (per-token average)."""
    _require(model, "the KV cache", "layers")
    elements = model.kv_elements_per_token_layer
    if elements is None:
        raise SizingError(f"{model.name}: the KV cache needs kv_heads and head_dim (give --kv-heads --head-dim)")
    assert model.layers is not None
    windowed = model.sliding_window_layers if model.sliding_window else 0
    window = min(context, model.sliding_window or context)
    tokens = (model.layers - windowed) * context + windowed * window
    return elements * DTYPE_BYTES[kv_dtype] * tokens / context


def inference_memory(model: LanguageModel, req: Inference) -> Memory:
    weights = model.parameters * DTYPE_BYTES[req.dtype]
    kv = kv_bytes_per_token(model, req.kv_dtype, req.context) * req.context * req.concurrency
    _require(model, "the activations", "hidden_size")
    assert model.hidden_size is not None
    chunk = min(req.context * req.concurrency, PREFILL_CHUNK_TOKENS)
    activations = chunk * model.hidden_size * ACTIVATION_BYTES_PER_LAYER + req.concurrency * (model.vocab_size or 0) * 4
    return Memory(weights / GB, kv / GB, activations / GB, 0.0, split=(weights + kv) / GB)


def training_memory(model: LanguageModel, req: Training) -> Memory:
    _require(model, "training activations", "layers", "hidden_size", "attention_heads")
    assert model.layers and model.hidden_size and model.attention_heads
    n, p = req.shard_degree, model.parameters
    weights = p * TRAINING_WEIGHT_BYTES / (n if req.zero_stage >= 3 else 1)
    gradients = p * TRAINING_GRADIENT_BYTES / (n if req.zero_stage >= 2 else 1)
    states = p * req.optimizer_bytes / (n if req.zero_stage >= 1 else 1)
    s, b, h, a = req.seq_len, req.micro_batch, model.hidden_size, model.attention_heads
    full_layer = s * b * h * (ACTIVATION_BYTES_PER_LAYER + 5 * a * s / h)
    if req.checkpointing:
        activations = model.layers * CHECKPOINTED_BYTES_PER_LAYER * s * b * h + full_layer
    else:
        activations = model.layers * full_layer
    activations += s * b * (model.vocab_size or 0) * 4
    return Memory(weights / GB, 0.0, activations / GB, (gradients + states) / GB, split=0.0)


def memory(model: LanguageModel, req: Request) -> Memory:
    return inference_memory(model, req) if isinstance(req, Inference) else training_memory(model, req)


# -- options ---------------------------------------------------------------------------------------------------

Kind = Literal["mig", "partition", "gpu", "vm"]


@dataclass(frozen=True)
class Option:
    """One way to run the model, with what it leaves free and what it costs."""

    kind: Kind
    gpu: str
    gpus: int
    headroom_gb: float
    mig_profile: str | None = None
    amd_partition: str | None = None  # kind partition: the compute x memory pair, e.g. CPX+NPS4
    vm_size: str | None = None
    nodes: int | None = None
    decode_tokens_per_s: float | None = None
    usd_per_hour: float | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    interconnect: str | None = None
    gpus_per_node: int | None = None
    price: Price | None = None  # the price usd_per_hour comes from (its table, source and date); not in the JSON
    vendor: str = "nvidia"  # the GPU's vendor (whose software serves it); not in the JSON
    partition_gib: float | None = None  # kind partition: the memory of one logical GPU (derived); not in the JSON
    documented: bool = True  # kind partition: AMD documents the pair for the model (else the driver's rule only)

    def to_dict(self) -> dict[str, object]:
        """The CLI's JSON contract (docs: DESIGN.md, ``gpufleet size``)."""
        return {
            "kind": self.kind,
            "gpu": self.gpu,
            "mig_profile": self.mig_profile,
            "amd_partition": self.amd_partition,
            "gpus": self.gpus,
            "vm_size": self.vm_size,
            "nodes": self.nodes,
            "headroom_gb": round(self.headroom_gb, 2),
            "decode_tokens_per_s": None if self.decode_tokens_per_s is None else round(self.decode_tokens_per_s, 1),
            "usd_per_hour": None if self.usd_per_hour is None else round(self.usd_per_hour, 4),
        }


@dataclass(frozen=True)
class Sizing:
    model: str
    mode: Literal["inference", "training"]
    memory: Memory
    options: tuple[Option, ...]
    notes: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        return {
            "model": self.model,
            "mode": self.mode,
            "memory_gb": self.memory.to_dict(),
            "options": [o.to_dict() for o in self.options],
        }


def gpu_capacity_gb(gpu: Gpu) -> float:
    return gpu.memory_gib * GIB / GB


def _layouts(model: LanguageModel, max_tp: int) -> Iterator[tuple[int, int]]:
    """(tensor, pipeline) degrees, fewest GPUs first: TP a power of two dividing the KV heads, within ``max_tp``;
    pipeline stages only once TP is as wide as it can be."""
    heads = model.kv_heads or model.attention_heads
    tps = [t for t in (1, 2, 4, 8) if t <= min(max_tp, MAX_TENSOR_PARALLEL) and (heads is None or heads % t == 0)]
    yield from ((t, 1) for t in tps)
    widest = tps[-1]
    for pp in range(2, min(MAX_GPUS // widest, model.layers or MAX_GPUS) + 1):
        yield widest, pp


def decode_tokens_per_s(model: LanguageModel, req: Request, mem: Memory, bandwidth_gbs: float | None) -> float | None:
    """Upper bound on decode throughput (all sequences together): each step reads the weights one token uses
    (the active parameters of a MoE) and every sequence's KV cache; ``bandwidth_gbs`` is the memory bandwidth
    of the GPUs the step reads from in parallel (tensor-parallel GPUs add up; pipeline stages take turns)."""
    if not isinstance(req, Inference) or bandwidth_gbs is None:
        return None
    per_step = model.active_parameters * DTYPE_BYTES[req.dtype] + mem.kv_cache * GB
    return req.concurrency * bandwidth_gbs * GB / per_step


def infinity_fabric(gpu: Gpu) -> bool:
    """Whether ``gpu``'s GPUs of one node are joined by AMD Infinity Fabric: AMD Instinct OAM modules (MI300X and
    later; not PCIe cards such as the Radeon PRO V710)."""
    return gpu.vendor == "amd" and gpu.partitions is not None and gpu.form_factor == "OAM"


def _interconnect(gpu: Gpu, tp: int, pp: int, vm: VmSize | None) -> str | None:
    """What the GPUs of one model replica talk over: NVLink, Infinity Fabric or PCIe inside a node, InfiniBand between
    nodes. On an Azure size, NVLink when the size joins its GPUs with it; on bare GPUs, when the tensor-parallel group
    fits in the part's NVLink domain (an HGX board's 8, a bridge's 2). AMD Instinct OAM GPUs: Infinity Fabric for a
    group within one node (:data:`INFINITY_FABRIC_GPUS`)."""
    parts = []
    if tp > 1 and infinity_fabric(gpu):
        parts.append(INFINITY_FABRIC if tp <= INFINITY_FABRIC_GPUS else "PCIe")
    elif tp > 1:
        domain = gpu.nvlink_domain_gpus or 1
        nvlink = vm.nvlink if vm is not None else tp <= domain
        parts.append("NVLink" if nvlink else "PCIe")
    if vm is not None and math.ceil(tp * pp / vm.whole_gpus) > 1:
        parts.append("InfiniBand")
    return "+".join(parts) or None


def _fit(model: LanguageModel, mem: Memory, gpu: Gpu, max_tp: int, training: bool) -> tuple[int, int] | None:
    cap = gpu_capacity_gb(gpu)
    if training:  # per-GPU figures are given by the sharding; no model parallelism is planned for training
        return (1, 1) if mem.per_gpu(1) <= cap else None
    return next(((t, p) for t, p in _layouts(model, max_tp) if mem.per_gpu(t * p) <= cap), None)


def sized_gpu(gpu: Gpu) -> bool:
    """A GPU gpufleet sizes onto: NVIDIA's, and AMD Instinct (the GPUs the AMD GPU Operator serves: those with
    compute x memory partitions); not other AMD GPUs (Radeon PRO V710, Radeon Instinct MI25), which gpufleet's AKS
    pools refuse."""
    return gpu.vendor == "nvidia" or (gpu.vendor == "amd" and gpu.partitions is not None)


def eligible_sizes(catalog: Catalog, today: _dt.date, gpu: Gpu | None = None) -> list[VmSize]:
    """Azure sizes a pool can use for this: in service, on AKS, not confidential (a confidential VM is a security
    choice, not a fit for a model: its pools need the GPU Operator's driver), whole GPUs gpufleet sizes onto (NVIDIA,
    AMD Instinct: :func:`sized_gpu`; ``gpu``'s only, when given)."""
    sizes = []
    for vm in catalog.vm_sizes:
        model = catalog.gpu(vm.gpu)
        if vm.retired(today) or not vm.aks_supported or vm.confidential or vm.whole_gpus < 1 or not sized_gpu(model):
            continue
        if gpu is None or model.name == gpu.name:
            sizes.append(vm)
    return sizes


def _mig_option(model: LanguageModel, req: Request, mem: Memory, gpu: Gpu) -> Option | None:
    """The smallest MIG instance of ``gpu`` that holds everything one GPU would (one instance, no parallelism)."""
    from gpufleet import mig

    if gpu.mig is None or (isinstance(req, Training) and req.shard_degree > 1):
        return None
    need = mem.per_gpu(1)
    try:
        profile = mig.profile_for_memory(gpu, need * GB / GIB)
    except mig.MigError:
        return None
    usable_gib, _published = mig.usable_gib(gpu, profile)
    share = profile.memory_slices / gpu.mig.memory_slices
    bandwidth = gpu.memory_bandwidth_gbs * share if gpu.memory_bandwidth_gbs else None
    return Option(
        kind="mig",
        gpu=gpu.name,
        gpus=1,
        headroom_gb=usable_gib * GIB / GB - need,
        mig_profile=profile.name,
        decode_tokens_per_s=decode_tokens_per_s(model, req, mem, bandwidth),
    )


def _partition_option(model: LanguageModel, req: Request, mem: Memory, gpu: Gpu) -> Option | None:
    """The smallest AMD compute x memory partition of ``gpu`` whose logical GPU holds everything one GPU would (one
    logical GPU, no parallelism): the pair with the most logical GPUs that holds it (:func:`gpufleet.mig.
    amd_partitions.pairs_for_memory`), never the whole GPU (SPX: that is the ``gpu`` option). Its memory is derived (the
    GPU's split evenly, before the driver's reservations); it gets 1 / logical GPUs of the GPU's memory bandwidth,
    as a MIG instance gets its memory slices' share (every partition of the GPU busy)."""
    from gpufleet.mig.amd_partitions import pairs_for_memory

    if gpu.partitions is None or (isinstance(req, Training) and req.shard_degree > 1):
        return None
    need = mem.per_gpu(1)
    pair = next((p for p in pairs_for_memory(gpu, need * GB / GIB) if p.logical_gpus > 1), None)
    if pair is None:
        return None
    bandwidth = gpu.memory_bandwidth_gbs / pair.logical_gpus if gpu.memory_bandwidth_gbs else None
    return Option(
        kind="partition",
        gpu=gpu.name,
        gpus=1,
        headroom_gb=pair.memory_gib * GIB / GB - need,
        amd_partition=pair.name,
        decode_tokens_per_s=decode_tokens_per_s(model, req, mem, bandwidth),
        vendor=gpu.vendor,
        partition_gib=pair.memory_gib,
        documented=pair.documented,
    )


def _smallest_slices(model: LanguageModel, req: Request, mem: Memory, catalog: Catalog) -> Iterator[Option]:
    """Without a GPU named: the smallest MIG instance that holds the need across the catalog's MIG GPUs, and the
    smallest AMD partition across its Instinct GPUs (the least memory that holds it; equal ones: the first in the
    catalog). The slice is the answer most users want first: it is ranked with the whole GPUs."""
    candidates = {g.name: g for g in catalog.gpus if sized_gpu(g)}

    def a_slice(o: Option) -> bool:  # a 7g instance is the whole GPU: that is the gpu option
        geometry = candidates[o.gpu].mig
        profile = geometry.profile(o.mig_profile) if geometry is not None and o.mig_profile else None
        return profile is None or profile.memory_slices < geometry.memory_slices  # type: ignore[union-attr]

    for make in (_mig_option, _partition_option):
        options = [o for o in (make(model, req, mem, g) for g in candidates.values()) if o is not None and a_slice(o)]
        if options:
            yield min(options, key=lambda o: o.headroom_gb)


def _whole_option(
    model: LanguageModel, req: Request, mem: Memory, gpu: Gpu, vm: VmSize | None, price: Price | None
) -> Option | None:
    """Whole GPUs (``vm``: on that Azure size, TP within one VM): the fewest that hold the model."""
    training = isinstance(req, Training)
    fit = _fit(model, mem, gpu, vm.whole_gpus if vm else MAX_TENSOR_PARALLEL, training)
    if fit is None:
        return None
    tp, pp = fit
    gpus = req.shard_degree if isinstance(req, Training) else tp * pp
    if vm is not None and gpus > vm.whole_gpus and not vm.infiniband:
        return None  # one replica across VMs needs InfiniBand between them (ND sizes)
    bandwidth = gpu.memory_bandwidth_gbs * tp if gpu.memory_bandwidth_gbs else None
    nodes = math.ceil(gpus / vm.whole_gpus) if vm else None
    rate = price.pay_as_you_go if price is not None else None
    return Option(
        kind="vm" if vm else "gpu",
        gpu=gpu.name,
        gpus=gpus,
        headroom_gb=gpus * (gpu_capacity_gb(gpu) - mem.per_gpu(tp * pp)),
        vm_size=vm.name if vm else None,
        nodes=nodes,
        decode_tokens_per_s=decode_tokens_per_s(model, req, mem, bandwidth),
        usd_per_hour=rate * nodes if rate is not None and nodes is not None else None,
        price=price if rate is not None else None,
        tensor_parallel=tp,
        pipeline_parallel=pp,
        interconnect=_interconnect(gpu, tp, pp, vm),
        gpus_per_node=vm.whole_gpus if vm else None,
        vendor=gpu.vendor,
    )


def _rank(options: list[Option]) -> tuple[Option, ...]:
    """MIG instances and AMD partitions first (a slice of one GPU), then whole GPUs (fewest, then most headroom), then
    Azure sizes (cheapest priced first; unpriced ones by the GPUs paid for: nodes x GPUs per node, then the GPUs
    used)."""
    order = {"mig": 0, "partition": 0, "gpu": 1, "vm": 2}

    def key(o: Option) -> tuple[object, ...]:
        if o.kind == "vm":
            paid = (o.nodes or 0) * (o.gpus_per_node or 0)
            return (order[o.kind], o.usd_per_hour is None, o.usd_per_hour or 0.0, paid, o.gpus, o.vm_size or "")
        return (order[o.kind], o.gpus, -o.headroom_gb, o.gpu)

    return tuple(sorted(options, key=key))


def _nothing_fits(model: LanguageModel, req: Request, mem: Memory, gpus: list[Gpu]) -> str:
    biggest = max(gpus, key=gpu_capacity_gb)
    cap = gpu_capacity_gb(biggest)
    if isinstance(req, Training):
        need = mem.per_gpu(1)
        return (
            f"nothing fits: {model.name} training needs {need:.1f} GB per GPU; the largest GPU, {biggest.name}, has"
            f" {cap:.1f} GB ({need - cap:.1f} GB short): shard more (--zero-stage 3 --shard-degree N), turn on"
            " --checkpointing, or shorten --seq-len / --micro-batch"
        )
    tp, pp = list(_layouts(model, MAX_TENSOR_PARALLEL))[-1]
    need = mem.per_gpu(tp * pp)
    return (
        f"nothing fits: {model.name} needs {mem.total:.1f} GB; the largest option, {tp * pp} x {biggest.name}"
        f" (TP {tp} x PP {pp}), would need {need:.1f} GB per GPU of {cap:.1f} GB ({need - cap:.1f} GB short):"
        " lower --context / --concurrency or use a smaller --dtype / --kv-dtype"
    )


def _notes(model: LanguageModel, req: Request, options: tuple[Option, ...], region: str | None) -> tuple[str, ...]:
    notes = []
    if region is None:
        notes.append("no --region: no prices (usd_per_hour null)")
    elif any(o.kind == "vm" and o.usd_per_hour is None for o in options):
        notes.append(f"no price in the price tables for some sizes in {region}: usd_per_hour null, never 0")
    pcie = sorted({o.gpu for o in options if o.tensor_parallel > 1 and o.interconnect and "PCIe" in o.interconnect})
    if pcie:
        notes.append(
            f"tensor-parallel traffic over PCIe for {', '.join(pcie)}: no NVLink joins that many of their GPUs"
            " (a bridge joins 2, an HGX board 8; some sizes and cards have none)"
        )
    fabric = sorted(
        {o.gpu for o in options if o.tensor_parallel > 1 and o.interconnect and INFINITY_FABRIC in o.interconnect}
    )
    if fabric:
        notes.append(
            f"tensor-parallel traffic over AMD Infinity Fabric (xGMI) for {', '.join(fabric)}: all to all between the"
            f" GPUs of a node, up to {INFINITY_FABRIC_GPUS} (ND MI300X v5: 128 GB/s per GPU, 896 GB/s aggregate);"
            " gpufleet plans tensor parallelism over it as over NVLink"
        )
    if any(o.vendor == "amd" for o in options):
        notes.append(
            "AMD Instinct options serve with ROCm builds of the engines (vLLM, SGLang); the same overhead margin"
            " (1 GB per GPU + 10 %) is assumed, not measured on ROCm"
        )
    from gpufleet.mig.amd_partitions import dcm_applies

    for o in (o for o in options if o.kind == "partition"):
        unlisted = "" if o.documented else f"; AMD does not list {o.amd_partition} for {o.gpu}: the driver allows it"
        if not dcm_applies(*(o.amd_partition or "+").split("+")):
            unlisted += (
                f"; the AMD GPU Operator's Device Config Manager (AKS pools) does not apply {o.amd_partition}: a"
                " bare-metal host group does (amd_partitions managed_by: host)"
            )
        notes.append(
            f"{o.amd_partition} partition of {o.gpu}: {o.partition_gib:g} GiB per logical GPU, derived (the GPU's"
            " memory split evenly, before the driver's reservations: AMD publishes no usable figure); its decode bound"
            f" takes the GPU's memory bandwidth divided by its logical GPUs{unlisted}"
        )
    if isinstance(req, Inference):
        unknown = sorted({o.gpu for o in options if o.decode_tokens_per_s is None})
        if unknown:
            notes.append(f"memory bandwidth not in the catalog for {', '.join(unknown)}: decode tokens/s unknown")
        if model.moe:
            notes.append(
                f"MoE: a decode step reads the {model.active_parameters / 1e9:g}B active parameters; larger batches"
                " touch more experts, so the tokens/s bound is optimistic"
            )
    return tuple(notes)


def size(
    model: LanguageModel,
    req: Request,
    catalog: Catalog,
    *,
    today: _dt.date,
    gpu: Gpu | None = None,
    region: str | None = None,
) -> Sizing:
    """The memory breakdown of ``model`` under ``req`` and every option that holds it, best first. Raises
    :class:`SizingError` when the request is wrong or nothing fits."""
    if region is not None and region not in catalog.region_names:
        from gpufleet.common.diagnostics import did_you_mean

        raise SizingError(f"unknown region {region!r}; {did_you_mean(region, catalog.region_names)}")
    if gpu is not None and not sized_gpu(gpu):
        instinct = ", ".join(g.name for g in catalog.gpus if g.vendor == "amd" and sized_gpu(g))
        raise SizingError(
            f"gpufleet sizes NVIDIA GPUs and AMD Instinct {instinct}, not {gpu.name} ({gpu.vendor.upper()})"
        )
    if isinstance(req, Inference) and model.context_length and req.context > model.context_length:
        raise SizingError(f"context {req.context} exceeds {model.name}'s native context of {model.context_length}")
    mem = memory(model, req)
    sizes = eligible_sizes(catalog, today, gpu)
    models = (
        [gpu] if gpu is not None else list({catalog.gpu(vm.gpu).name: catalog.gpu(vm.gpu) for vm in sizes}.values())
    )
    found: list[Option | None] = (
        [_mig_option(model, req, mem, gpu), _partition_option(model, req, mem, gpu)]
        if gpu is not None
        else list(_smallest_slices(model, req, mem, catalog))
    )
    found += [_whole_option(model, req, mem, g, None, None) for g in models]
    for vm in sizes:
        price = catalog.price(vm.name, region) if region else None
        found.append(_whole_option(model, req, mem, catalog.gpu(vm.gpu), vm, price))
    options = _rank([o for o in found if o is not None])
    if not options:
        raise SizingError(_nothing_fits(model, req, mem, models))
    mode: Literal["inference", "training"] = "inference" if isinstance(req, Inference) else "training"
    return Sizing(model.name, mode, mem, options, _notes(model, req, options, region))
