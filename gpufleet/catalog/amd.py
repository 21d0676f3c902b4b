"""The AMD Instinct facts of the catalog that monitoring and remediation read: AMD's Device Metrics Exporter
(``amd_metrics.yaml``: the Service the AMD GPU Operator creates for it, the labels on its series, the metrics
gpufleet reads) and AMD GPU faults (``amd_faults.yaml``: each signal, where it is read, gpufleet's action and on
what basis). Typed, loaded once."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog import read_catalog_yaml


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AmdMetric(_Frozen):
    name: str = Field(pattern=r"^gpu_[a-z0-9_]+$", description="the Prometheus name the exporter serves")
    field: str = Field(pattern=r"^GPU_[A-Z0-9_]+$", description="the exporter's field (its config's Fields)")
    type: Literal["gauge"]
    unit: str
    help: str
    source: Literal["gauges", "afid", "activity"]


class AmdLabels(_Frozen):
    gpu: str
    partition: str
    compute_partition: str
    model: str
    serial: str
    hostname: str


class AmdOperatorExporter(_Frozen):
    service_suffix: str
    service_label: str
    default_device_config: str
    port_name: str
    port: int
    path: str

    def service(self, device_config: str) -> str:
        """The exporter Service the operator creates for the DeviceConfig ``device_config``."""
        return device_config + self.service_suffix


class AmdMetricsCatalog(_Frozen):
    labels: AmdLabels
    operator_exporter: AmdOperatorExporter
    metrics: tuple[AmdMetric, ...] = Field(min_length=1)

    def metric(self, name: str) -> AmdMetric:
        """The metric ``name``; KeyError when gpufleet does not read it."""
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(name)


Action = Literal["none", "cordon", "gpu-reset", "reboot", "power-cycle"]  # gpufleet.spec.types.Action's values


class AmdFaultSignal(_Frozen):
    """One AMD fault signal: gpufleet's action (or the Xid whose action it follows) and the basis of it."""

    signal: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    read: tuple[Literal["exporter", "sysfs"], ...] = Field(min_length=1)
    action: Action | None = None
    like_xid: int | None = None
    probe: tuple[str, ...] = ()  # amdgpuhealth's arguments for a node-problem-detector rule
    amd: str = Field(min_length=1, description="what AMD documents about it")
    why: str = Field(min_length=1, description="gpufleet's reasoning for the action")

    @model_validator(mode="after")
    def _one_action(self) -> AmdFaultSignal:
        if (self.action is None) == (self.like_xid is None):
            raise ValueError(f"{self.signal}: give exactly one of action and like_xid")
        if self.probe and "exporter" not in self.read:
            raise ValueError(f"{self.signal}: amdgpuhealth probes the exporter, which does not report it")
        return self


class AmdFaultCatalog(_Frozen):
    signals: tuple[AmdFaultSignal, ...] = Field(min_length=1)

    def signal(self, name: str) -> AmdFaultSignal | None:
        return next((s for s in self.signals if s.signal == name), None)


@lru_cache(maxsize=1)
def load_amd_metrics() -> AmdMetricsCatalog:
    """The packaged AMD metrics exporter facts, parsed once per process."""
    return AmdMetricsCatalog.model_validate(read_catalog_yaml("amd_metrics.yaml"))


@lru_cache(maxsize=1)
def load_amd_faults() -> AmdFaultCatalog:
    """The packaged AMD fault signals, parsed once per process."""
    return AmdFaultCatalog.model_validate(read_catalog_yaml("amd_faults.yaml"))
