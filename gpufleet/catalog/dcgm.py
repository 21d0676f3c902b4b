"""The DCGM facts of the catalog: the exporter's (``dcgm_metrics.yaml``: the metrics gpufleet turns on, the labels
the exporter puts on its series, and how the GPU Operator's and AKS's exporters are reached) and ``dcgmi diag``'s
run levels (``dcgm_diag.yaml``). Typed, loaded once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.catalog import read_catalog_yaml


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DcgmMetric(_Frozen):
    field: str = Field(pattern=r"^DCGM_FI_[A-Z0-9_]+$")
    type: Literal["gauge", "counter"]
    unit: str
    help: str
    source: Literal["counters"]

    def csv_line(self) -> str:
        """The line of the exporter's metrics CSV (``DCGM FIELD, Prometheus metric type, help message``)."""
        return f"{self.field}, {self.type}, {self.help}"


class DcgmLabels(_Frozen):
    gpu: str
    uuid: str
    model: str
    mig_profile: str
    mig_instance: str


class OperatorExporter(_Frozen):
    service: str
    labels: dict[str, str]
    port_name: str
    port: int


class AksManagedExporter(_Frozen):
    node_label: str
    node_label_value: str
    port: int


class DcgmCatalog(_Frozen):
    labels: DcgmLabels
    operator_exporter: OperatorExporter
    aks_managed_exporter: AksManagedExporter
    metrics: tuple[DcgmMetric, ...] = Field(min_length=1)

    def metric(self, field: str) -> DcgmMetric:
        """The metric ``field``; KeyError when gpufleet does not turn it on."""
        for metric in self.metrics:
            if metric.field == field:
                return metric
        raise KeyError(field)

    def csv(self) -> str:
        """The exporter's metrics CSV: what the GPU Operator's ``dcgmExporter.config`` ConfigMap holds."""
        head = "# gpufleet's DCGM exporter metrics (gpufleet/catalog/dcgm_metrics.yaml)\n"
        return head + "".join(m.csv_line() + "\n" for m in self.metrics)


@lru_cache(maxsize=1)
def load_dcgm_catalog() -> DcgmCatalog:
    """The packaged DCGM exporter facts, parsed once per process."""
    return DcgmCatalog.model_validate(read_catalog_yaml("dcgm_metrics.yaml"))


@dataclass(frozen=True)
class DiagLevel:
    """One of ``dcgmi diag -r``'s run levels: its number, its alias and how long NVIDIA says it normally lasts."""

    level: int
    name: str
    lasts: str

    def __str__(self) -> str:
        return f"level {self.level} ({self.name}, {self.lasts})"


@lru_cache(maxsize=1)
def diag_levels() -> dict[int, DiagLevel]:
    """DCGM's run levels (gpufleet/catalog/dcgm_diag.yaml), by number."""
    return {int(x["level"]): DiagLevel(int(x["level"]), str(x["name"]), str(x["lasts"]))
            for x in read_catalog_yaml("dcgm_diag.yaml")["levels"]}  # fmt: skip
