"""``gpufleet preflight``'s judgement: is each pool's VM size offered to this subscription in the stack's region and in
the pool's zones, and does the vCPU quota cover the stack at its maximum nodes plus upgrade surge. Pure (but for
:func:`subscription_of`, which reads the environment unless given one): Azure's answers come in as rows (the JSON of
the Resource SKUs and compute usages lists, read by :mod:`gpufleet.azure.arm`), the stack's pools as
:class:`PoolNeed`; typed :class:`Check` verdicts, each at its pool's ``file:line``, come out.

The rules (sources: azure-rest-api-specs' Resource SKUs definition, Microsoft.Compute/Skus/stable/2021-07-01/skus.json;
the availability logic of Azure/skewer, which Karpenter's Azure provider uses; Microsoft's compute usages and spot
quota pages; docs/azure.md):

- **offered**: the size is in the region's Resource SKUs (``resourceType`` virtualMachines) and no ``Location``
  restriction names the region (reasonCode ``NotAvailableForSubscription`` or ``QuotaId``); a spot pool also needs
  the size's ``LowPriorityCapable`` capability not ``False`` (spot capacity is not a restriction).
- **zones**: each zone of a zonal pool is in the size's ``locationInfo`` zones for the region, and no ``Zone``
  restriction for the region names it.
- **quota**: per pool, vCPUs x (maximum nodes + upgrade surge), summed over the pools that draw on one quota: the
  size family's (the SKU's ``family`` matched to a usage ``name.value`` without regard to case and spaces), the
  regional total (``cores``) for every pool but spot ones, and ``lowPriorityCores`` for spot pools. ``used +
  need <= limit`` passes; a shortfall names the limit to request. A quota the usages do not list is "not checked".
- A row that is not in the documented shape is skipped and counted; a size or quota whose row was skipped is
  "not checked" (never a pass, never a false "unavailable").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from gpufleet.catalog import Catalog
    from gpufleet.spec.load import LoadedStack
    from gpufleet.spec.models import Upgrade

Status = Literal["ok", "short", "unavailable", "not checked"]
CheckKind = Literal["offered", "zones", "quota"]
REGIONAL_QUOTA = "cores"  # "Total Regional vCPUs": every VM but spot ones
SPOT_QUOTA = "lowPriorityCores"  # "Total Regional Spot vCPUs": every spot VM, all families together
SUBSCRIPTION_ENV = "AZURE_SUBSCRIPTION_ID"
SUBSCRIPTION_KEY = "azure-native:subscriptionId"  # Pulumi's azure-native provider's key in the stack file
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# What a restriction's reasonCode means for the user (Azure's wording is in the reference, section 2).
REASONS = {
    "NotAvailableForSubscription": "not available to this subscription there (NotAvailableForSubscription: ask Azure"
    " support, or choose another region or zone)",
    "QuotaId": "not available to this subscription's offer type (QuotaId)",
}


# -- Azure's rows, typed ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Restriction:
    """One entry of a SKU's ``restrictions[]``: ``kind`` Location or Zone, the regions it names (``values`` and
    ``restrictionInfo.locations``), the zones (``restrictionInfo.zones``) and Azure's reasonCode."""

    kind: str
    locations: tuple[str, ...]
    zones: tuple[str, ...]
    reason: str

    def names(self, region: str) -> bool:
        return region in self.locations


@dataclass(frozen=True)
class Sku:
    """A VM size as the region's Resource SKUs list gives it (the fields preflight reads)."""

    name: str
    family: str
    vcpus: int
    locations: tuple[str, ...]  # lower case
    zones: tuple[str, ...]  # the region's zones (locationInfo); empty: a regional size
    restrictions: tuple[Restriction, ...]
    low_priority_capable: bool | None  # None: the capability is absent


@dataclass(frozen=True)
class Usage:
    """One row of the region's compute usages: ``name`` as Azure spells it (``name.value``)."""

    name: str
    label: str  # name.localizedValue
    current: int
    limit: int


@dataclass(frozen=True)
class Skipped:
    """A row not in the documented shape: which list, its position, its name when it has one, and why."""

    api: Literal["skus", "usages"]
    index: int
    name: str | None
    why: str

    def __str__(self) -> str:
        what = f" ({self.name})" if self.name else ""
        return f"{self.api} row {self.index}{what}: {self.why}"


