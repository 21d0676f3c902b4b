"""Language model shapes for sizing: a small cited catalog (models.yaml beside this module) and the typed model.

A model is what the memory formulas of :mod:`gpufleet.fleet.sizing` read: parameters (total, and active for a mixture
of experts), layers, attention shape (KV heads x head dim, or an MLA latent), vocabulary, native context. The same
:class:`LanguageModel` is built from the catalog (``--model``) or from numbers given on the command line
(``--params ...``).
"""

from __future__ import annotations

from functools import cached_property, lru_cache

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpufleet.catalog import read_catalog_yaml
from gpufleet.common.diagnostics import did_you_mean


class LanguageModel(BaseModel):
    """One model's shape. Only ``parameters_b`` is always needed; the KV cache needs layers and the attention shape,
    training activations need layers, hidden size and attention heads."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    aliases: tuple[str, ...] = ()
    parameters_b: float = Field(gt=0, description="total parameters, billions")
    active_parameters_b: float | None = Field(default=None, gt=0, description="MoE: parameters used per token")
    layers: int | None = Field(default=None, gt=0)
    hidden_size: int | None = Field(default=None, gt=0)
    attention_heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    head_dim: int | None = Field(default=None, gt=0)
    intermediate_size: int | None = Field(default=None, gt=0)
    vocab_size: int | None = Field(default=None, gt=0)
    experts: int | None = Field(default=None, gt=0)
    active_experts: int | None = Field(default=None, gt=0)
    context_length: int | None = Field(default=None, gt=0)
    kv_cache_dim: int | None = Field(default=None, gt=0, description="MLA: cached elements per token and layer")
    sliding_window: int | None = Field(default=None, gt=0)
    sliding_window_layers: int = Field(default=0, ge=0)
    source: str | None = None

    @model_validator(mode="after")
    def _consistent(self) -> LanguageModel:
        if self.active_parameters_b is not None and self.active_parameters_b > self.parameters_b:
            raise ValueError(f"{self.name}: active parameters exceed the total")
        if self.kv_heads and self.attention_heads and self.attention_heads % self.kv_heads:
            raise ValueError(f"{self.name}: {self.attention_heads} attention heads are not a multiple of the KV heads")
        if self.layers is not None and self.sliding_window_layers > self.layers:
            raise ValueError(f"{self.name}: more sliding-window layers than layers")
        if (self.experts is None) != (self.active_experts is None):
            raise ValueError(f"{self.name}: give both experts and active_experts, or neither")
        return self

    @property
    def moe(self) -> bool:
        return self.experts is not None

    @property
    def parameters(self) -> float:
        return self.parameters_b * 1e9

    @property
    def active_parameters(self) -> float:
        """Parameters one token reads: the active ones of a mixture of experts, else all of them."""
        return (self.active_parameters_b or self.parameters_b) * 1e9

    @property
    def kv_elements_per_token_layer(self) -> int | None:
        """Elements cached per token in one layer: 2 (K and V) x KV heads x head dim, or an MLA model's latent."""
        if self.kv_cache_dim is not None:
            return self.kv_cache_dim
        if self.kv_heads is None or self.head_dim is None:
            return None
        return 2 * self.kv_heads * self.head_dim


class UnknownModel(LookupError):
    """A name that is no catalog model; the message suggests the nearest and lists the valid ones."""


class ModelCatalog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    models: tuple[LanguageModel, ...]

    @model_validator(mode="after")
    def _unique(self) -> ModelCatalog:
        seen: dict[str, str] = {}
        for m in self.models:
            for ident in (m.name, *m.aliases):
                if seen.setdefault(ident.lower(), m.name) != m.name:
                    raise ValueError(f"{ident!r} names both {seen[ident.lower()]} and {m.name}")
        return self

    @cached_property
    def _index(self) -> dict[str, LanguageModel]:
        return {ident.lower(): m for m in self.models for ident in (m.name, *m.aliases)}

    def find(self, name: str) -> LanguageModel | None:
        """A model by name or alias (a Hugging Face id), case-insensitive; None when unknown."""
        return self._index.get(name.strip().lower())

    def model(self, name: str) -> LanguageModel:
        """Like :meth:`find`, but raises :class:`UnknownModel` with a did-you-mean."""
        found = self.find(name)
        if found is None:
            names = [m.name for m in self.models]
            hint = did_you_mean(name.strip().lower(), names, limit=len(names))
            raise UnknownModel(f"unknown model {name!r}; {hint} (or give its shape: --params --layers ...)")
        return found


@lru_cache(maxsize=1)
def load_models() -> ModelCatalog:
    """The packaged model catalog, parsed once per process."""
    return ModelCatalog(models=tuple(read_catalog_yaml("models.yaml")["models"]))
