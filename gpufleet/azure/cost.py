"""What a stack's AKS node pools cost, from the catalog's prices. Pure: a valid stack and a catalog in, typed figures
out; the CLI (``gpufleet cost``, ``plan``'s cost lines, ``promote``'s cost delta) only prints them. The catalog the CLI
hands in is priced with the user's refreshed tables before the shipped ``catalog/azure_prices.yaml``
(:func:`gpufleet.azure.prices.priced_catalog`); each price names its table, source and date.

What is counted: the VMs of every node pool, the system pool and each GPU pool, at the price of their size in the
stack's region (Linux, USD per hour). A spot pool is priced at the spot price, every other pool at pay-as-you-go;
reservations are shown as what the always-on nodes would cost reserved. Not counted: the cluster's tier fee, disks,
network, Log Analytics, Defender, bare-metal hosts. A size with no price in the table has ``None`` figures (shown as
"no price"), never 0. Money is computed in :class:`~decimal.Decimal` from the table's figures and rounded once, at
the end, to 4 decimal places.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any, Literal

from gpufleet.catalog import SHIPPED_PRICES, Catalog, Price
from gpufleet.spec.models import Stack

# A month is 730 hours: 365 days x 24 hours / 12 months, the month Azure's price pages and Microsoft's pricing guidance
# use for monthly estimates ("monthly = retail price x 730", github.com/microsoft/azure-skills,
# skills/azure-app-onboard/prepare/references/subagent-pricing.md).
HOURS_PER_MONTH = 730

# Stages whose GPU pools may stay on when idle: production serves traffic at any hour. Every other stage (dev,
# staging, test, a region's canary...) is warned about GPU nodes that cannot scale to zero.
PRODUCTION_STAGES = frozenset({"prod", "production", "prd"})

_PLACES = Decimal("0.0001")


def _money(value: Decimal | None) -> float | None:
    return None if value is None else float(value.quantize(_PLACES))


def _dec(value: float | None) -> Decimal | None:
    return None if value is None else Decimal(str(value))


def _times(rate: Decimal | None, factor: int) -> Decimal | None:
    return None if rate is None else rate * factor


@dataclass(frozen=True)
class PoolCost:
    """One node pool's figures, in the catalog's currency. Every money figure is None when the size has no price
    (for a spot pool: no spot price) in the stack's region."""

    name: str
    kind: Literal["system", "gpu"]
    vm_size: str
    nodes_min: int
    nodes_now: int
    nodes_max: int
    autoscaling: bool
    spot: bool
    price: Price | None  # the table's entry for the size in the region (None: no entry)
    priced_at: Literal["pay_as_you_go", "spot"]
    usd_per_node_hour: Decimal | None  # the rate the pool is priced at
    spot_savings_per_node_hour: Decimal | None  # pay-as-you-go minus spot (None: either is unknown)
    warnings: tuple[str, ...] = ()

    @property
    def priced(self) -> bool:
        return self.usd_per_node_hour is not None

    @property
    def missing(self) -> str | None:
        """Why the pool has no figures ("no price", "no spot price"), or None when it has them."""
        if self.priced:
            return None
        return "no spot price" if self.spot and self.price is not None else "no price"

    def per_hour(self, nodes: int) -> Decimal | None:
        return _times(self.usd_per_node_hour, nodes)

    def per_month(self, nodes: int) -> Decimal | None:
        return _times(self.usd_per_node_hour, nodes * HOURS_PER_MONTH)

    @property
    def idle_per_hour(self) -> Decimal | None:
        """What the pool costs with no work on it: the nodes the autoscaler keeps (its minimum), or every node of a
        pool without autoscaling."""
        return self.per_hour(self.nodes_min)

    def spot_savings_per_hour(self, nodes: int) -> Decimal | None:
        """Pay-as-you-go minus spot for ``nodes`` nodes: what spot saves (a spot pool) or would save (the others)."""
        return _times(self.spot_savings_per_node_hour, nodes)

    def reserved_per_month(self, term: Literal["1y", "3y"]) -> Decimal | None:
        """The always-on nodes (the minimum) for a month at a reservation's hourly price; None for spot pools
        (reservations do not apply to spot VMs) and when the table has no such price."""
        if self.spot or self.price is None:
            return None
        rate = _dec(self.price.reserved_1y if term == "1y" else self.price.reserved_3y)
        return _times(rate, self.nodes_min * HOURS_PER_MONTH)

    def to_dict(self) -> dict[str, Any]:
        """The ``gpufleet cost`` JSON of the pool: the contract's keys first, then gpufleet's additions."""
        return {
            "name": self.name,
            "vm_size": self.vm_size,
            "nodes_min": self.nodes_min,
            "nodes_max": self.nodes_max,
            "usd_per_hour_min": _money(self.per_hour(self.nodes_min)),
            "usd_per_hour_max": _money(self.per_hour(self.nodes_max)),
            "usd_per_month_min": _money(self.per_month(self.nodes_min)),
            "usd_per_month_max": _money(self.per_month(self.nodes_max)),
            "spot": self.spot,
            "idle_usd_per_hour": _money(self.idle_per_hour),
            "kind": self.kind,
            "nodes_now": self.nodes_now,
            "usd_per_hour_now": _money(self.per_hour(self.nodes_now)),
            "autoscaling": self.autoscaling,
            "priced_at": self.priced_at,
            "usd_per_node_hour": None if self.usd_per_node_hour is None else float(self.usd_per_node_hour),
            "spot_savings_usd_per_hour_min": _money(self.spot_savings_per_hour(self.nodes_min)),
            "spot_savings_usd_per_hour_max": _money(self.spot_savings_per_hour(self.nodes_max)),
            "reserved_1y_usd_per_month_min": _money(self.reserved_per_month("1y")),
            "reserved_3y_usd_per_month_min": _money(self.reserved_per_month("3y")),
            "price": None
            if self.price is None
            else {
                "pay_as_you_go": self.price.pay_as_you_go,
                "spot": self.price.spot,
                "reserved_1y": self.price.reserved_1y,
                "reserved_3y": self.price.reserved_3y,
                "source": self.price.source,
                "as_of": self.price.as_of.isoformat(),
                "table": self.price.table,
            },
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class Totals:
    """The sum of the priced pools' figures (None when no pool has a price); ``unpriced`` names the pools left out,
    so a total is never taken for complete when it is not."""

    per_hour_min: Decimal | None  # None: no pool has a price
    per_hour_now: Decimal | None
    per_hour_max: Decimal | None
    idle_per_hour: Decimal | None
    unpriced: tuple[str, ...]

    @property
    def per_month_min(self) -> Decimal | None:
        return _times(self.per_hour_min, HOURS_PER_MONTH)

    @property
    def per_month_now(self) -> Decimal | None:
        return _times(self.per_hour_now, HOURS_PER_MONTH)

    @property
    def per_month_max(self) -> Decimal | None:
        return _times(self.per_hour_max, HOURS_PER_MONTH)

    @property
    def complete(self) -> bool:
        return not self.unpriced

    def to_dict(self) -> dict[str, Any]:
        return {
            "usd_per_hour_min": _money(self.per_hour_min),
            "usd_per_hour_now": _money(self.per_hour_now),
            "usd_per_hour_max": _money(self.per_hour_max),
            "usd_per_month_min": _money(self.per_month_min),
            "usd_per_month_max": _money(self.per_month_max),
            "idle_usd_per_hour": _money(self.idle_per_hour),
            "complete": self.complete,
            "unpriced_pools": list(self.unpriced),
        }


def totals(pools: Iterable[PoolCost]) -> Totals:
    pools = list(pools)
    priced = [p for p in pools if p.priced]

    def total(nodes: str) -> Decimal | None:
        if not priced:
            return None
        return sum((p.per_hour(getattr(p, nodes)) or Decimal(0) for p in priced), Decimal(0))

    return Totals(
        per_hour_min=total("nodes_min"),
        per_hour_now=total("nodes_now"),
        per_hour_max=total("nodes_max"),
        idle_per_hour=total("nodes_min"),
        unpriced=tuple(p.name for p in pools if not p.priced),
    )


@dataclass(frozen=True)
class StackCost:
    stack: str
    stage: str
    region: str
    currency: str
    pools: tuple[PoolCost, ...]
    notes: tuple[str, ...] = ()
    price_tables: tuple[str, ...] = (SHIPPED_PRICES,)  # the tables looked in, the first one's prices first

    @property
    def totals(self) -> Totals:
        return totals(self.pools)

    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(w for p in self.pools for w in p.warnings)

    def pool(self, name: str) -> PoolCost | None:
        return next((p for p in self.pools if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        """The ``gpufleet cost STACK`` JSON (docs/cost.md): ``{stack, currency, pools:[...]}`` and gpufleet's
        additions (``hours_per_month``, ``totals``, ``notes``)."""
        return {
            "stack": self.stack,
            "currency": self.currency,
            "pools": [p.to_dict() for p in self.pools],
            "stage": self.stage,
            "region": self.region,
            "hours_per_month": HOURS_PER_MONTH,
            "totals": self.totals.to_dict(),
            "notes": list(self.notes),
            "price_tables": list(self.price_tables),
        }


def is_production(stage: str) -> bool:
    return stage in PRODUCTION_STAGES


def _always_on_warning(
    stack: Stack, name: str, nodes_min: int, autoscaling: bool, idle: Decimal | None, currency: str
) -> str:
    assert stack.aks is not None
    profile = stack.aks.cluster.autoscaler_profile
    cost = f" ({money(idle, currency)}/h idle)" if idle is not None else " (no price)"
    why = f"autoscaling min is {nodes_min}" if autoscaling else f"no autoscaling, {nodes_min} node(s)"
    pool = next(p for p in stack.aks.gpu_pools if p.name == name)
    nap = any(p.kind == "nap" for p in stack.aks.gpu_pools)
    if pool.gpu_management == "managed" or nap:
        # no cluster autoscaler on AKS-managed GPU pools in the preview, nor on any node pool next to NAP
        reason = "AKS-managed GPU pools take no cluster autoscaler" if not nap else "with NAP on, no pool autoscales"
        aks_mig = pool.mig is not None and pool.mig.managed_by == "aks"  # a NAP NodePool has no AKS MIG profile
        nap_hint = (
            ""
            if aks_mig
            else f"make it kind: nap (NAP removes empty nodes after {profile.scale_down_unneeded_time}), or "
        )
        always_on = f"GPU pool {name} in stage {stack.stage} is always on: {why}{cost}"
        return f"{always_on}; {reason}: {nap_hint}set count 0 while it idles"
    return (
        f"GPU pool {name} in stage {stack.stage} is always on: {why}{cost}; set autoscaling"
        f" {{min: 0, max: N}} with scale_to_zero: true, and let the cluster autoscaler remove idle nodes"
        f" (aks.cluster.autoscaler_profile: scale_down_unneeded_time {profile.scale_down_unneeded_time},"
        f" scale_down_delay_after_add {profile.scale_down_delay_after_add})"
    )


def _pool_cost(
    name: str,
    kind: Literal["system", "gpu"],
    vm_size: str,
    nodes: tuple[int, int, int],
    autoscaling: bool,
    spot: bool,
    price: Price | None,
) -> PoolCost:
    payg = _dec(price.pay_as_you_go) if price else None
    spot_rate = _dec(price.spot) if price else None
    nodes_min, nodes_now, nodes_max = nodes
    return PoolCost(
        name=name,
        kind=kind,
        vm_size=vm_size,
        nodes_min=nodes_min,
        nodes_now=nodes_now,
        nodes_max=nodes_max,
        autoscaling=autoscaling,
        spot=spot,
        price=price,
        priced_at="spot" if spot else "pay_as_you_go",
        usd_per_node_hour=spot_rate if spot else payg,
        spot_savings_per_node_hour=payg - spot_rate if payg is not None and spot_rate is not None else None,
    )


def stack_cost(stack: Stack, catalog: Catalog) -> StackCost:
    """The cost of a *valid* stack's AKS pools: the system pool, then the GPU pools in the stack's order."""
    notes: list[str] = []
    pools: list[PoolCost] = []
    if stack.aks is not None:
        system = stack.aks.cluster.system_pool
        pools.append(
            _pool_cost(
                system.name,
                "system",
                system.vm_size,
                (system.count, system.count, system.count),
                False,
                False,
                catalog.price(system.vm_size, stack.region),
            )
        )
        for pool in stack.aks.gpu_pools:
            autoscaled = pool.kind == "nap" or pool.autoscaling is not None  # NAP scales a nap pool itself
            nodes = pool.node_range
            cost = _pool_cost(
                pool.name,
                "gpu",
                pool.vm_size,
                nodes,
                autoscaled,
                pool.spot is not None,
                catalog.price(pool.vm_size, stack.region),
            )
            if cost.nodes_min > 0 and not is_production(stack.stage):
                warning = _always_on_warning(
                    stack, pool.name, cost.nodes_min, autoscaled, cost.idle_per_hour, catalog.currency
                )
                cost = replace(cost, warnings=(warning,))
            pools.append(cost)
    if stack.baremetal is not None:
        notes.append(
            "bare-metal host groups have no cloud cost in the catalog: they are not counted"
            if stack.aks is not None
            else "a bare-metal stack: its hosts have no cloud cost in the catalog, nothing to count"
        )
    if missing := [p for p in pools if p.missing]:
        listed = ", ".join(f"{p.missing} for {p.vm_size} ({p.name})" for p in missing)
        tables = catalog.price_tables
        where = f"{tables[0]} has" if len(tables) == 1 else f"the price tables {', '.join(tables)} have"
        notes.append(
            f"{where} {listed} in {stack.region}: left out of the totals (gpufleet azure prices reads prices from"
            " Azure: docs/azure.md)"
        )
    return StackCost(
        stack.name, stack.stage, stack.region, catalog.currency, tuple(pools), tuple(notes), catalog.price_tables
    )


# -- what a change to a stack does to its cost (promotion) ------------------------------------------------------


Figure = Literal["usd_per_hour_min", "usd_per_hour_max", "usd_per_month_min", "usd_per_month_max"]
FIGURES: tuple[Figure, ...] = ("usd_per_hour_min", "usd_per_hour_max", "usd_per_month_min", "usd_per_month_max")


def _figures(pool: PoolCost | None) -> dict[Figure, Decimal | None]:
    if pool is None:  # a pool that is not there costs nothing
        return dict.fromkeys(FIGURES, Decimal(0))
    return {
        "usd_per_hour_min": pool.per_hour(pool.nodes_min),
        "usd_per_hour_max": pool.per_hour(pool.nodes_max),
        "usd_per_month_min": pool.per_month(pool.nodes_min),
        "usd_per_month_max": pool.per_month(pool.nodes_max),
    }


def _cost_key(pool: PoolCost | None) -> tuple[Any, ...] | None:
    """What a pool's cost depends on: two pools with the same key cost the same, priced or not."""
    if pool is None:
        return None
    return (pool.vm_size.lower(), pool.nodes_min, pool.nodes_max, pool.spot, pool.price)


@dataclass(frozen=True)
class PoolDelta:
    name: str
    before: PoolCost | None  # None: the pool is new
    after: PoolCost | None  # None: the pool goes

    @property
    def changed(self) -> bool:
        return _cost_key(self.before) != _cost_key(self.after)

    def delta(self, figure: Figure) -> Decimal | None:
        """after - before; 0 for an unchanged pool even without a price, None when a changed side has no price."""
        if not self.changed:
            return Decimal(0)
        before, after = _figures(self.before)[figure], _figures(self.after)[figure]
        return None if before is None or after is None else after - before

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "changed": self.changed,
            "before": None if self.before is None else {f: _money(v) for f, v in _figures(self.before).items()},
            "after": None if self.after is None else {f: _money(v) for f, v in _figures(self.after).items()},
            "delta": {f: _money(self.delta(f)) for f in FIGURES},
        }


@dataclass(frozen=True)
class CostDelta:
    """What a change to one stack (a promotion's new stack file) does to its cost, pool by pool."""

    stack: str
    currency: str
    pools: tuple[PoolDelta, ...]
    hours_per_month: int = HOURS_PER_MONTH

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.pools)

    def total(self, figure: Figure) -> Decimal | None:
        """The sum of the pools' deltas; None when one of them is unknown (a changed pool without a price)."""
        deltas = [p.delta(figure) for p in self.pools]
        return None if any(d is None for d in deltas) else sum((d for d in deltas if d is not None), Decimal(0))

    @property
    def prices(self) -> tuple[Price, ...]:
        """The prices the changed pools' figures come from (before and after), each once."""
        sides = (side for p in self.pools if p.changed for side in (p.before, p.after))
        return tuple(dict.fromkeys(side.price for side in sides if side is not None and side.price is not None))

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "currency": self.currency,
            "changed": self.changed,
            "hours_per_month": self.hours_per_month,
            "pools": [p.to_dict() for p in self.pools],
            "total_delta": {f: _money(self.total(f)) for f in FIGURES},
            "prices": [
                {"vm_size": p.vm_size, "region": p.region, "table": p.table, "as_of": p.as_of.isoformat()}
                for p in self.prices
            ],
        }


def cost_delta(before: StackCost, after: StackCost) -> CostDelta:
    """Pool by pool (by name; the system pool first, then ``before``'s order, then pools only ``after`` has)."""
    names = list(dict.fromkeys([*(p.name for p in before.pools), *(p.name for p in after.pools)]))
    return CostDelta(after.stack, after.currency, tuple(PoolDelta(n, before.pool(n), after.pool(n)) for n in names))


def money(value: Decimal | float | None, currency: str = "USD", cents: bool = True) -> str:
    """``$1,234.56`` (USD), ``1,234.56 EUR``, or ``1,234.56`` (currency ""); ``cents=False``: ``$1,235``. "no price"
    for None."""
    if value is None:
        return "no price"
    text = f"{Decimal(str(value)):,.2f}" if cents else f"{Decimal(str(value)):,.0f}"
    if not currency:
        return text
    return f"${text}" if currency == "USD" else f"{text} {currency}"


def signed(value: Decimal | None, currency: str = "USD") -> str:
    """``+$12.00`` / ``-$3.50`` / ``$0.00``; "unknown (no price)" for None."""
    if value is None:
        return "unknown (no price)"
    sign = "+" if value > 0 else "-" if value < 0 else ""
    return sign + money(abs(value), currency)