def quota_key(name: str) -> str:
    """A family or usage name without case and spaces: ``Standard NCASv3_T4 Family`` = ``standardNCASv3_T4Family``
    (the SKU ``family`` and the usage ``name.value`` spell them differently; reference, section 3)."""
    return "".join(name.split()).lower()


def _strings(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


class _Bad(ValueError):
    """A row's field is not in the documented shape."""


def _restriction(raw: Any) -> Restriction:
    if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
        raise _Bad("a restriction without a type")
    info = raw.get("restrictionInfo") or {}
    values = _strings(raw.get("values") or [])
    locations = _strings(info.get("locations") or []) if isinstance(info, dict) else None
    zones = _strings(info.get("zones") or []) if isinstance(info, dict) else None
    if values is None or locations is None or zones is None:
        raise _Bad(f"restriction {raw.get('type')!r}: values, restrictionInfo.locations and .zones are string lists")
    # skewer's rule (reference, section 2): a restriction is about a region named in its values (Location) or its
    # restrictionInfo.locations (Zone, with the zones it takes away)
    where = tuple(dict.fromkeys(v.lower() for v in (*values, *locations)))
    return Restriction(raw["type"], where, zones, str(raw.get("reasonCode") or "no reasonCode"))


def _capability(raw: dict[str, Any], name: str) -> str | None:
    caps = raw.get("capabilities") or []
    if not isinstance(caps, list):
        raise _Bad("capabilities is not a list")
    for cap in caps:
        if isinstance(cap, dict) and cap.get("name") == name:
            return str(cap.get("value"))
    return None


def _sku(raw: dict[str, Any], region: str) -> Sku:
    name = raw["name"]
    family = raw.get("family")
    if not isinstance(family, str) or not family.strip():
        raise _Bad("no family")
    vcpus = _capability(raw, "vCPUs")
    if vcpus is None or not vcpus.isdigit() or int(vcpus) == 0:
        raise _Bad(f"vCPUs capability is {vcpus!r}, not a whole number of vCPUs")
    locations = _strings(raw.get("locations") or [])
    if locations is None:
        raise _Bad("locations is not a list of regions")
    zones: tuple[str, ...] = ()
    infos = raw.get("locationInfo") or []
    if not isinstance(infos, list):
        raise _Bad("locationInfo is not a list")
    for info in infos:
        if not isinstance(info, dict):
            raise _Bad("a locationInfo entry is not an object")
        if str(info.get("location", "")).lower() == region:
            found = _strings(info.get("zones") or [])
            if found is None:
                raise _Bad("locationInfo zones is not a list of zones")
            zones = tuple(sorted(found))
    restrictions = raw.get("restrictions") or []
    if not isinstance(restrictions, list):
        raise _Bad("restrictions is not a list")
    spot = _capability(raw, "LowPriorityCapable")
    return Sku(
        name=name,
        family=family,
        vcpus=int(vcpus),
        locations=tuple(loc.lower() for loc in locations),
        zones=zones,
        restrictions=tuple(_restriction(r) for r in restrictions),
        low_priority_capable=None if spot is None else spot.lower() == "true",
    )


def parse_skus(rows: Iterable[Any], region: str) -> tuple[dict[str, Sku], list[Skipped]]:
    """The VM sizes of a region's Resource SKUs rows, by lower-case name, and the rows skipped. Rows of other
    resource types (disks, availability sets...) are left out, not skipped."""
    skus: dict[str, Sku] = {}
    skipped: list[Skipped] = []
    for index, raw in enumerate(rows):
        if not isinstance(raw, dict):
            skipped.append(Skipped("skus", index, None, f"not an object: {str(raw)[:40]!r}"))
            continue
        name = raw.get("name")
        if raw.get("resourceType") != "virtualMachines":
            if not isinstance(raw.get("resourceType"), str):
                skipped.append(Skipped("skus", index, name if isinstance(name, str) else None, "no resourceType"))
            continue
        if not isinstance(name, str) or not name:
            skipped.append(Skipped("skus", index, None, "a virtualMachines row without a name"))
            continue
        try:
            skus[name.lower()] = _sku(raw, region.lower())
        except _Bad as exc:
            skipped.append(Skipped("skus", index, name, str(exc)))
    return skus, skipped


def parse_usages(rows: Iterable[Any]) -> tuple[dict[str, Usage], list[Skipped]]:
    """A region's compute usages by :func:`quota_key`, and the rows skipped."""
    usages: dict[str, Usage] = {}
    skipped: list[Skipped] = []
    for index, raw in enumerate(rows):
        name_obj = raw.get("name") if isinstance(raw, dict) else None
        name = name_obj.get("value") if isinstance(name_obj, dict) else None
        if not isinstance(name, str) or not name:
            skipped.append(Skipped("usages", index, None, "no name.value"))
            continue
        assert isinstance(raw, dict) and isinstance(name_obj, dict)
        current, limit = raw.get("currentValue"), raw.get("limit")
        numbers = (current, limit)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in numbers):
            skipped.append(Skipped("usages", index, name, f"currentValue {current!r} / limit {limit!r} are not counts"))
            continue
        label = name_obj.get("localizedValue")
        usages[quota_key(name)] = Usage(name, label if isinstance(label, str) else name, current, limit)  # type: ignore[arg-type]
    return usages, skipped


# -- what the stack asks for ------------------------------------------------------------------------------------


def surge_nodes(upgrade: Upgrade | None, nodes: int) -> int:
    """The extra nodes an upgrade of a pool of ``nodes`` adds: ``max_surge`` as a count, or a percentage of the
    pool's nodes rounded up (AKS: "For percentages, fractional nodes are rounded up"); none with
    ``max_unavailable``. ``None``: AKS's default, which gpufleet leaves to the system pool: one node in the REST
    API's words, 10% in the newer CLI's, so the larger of both."""
    if upgrade is None:
        return max(1, math.ceil(nodes / 10)) if nodes else 0
    if upgrade.max_surge is None:
        return 0
    text = upgrade.max_surge
    return math.ceil(nodes * int(text[:-1]) / 100) if text.endswith("%") else int(text)


@dataclass(frozen=True)
class PoolNeed:
    """What one node pool asks of Azure at its largest: its size, zones, spot or not, maximum nodes, the surge nodes
    of an upgrade at that size, and (``running``) the nodes taken as already deployed, which the subscription's usage
    counts already."""

    pool: str
    vm_size: str
    zones: tuple[str, ...]
    spot: bool
    nodes_max: int
    surge: int
    running: int
    catalog_vcpus: int  # the catalog's figure, used where Azure's row is missing
    file: str
    line: int

    @property
    def nodes(self) -> int:
        """Nodes the quota must still cover."""
        return max(0, self.nodes_max + self.surge - self.running)

    def vcpus(self, sku: Sku | None) -> int:
        return (sku.vcpus if sku else self.catalog_vcpus) * self.nodes

    def sum_text(self, sku: Sku | None) -> str:
        per = sku.vcpus if sku else self.catalog_vcpus
        nodes = f"{self.nodes_max} max + {self.surge} surge"
        if self.running:
            nodes += f" - {self.running} running"
        return f"{self.pool} ({nodes}) x {per} = {self.vcpus(sku)}"


def pool_needs(loaded: LoadedStack, catalog: Catalog, *, deployed: bool = False) -> tuple[PoolNeed, ...]:
    """The stack's AKS node pools (the system pool first, then each GPU pool) as :class:`PoolNeed`, each at its
    ``file:line``. ``deployed``: the stack runs now, so each pool's nodes it never goes below (autoscaling ``min``,
    else ``count``) are in the subscription's usage already; only the rest is needed."""
    stack = loaded.stack
    if stack is None or stack.aks is None:
        return ()
    needs = []
    system = stack.aks.cluster.system_pool
    place = loaded.place(("aks", "cluster", "system_pool"), "")
    size = catalog.system_vm_size(system.vm_size)
    needs.append(
        PoolNeed(
            pool=system.name,
            vm_size=system.vm_size,
            zones=tuple(system.zones),
            spot=False,
            nodes_max=system.count,
            surge=surge_nodes(None, system.count),
            running=system.count if deployed else 0,
            catalog_vcpus=size.vcpus if size else 0,
            file=place.file,
            line=place.line,
        )
    )
    for i, pool in enumerate(stack.aks.gpu_pools):
        low, _, high = pool.node_range
        place = loaded.place(("aks", "gpu_pools", i), "")
        gpu_size = catalog.vm_size(pool.vm_size)
        needs.append(
            PoolNeed(
                pool=pool.name,
                vm_size=pool.vm_size,
                zones=tuple(pool.zones),
                spot=pool.spot is not None,
                nodes_max=high,
                # NAP's NodePool caps its VMs at max_nodes, replacements included: no surge above it
                surge=0 if pool.kind == "nap" else surge_nodes(pool.effective_upgrade, high),
                running=low if deployed else 0,
                catalog_vcpus=gpu_size.vcpus if gpu_size else 0,
                file=place.file,
                line=place.line,
            )
        )
    return tuple(needs)


def subscription_of(loaded: LoadedStack, environ: Mapping[str, str] | None = None) -> tuple[str | None, str]:
    """The subscription to ask and where it came from, or None and why there is none: the stack file's
    ``azure-native:subscriptionId`` (what ``pulumi up`` deploys into) first, then ``$AZURE_SUBSCRIPTION_ID``."""
    env = os.environ if environ is None else environ
    config = getattr(loaded.locator, "config", None)
    if isinstance(config, dict) and SUBSCRIPTION_KEY in config:
        value = config[SUBSCRIPTION_KEY]
        line = loaded.locator.config_key_line(SUBSCRIPTION_KEY) if loaded.locator else 1
        where = f"{SUBSCRIPTION_KEY} at {loaded.file}:{line}"
        if isinstance(value, dict):
            return None, f"{where} is a Pulumi secret, which gpufleet does not decrypt: set {SUBSCRIPTION_ENV}"
        if not _GUID.fullmatch(str(value).strip()):
            return None, f"{where} is {str(value)[:60]!r}, not a subscription id (a GUID)"
        return str(value).strip().lower(), where
    value = env.get(SUBSCRIPTION_ENV, "").strip()
    if not value:
        return None, f"no subscription: set {SUBSCRIPTION_ENV}, or {SUBSCRIPTION_KEY} in the stack file"
    if not _GUID.fullmatch(value):
        return None, f"{SUBSCRIPTION_ENV} is {value[:60]!r}, not a subscription id (a GUID)"
    return value.lower(), SUBSCRIPTION_ENV


# -- verdicts ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One check of one pool. Quota checks name the ``quota`` (the usage as Azure spells it) and carry vCPU figures:
    ``need`` (every pool drawing on it), ``used`` and ``limit`` (Azure's), ``request`` (the limit to ask for, when
    short)."""

    pool: str
    file: str
    line: int
    check: CheckKind
    status: Status
    detail: str
    quota: str | None = None
    need: int | None = None
    used: int | None = None
    limit: int | None = None
    request: int | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("short", "unavailable")

    def __str__(self) -> str:
        status = self.status.upper() if self.failed else self.status
        what = f"quota {self.quota}" if self.quota else self.check
        return f"{self.file}:{self.line}: {self.pool}: {what}: {status}: {self.detail}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def not_checked(
    needs: Sequence[PoolNeed], why: str, kinds: Sequence[CheckKind] = ("offered", "zones", "quota")
) -> list[Check]:
    """Each pool's checks of ``kinds`` as "not checked" with the reason (zones only for zonal pools)."""
    return [
        Check(n.pool, n.file, n.line, kind, "not checked", why)
        for n in needs
        for kind in kinds
        if kind != "zones" or n.zones
    ]


def _offered(need: PoolNeed, sku: Sku | None, region: str, skipped: dict[str, Skipped]) -> Check:
    def verdict(status: Status, detail: str) -> Check:
        return Check(need.pool, need.file, need.line, "offered", status, detail)

    if sku is None:
        if need.vm_size.lower() in skipped:
            return verdict(
                "not checked", f"Azure's row for {need.vm_size} is malformed ({skipped[need.vm_size.lower()].why})"
            )
        return verdict(
            "unavailable",
            f"{need.vm_size} is not offered in {region} to this subscription (not in the region's Resource SKUs)",
        )
    if region not in sku.locations:
        return verdict(
            "unavailable", f"{need.vm_size} is not offered in {region} (its locations: {', '.join(sku.locations)})"
        )
    for r in sku.restrictions:
        if r.kind == "Location" and r.names(region):
            return verdict(
                "unavailable", f"{need.vm_size} is restricted in {region}: {REASONS.get(r.reason, r.reason)}"
            )
    if need.spot and sku.low_priority_capable is False:
        return verdict("unavailable", f"{need.vm_size} is not offered as spot in {region} (LowPriorityCapable: False)")
    return verdict("ok", f"{need.vm_size} is offered in {region}: {sku.vcpus} vCPUs, family {sku.family}")


def _zones(need: PoolNeed, sku: Sku, region: str) -> Check:
    restricted: dict[str, str] = {}
    for r in sku.restrictions:
        if r.kind == "Zone" and r.names(region):
            for zone in r.zones:
                restricted.setdefault(zone, r.reason)
    usable = [z for z in sku.zones if z not in restricted]
    problems = []
    for zone in need.zones:
        if zone in restricted:
            problems.append(f"zone {zone} is restricted: {REASONS.get(restricted[zone], restricted[zone])}")
        elif zone not in sku.zones:
            problems.append(f"zone {zone} is not a zone of {need.vm_size} in {region}")
    if not problems:
        zones = f"zone{'s' if len(need.zones) > 1 else ''} {', '.join(need.zones)}"
        return Check(need.pool, need.file, need.line, "zones", "ok", f"{zones} offered")
    fix = (
        f"usable zones: {', '.join(usable)}"
        if usable
        else f"{need.vm_size} has no usable zone in {region}: leave the pool's zones out, or choose another size"
    )
    return Check(need.pool, need.file, need.line, "zones", "unavailable", f"{'; '.join(problems)} ({fix})")


@dataclass
class _Quota:
    """One quota and the pools that draw on it."""

    name: str  # as the SKU or the stack names it, until the usage row gives Azure's spelling
    pools: list[tuple[PoolNeed, Sku | None]] = field(default_factory=list)

    @property
    def need(self) -> int:
        return sum(n.vcpus(s) for n, s in self.pools)


def _quota_checks(quota: _Quota, usages: dict[str, Usage], skipped: dict[str, Skipped]) -> list[Check]:
    parts = " + ".join(n.sum_text(s) for n, s in quota.pools)
    usage = usages.get(quota_key(quota.name))
    need = quota.need
    if usage is None:
        bad = skipped.get(quota_key(quota.name))
        why = (
            f"the usages row for {quota.name} is malformed ({bad.why})"
            if bad
            else f"the region's usages list no quota {quota.name} (matched without regard to case and spaces)"
        )
        status: Status = "not checked"
        detail = f"{why}; the stack needs {need} vCPUs: {parts}"
        return [Check(n.pool, n.file, n.line, "quota", status, detail, quota.name, need) for n, _ in quota.pools]
    free = usage.limit - usage.current
    shown = f"{usage.name} ({usage.label})" if usage.label != usage.name else usage.name
    figures = f"the stack needs {need} vCPUs at max nodes + surge ({parts}); used {usage.current}, limit {usage.limit}"
    request = None
    if need <= free:
        status, detail = "ok", f"{shown}: {figures}"
    else:
        status, request = "short", usage.current + need
        detail = (
            f"{shown}: {figures}: short by {need - free}: request a limit of {request}"
            f" (+{request - usage.limit}) for {usage.name}"
        )
    return [
        Check(n.pool, n.file, n.line, "quota", status, detail, usage.name, need, usage.current, usage.limit, request)
        for n, _ in quota.pools
    ]


def judge(
    needs: Sequence[PoolNeed],
    region: str,
    skus: dict[str, Sku] | None,
    usages: dict[str, Usage] | None,
    skipped: Sequence[Skipped] = (),
    *,
    skus_unknown: str = "",
    usages_unknown: str = "",
) -> list[Check]:
    """Every check of every pool. ``skus`` / ``usages`` None: that answer is missing, and ``skus_unknown`` /
    ``usages_unknown`` say why (their checks are "not checked"; quota needs the SKUs' families too)."""
    region = region.lower()
    bad_skus = {s.name.lower(): s for s in skipped if s.api == "skus" and s.name}
    bad_usages = {quota_key(s.name): s for s in skipped if s.api == "usages" and s.name}
    if skus is None:
        return not_checked(needs, skus_unknown)
    checks: list[Check] = []
    quotas: dict[str, _Quota] = {}
    for need in needs:
        sku = skus.get(need.vm_size.lower())
        offered = _offered(need, sku, region, bad_skus)
        checks.append(offered)
        if need.zones and sku is not None and offered.status == "ok":
            checks.append(_zones(need, sku, region))
        elif need.zones:
            why = offered.detail if offered.status == "not checked" else f"{need.vm_size} is not offered (see offered)"
            checks.append(Check(need.pool, need.file, need.line, "zones", "not checked", why))
        names = [SPOT_QUOTA] if need.spot else [REGIONAL_QUOTA]
        if sku is not None and not need.spot:
            names.insert(0, sku.family)
        elif not need.spot:
            why = f"no family quota to check: Azure has no usable row for {need.vm_size} (see offered)"
            checks.append(Check(need.pool, need.file, need.line, "quota", "not checked", why))
        for name in names:
            quotas.setdefault(quota_key(name), _Quota(name)).pools.append((need, sku))
    if usages is None:
        for q in quotas.values():
            checks += [
                Check(n.pool, n.file, n.line, "quota", "not checked", usages_unknown, q.name, q.need)
                for n, _ in q.pools
            ]
    else:
        for q in quotas.values():
            checks += _quota_checks(q, usages, bad_usages)
    order = {n.pool: i for i, n in enumerate(needs)}
    kinds = {"offered": 0, "zones": 1, "quota": 2}
    regional = (REGIONAL_QUOTA, SPOT_QUOTA)  # after the family's
    return sorted(checks, key=lambda c: (order[c.pool], kinds[c.check], c.quota in regional))


# -- the report -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Read:
    """One of Azure's answers: which list, at which API version, when it was read, whether from the cache, and its
    rows (the JSON as sent)."""

    api: Literal["skus", "usages"]
    api_version: str
    read_at: dt.datetime
    cached: bool
    rows: tuple[Any, ...] = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "api_version": self.api_version,
            "read_at": self.read_at.isoformat(timespec="seconds"),
            "cached": self.cached,
            "rows": len(self.rows),
        }


@dataclass(frozen=True)
class Preflight:
    """A stack's preflight: the subscription asked (and where its id came from, or why there is none), whether the
    stack was taken as deployed, every check, the answers read and the rows skipped."""

    stack: str
    region: str
    subscription: str | None
    subscription_from: str
    deployed: bool
    checks: tuple[Check, ...] = ()
    reads: tuple[Read, ...] = ()
    skipped: tuple[Skipped, ...] = ()

    def with_checks(
        self, checks: Iterable[Check], reads: tuple[Read, ...] = (), skipped: tuple[Skipped, ...] = ()
    ) -> Preflight:
        return dataclasses.replace(self, checks=tuple(checks), reads=reads, skipped=skipped)

    @property
    def failed(self) -> list[Check]:
        """The shortfalls and unavailable sizes or zones: ``pulumi up`` would fail on them."""
        return [c for c in self.checks if c.failed]

    @property
    def unchecked(self) -> list[Check]:
        return [c for c in self.checks if c.status == "not checked"]

    def passes(self, allow_unchecked: bool = False) -> bool:
        return not self.failed and (allow_unchecked or not self.unchecked)

    def to_dict(self) -> dict[str, Any]:
        return {
            "stack": self.stack,
            "region": self.region,
            "subscription": self.subscription,
            "subscription_from": self.subscription_from,
            "deployed": self.deployed,
            "reads": [r.to_dict() for r in self.reads],
            "skipped_rows": [str(s) for s in self.skipped],
            "checks": [c.to_dict() for c in self.checks],
        }
