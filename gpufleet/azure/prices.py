"""Azure VM prices from the source, and the price tables a command prices with.

**Reading the source.** :func:`read_prices` asks the Azure Retail Prices API (``prices.azure.com/api/retail/prices``,
no authentication, ``api-version=2023-01-01-preview``, primary meter regions only) for each size and region asked, one
query per price type (``$filter`` on serviceName, armRegionName, armSkuName and priceType), follows ``NextPageLink``
and retries what the service asks to retry (429, 5xx, a dropped connection) with bounded waits. Rows become
:class:`RetailRow` objects, and :func:`classify` decides which figure of the table each one is:

- ``Consumption`` rows: pay-as-you-go, unless the product is Windows (``productName`` ends in ``Windows``, or ``Win``
  in the short product names), a Cloud Services product, or a Spot or Low Priority meter; Spot meters (``meterName``
  or ``skuName`` containing ``Spot``) are the spot price; Low Priority meters (Azure Batch's, retiring) are dropped;
- ``Reservation`` rows: the price of the whole term (``retailPrice`` although the unit says ``1 Hour``), divided by
  the term's hours, 8,760 for ``1 Year`` and 26,280 for ``3 Years``; ``5 Years`` and other terms are dropped;
- ``DevTestConsumption`` rows (Dev/Test offers only), secondary meter regions, volume tiers, rows in another currency
  and malformed rows are skipped and counted, never fatal.

Facts and their sources: /work/shared/reference/azure-apis.md §1 (Microsoft's Retail Prices page for the endpoint,
the filter, meterRegion and the api-version; MicrosoftDocs' spot-vms.md for Spot meters, batch-spot-vms.md for Low
Priority; the term price of Reservation rows as confirmed by third parties).

**The tables a command prices with.** A user's refreshed table takes precedence over the shipped one per size and
region: ``<project root>/azure_prices.yaml`` first, then ``$XDG_CONFIG_HOME/gpufleet/azure_prices.yaml`` (XDG's
default ``~/.config``), then the shipped ``catalog/azure_prices.yaml``. :func:`priced_catalog` is the one lookup
``cost``, ``plan``, ``size`` and ``promote`` use; each :class:`~gpufleet.catalog.Price` names the table it came from.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from gpufleet.catalog import Catalog, PriceEntry, PriceFigures, PriceTable
from gpufleet.common.diagnostics import Diagnostic, Finding, did_you_mean

API_URL = "https://prices.azure.com/api/retail/prices"
API_VERSION = "2023-01-01-preview"  # the version that returns savings plans too; backward compatible (Microsoft)
URL_ENV = "GPUFLEET_AZURE_PRICES_URL"  # another base URL (a mirror, or a test's local server)
SERVICE = "Virtual Machines"
PRICE_TYPES = ("Consumption", "Reservation")
TERM_HOURS = {"1 Year": 8760, "3 Years": 26280}  # 365 x 24 and 3 x 365 x 24
TABLE_FILE = "azure_prices.yaml"
PLACES = Decimal("0.000001")  # a term price per hour is rounded to 6 places, as the API's hourly prices are written
PARALLEL_QUERIES = 4  # queries in flight at once: a few, as Microsoft publishes no rate limit

Slot = Literal["pay_as_you_go", "spot", "reserved_1y", "reserved_3y"]
SLOTS: tuple[Slot, ...] = ("pay_as_you_go", "spot", "reserved_1y", "reserved_3y")


class PricesError(Exception):
    """The Retail Prices API could not be read (after the retries it allows): one line, naming the query."""


class PriceTableError(ValueError):
    """A user's price table that cannot be used: every problem at ``file:line: key.path: message``."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


# -- rows ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetailRow:
    """One item of a Retail Prices page, the fields gpufleet reads (the API's names in the comments)."""

    vm_size: str  # armSkuName
    region: str  # armRegionName
    product: str  # productName: "Virtual Machines NDsr H100 v5 Series" (Linux), "... Series Windows"
    sku_name: str  # skuName: "ND96isr H100 v5", "... Spot", "... Low Priority"
    meter: str  # meterName
    price_type: str  # type: Consumption, Reservation, DevTestConsumption
    price: Decimal  # retailPrice: per unit, or per whole term on Reservation rows
    unit: str  # unitOfMeasure: "1 Hour"
    currency: str  # currencyCode
    term: str | None  # reservationTerm: "1 Year", "3 Years", "5 Years" (Reservation rows only)
    effective: str  # effectiveStartDate, ISO 8601 (compared as text: one format)
    primary: bool  # isPrimaryMeterRegion
    tier_minimum: Decimal  # tierMinimumUnits


@dataclass(frozen=True)
class Skip:
    """A row left out, and why (the reasons are counted in the read's summary)."""

    reason: str


_TEXT_FIELDS = {
    "vm_size": "armSkuName",
    "region": "armRegionName",
    "product": "productName",
    "sku_name": "skuName",
    "meter": "meterName",
    "price_type": "type",
    "unit": "unitOfMeasure",
    "currency": "currencyCode",
}


def _number(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def parse_row(item: Any) -> RetailRow | Skip:
    """A page's item as a typed row, or why it cannot be one (a malformed row is skipped, never fatal)."""
    if not isinstance(item, dict):
        return Skip("malformed: not an object")
    text: dict[str, str] = {}
    for name, key in _TEXT_FIELDS.items():
        value = item.get(key)
        if not isinstance(value, str) or not value.strip():
            return Skip(f"malformed: {key} missing or not text")
        text[name] = value.strip()
    price = _number(item.get("retailPrice"))
    if price is None:
        return Skip("malformed: retailPrice missing or not a number")
    tier = _number(item.get("tierMinimumUnits", 0))
    term = item.get("reservationTerm")
    effective = item.get("effectiveStartDate", "")
    primary = item.get("isPrimaryMeterRegion", True)
    if tier is None or not isinstance(effective, str) or not isinstance(primary, bool):
        return Skip("malformed: tierMinimumUnits, effectiveStartDate or isPrimaryMeterRegion of the wrong type")
    if term is not None and not isinstance(term, str):
        return Skip("malformed: reservationTerm not text")
    return RetailRow(price=price, term=term, effective=effective, primary=primary, tier_minimum=tier, **text)


def _windows(product: str) -> bool:
    """Windows products say "Windows", or "Win" where the name is shortened ("Virtual Machines NCCadsv5 Srs Win":
    SkyPilot's catalog fetcher met those)."""
    words = product.split()
    return "Windows" in words or "Win" in words


def classify(row: RetailRow, currency: str = "USD") -> Slot | Skip:
    """Which figure of a price table the row is, or why it is none."""
    if row.price_type == "DevTestConsumption":
        return Skip("DevTestConsumption (Dev/Test offers only)")
    if row.price_type not in PRICE_TYPES:
        return Skip(f"priceType {row.price_type}")
    if _windows(row.product):
        return Skip("Windows")
    if "Cloud Services" in row.product or "CloudServices" in row.product:
        return Skip("Cloud Services")
    if not row.primary:
        return Skip("not a primary meter region")
    if row.currency != currency:
        return Skip(f"currency {row.currency}, not {currency}")
    if row.tier_minimum > 0:
        return Skip("a volume tier (tierMinimumUnits above 0)")
    if row.price <= 0:
        return Skip("retailPrice 0")
    if row.price_type == "Reservation":
        if row.term == "1 Year":
            return "reserved_1y"
        if row.term == "3 Years":
            return "reserved_3y"
        return Skip(f"reservation term {row.term or 'missing'} (1 Year and 3 Years are read)")
    if row.unit != "1 Hour":
        return Skip(f"unit {row.unit}, not 1 Hour")
    if "Low Priority" in row.meter or "Low Priority" in row.sku_name:
        return Skip("Low Priority (Azure Batch)")
    if "Spot" in row.meter or "Spot" in row.sku_name:
        return "spot"
    return "pay_as_you_go"


def hourly(row: RetailRow, slot: Slot) -> Decimal:
    """The row's price per hour: a reservation's term price over the term's hours (rounded to 6 places)."""
    if slot in ("reserved_1y", "reserved_3y"):
        assert row.term is not None
        return (row.price / TERM_HOURS[row.term]).quantize(PLACES)
    return row.price


# -- the client ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One question to the API: one size in one region, one price type."""

    vm_size: str
    region: str
    price_type: str

    @property
    def filter(self) -> str:
        return f"{_rows_filter(self.vm_size, self.region)} and priceType eq '{self.price_type}'"

    def __str__(self) -> str:
        return f"{self.price_type} prices of {self.vm_size} in {self.region}"


def _rows_filter(vm_size: str, region: str) -> str:
    return f"serviceName eq '{SERVICE}' and armRegionName eq '{region}' and armSkuName eq '{vm_size}'"


def base_url(environ: Mapping[str, str] | None = None) -> str:
    """The API's URL: ``$GPUFLEET_AZURE_PRICES_URL`` when set (a mirror, a test's server), else Microsoft's."""
    return (os.environ if environ is None else environ).get(URL_ENV) or API_URL


def query_url(base: str, filter_: str, readable: bool = False) -> str:
    """The URL of a query (``readable``: as written in a table's ``source``, without percent-encoding)."""
    from urllib.parse import quote

    text = filter_ if readable else quote(filter_, safe="'")
    return f"{base}?api-version={API_VERSION}&meterRegion='primary'&$filter={text}"


def source_of(base: str, vm_size: str, region: str) -> str:
    """A table entry's ``source``: the query returning every row its figures were read from (both price types)."""
    return query_url(base, _rows_filter(vm_size, region), readable=True)


def _origin(url: str) -> tuple[str, str, int | None]:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port


def _retry_after(value: str | None, now: float) -> float | None:
    """Seconds a ``Retry-After`` header asks for (seconds or an HTTP date), or None without a readable one."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.UTC)
    return max(0.0, when.timestamp() - now)


@dataclass
class RetailPricesClient:
    """GETs of Retail Prices pages with bounded retries: 429 and 5xx answers (honouring ``Retry-After``), dropped
    connections and timeouts are tried again, up to ``attempts`` times a page, each wait at most ``max_wait_s``
    (a longer ``Retry-After`` is not waited: the read fails and says so) and all waits of the client together at
    most ``wait_budget_s``. Other HTTP errors and unreadable pages fail at once. Safe to use from several threads."""

    url: str = API_URL
    timeout_s: float = 30.0
    attempts: int = 6
    max_wait_s: float = 60.0
    wait_budget_s: float = 300.0
    max_page_bytes: int = 32 * 1024 * 1024
    max_pages: int = 500  # a query's pages; the API gives 1,000 rows a page
    sleep: Callable[[float], None] = time.sleep
    waited_s: float = 0.0
    retries: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _wait(self, seconds: float, why: str, query: Query) -> None:
        if seconds > self.max_wait_s:
            raise PricesError(
                f"{query}: the API asks to wait {seconds:.0f} s ({why}), more than gpufleet waits"
                f" ({self.max_wait_s:.0f} s): try again later"
            )
        with self._lock:
            if self.waited_s + seconds > self.wait_budget_s:
                raise PricesError(
                    f"{query}: still {why} after {self.waited_s:.0f} s of waiting in all (at most"
                    f" {self.wait_budget_s:.0f} s): try again later, or ask for fewer sizes or regions"
                )
            self.waited_s += seconds
            self.retries += 1
        self.sleep(seconds)

    def _get(self, url: str, query: Query) -> dict[str, Any]:
        import http.client
        import urllib.error
        import urllib.request

        from gpufleet import __version__

        headers = {"Accept": "application/json", "User-Agent": f"gpufleet/{__version__}"}
        for attempt in range(self.attempts):
            backoff = min(2.0**attempt, 30.0) * (1 + random.random() / 4)  # jitter, not a secret
            last = attempt == self.attempts - 1
            try:
                with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=self.timeout_s) as r:
                    body = r.read(self.max_page_bytes + 1)
            except urllib.error.HTTPError as exc:
                if exc.code != 429 and exc.code < 500:
                    raise PricesError(f"{query}: HTTP {exc.code} {exc.reason}: {_error_text(exc)}") from None
                if last:
                    raise PricesError(f"{query}: HTTP {exc.code} {exc.reason} {self.attempts} times") from None
                asked = _retry_after(exc.headers.get("Retry-After"), time.time())
                self._wait(asked if asked is not None else backoff, f"HTTP {exc.code}", query)
                continue
            except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as exc:
                why = getattr(exc, "reason", None) or exc
                if last:
                    raise PricesError(f"{query}: cannot reach {_origin(url)[1]}: {why}") from None
                self._wait(backoff, f"no answer ({why})", query)
                continue
            if len(body) > self.max_page_bytes:
                raise PricesError(f"{query}: a page over {self.max_page_bytes // 2**20} MiB")
            try:
                page = json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise PricesError(f"{query}: the answer is not JSON ({exc})") from None
            if not isinstance(page, dict) or not isinstance(page.get("Items"), list):
                raise PricesError(f"{query}: the answer has no Items list; not a Retail Prices page")
            return page
        raise AssertionError("unreachable: the last attempt returns or raises")

    def rows(self, query: Query) -> tuple[list[Any], int]:
        """Every item the query returns (following ``NextPageLink`` on the API's own host), and the pages read."""
        url = query_url(self.url, query.filter)
        origin, seen, items = _origin(self.url), set(), []
        while url:
            if len(seen) >= self.max_pages:
                raise PricesError(f"{query}: more than {self.max_pages} pages; not following further")
            seen.add(url)
            page = self._get(url, query)
            items.extend(page["Items"])
            link = page.get("NextPageLink")
            if link in (None, ""):
                break
            if not isinstance(link, str) or _origin(link) != origin:
                raise PricesError(f"{query}: NextPageLink {str(link)[:120]!r} leaves {self.url}; not followed")
            if link in seen:
                raise PricesError(f"{query}: NextPageLink repeats a page already read; not followed")
            url = link
        return items, len(seen)


def _error_text(exc: Any) -> str:
    """What an error answer says (Azure's ``{"Error": {"Message": ...}}``, else its first 200 characters)."""
    try:
        body = exc.read(64 * 1024).decode("utf-8", "replace")
    except Exception:  # the message is best effort: the status was said already
        return "no message"
    try:
        data = json.loads(body)
        message = (data.get("Error") or data.get("error") or {}).get("Message") or (data.get("error") or {}).get(
            "message"
        )
        if isinstance(message, str):
            return " ".join(message.split())[:300]
    except (json.JSONDecodeError, AttributeError):
        pass
    return " ".join(body.split())[:200] or "no message"


# -- a read --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PriceRead:
    """What one read of the API gave: the table (one entry per size and region with a price row, each with its query
    and the date read) and what was read, used and skipped."""

    table: PriceTable
    url: str
    as_of: _dt.date
    regions: tuple[str, ...]
    sizes: tuple[str, ...]
    queries: int
    pages: int
    rows: int
    used: int
    retries: int
    waited_s: float
    skipped: tuple[tuple[str, int], ...]  # (reason, rows), most first
    unpriced: tuple[tuple[str, str], ...]  # (size, region) without any price row

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "as_of": self.as_of.isoformat(),
            "regions": list(self.regions),
            "sizes": list(self.sizes),
            "queries": self.queries,
            "pages": self.pages,
            "rows": self.rows,
            "used": self.used,
            "retries": self.retries,
            "waited_s": round(self.waited_s, 1),
            "skipped": [{"reason": r, "rows": n} for r, n in self.skipped],
            "unpriced": [{"vm_size": s, "region": r} for s, r in self.unpriced],
        }


@dataclass
class _Best:
    """The row chosen for one figure of one size in one region: the latest ``effectiveStartDate`` wins; of two rows
    of one date, the higher price (a cost estimate errs high)."""

    rows: dict[Slot, RetailRow] = field(default_factory=dict)

    def offer(self, slot: Slot, row: RetailRow, skipped: Counter[str]) -> None:
        held = self.rows.get(slot)
        if held is None:
            self.rows[slot] = row
            return
        newer = (row.effective, hourly(row, slot)) > (held.effective, hourly(held, slot))
        keep, drop = (row, held) if newer else (held, row)
        self.rows[slot] = keep
        if keep.effective == drop.effective and hourly(keep, slot) != hourly(drop, slot):
            skipped["a second row of the same figure and date (the higher price kept)"] += 1
        else:
            skipped["an older or repeated row of the same figure (effectiveStartDate)"] += 1

    def figures(self) -> PriceFigures:
        return PriceFigures(**{slot: float(hourly(row, slot)) for slot, row in self.rows.items()})


def read_prices(
    sizes: Sequence[str],
    regions: Sequence[str],
    *,
    client: RetailPricesClient,
    today: _dt.date,
    currency: str = "USD",
    progress: Callable[[str], None] | None = None,
) -> PriceRead:
    """Read every size's prices in every region (one query per size, region and price type, a few at a time)."""
    queries = [Query(s, r, t) for r in regions for s in sizes for t in PRICE_TYPES]
    say = progress or (lambda _m: None)
    say(
        f"reading {len(queries)} queries ({len(sizes)} size(s) x {len(regions)} region(s) x 2 price types)"
        f" from {client.url}"
    )
    done = [0, time.monotonic()]
    lock = threading.Lock()

    def run(query: Query) -> tuple[list[Any], int]:
        result = client.rows(query)
        with lock:
            done[0] += 1
            if time.monotonic() - done[1] >= 5 and done[0] < len(queries):
                done[1] = time.monotonic()
                say(f"read {done[0]} of {len(queries)} queries")
        return result

    pool = ThreadPoolExecutor(max_workers=PARALLEL_QUERIES)
    try:
        answers = list(pool.map(run, queries))
    finally:  # a query that failed stops the read: the ones not started yet are not asked
        pool.shutdown(wait=True, cancel_futures=True)
    skipped: Counter[str] = Counter()
    best: dict[tuple[str, str], _Best] = {(s, r): _Best() for r in regions for s in sizes}
    rows = used = 0
    for query, (items, _pages) in zip(queries, answers, strict=True):
        rows += len(items)
        for item in items:
            row = parse_row(item)
            if isinstance(row, Skip):
                skipped[row.reason] += 1
                continue
            slot = classify(row, currency)
            if isinstance(slot, Skip):
                skipped[slot.reason] += 1
            elif (row.vm_size.lower(), row.region) != (query.vm_size.lower(), query.region):
                skipped["another size or region than asked"] += 1
            else:
                best[(query.vm_size, query.region)].offer(slot, row, skipped)
    entries = []
    for (vm_size, region), chosen in sorted(best.items()):
        if chosen.rows:
            used += len(chosen.rows)
            entries.append(
                PriceEntry(
                    vm_size=vm_size,
                    source=source_of(client.url, vm_size, region),
                    as_of=today,
                    regions={region: chosen.figures()},
                )
            )
    return PriceRead(
        table=PriceTable(currency=currency, prices=tuple(entries)),
        url=client.url,
        as_of=today,
        regions=tuple(regions),
        sizes=tuple(sizes),
        queries=len(queries),
        pages=sum(pages for _items, pages in answers),
        rows=rows,
        used=used,
        retries=client.retries,
        waited_s=client.waited_s,
        skipped=tuple(sorted(skipped.items(), key=lambda kv: (-kv[1], kv[0]))),
        unpriced=tuple(key for key, chosen in sorted(best.items()) if not chosen.rows),
    )


def summary_lines(read: PriceRead) -> list[str]:
    """What a read did, for a person: rows, pages, what was skipped and why, the sizes without any price row."""
    pairs = len(read.sizes) * len(read.regions)
    lines = [
        f"read {read.rows} row(s) on {read.pages} page(s) of {read.queries} queries ({read.retries} retried,"
        f" {read.waited_s:.0f} s waited); used {read.used} row(s): {len(read.table.prices)} of {pairs} size/region"
        " pair(s) priced"
    ]
    if read.skipped:
        lines.append(
            f"skipped {sum(n for _, n in read.skipped)} row(s): " + "; ".join(f"{r}: {n}" for r, n in read.skipped)
        )
    if read.unpriced:
        by_region: dict[str, list[str]] = {}
        for vm_size, region in read.unpriced:
            by_region.setdefault(region, []).append(vm_size)
        lines += [f"no price row in {r} for {len(s)} size(s): {', '.join(s)}" for r, s in by_region.items()]
    return lines


# -- table files ---------------------------------------------------------------------------------------------------


def _figure(value: float) -> str:
    text = format(Decimal(str(value)).normalize(), "f")
    return text if "." in text else text + ".0"


def table_text(table: PriceTable, header: Iterable[str]) -> str:
    """A table in the shipped file's YAML shape, one entry per size and region, sorted; ``header`` as comments."""
    lines = [f"# {line}".rstrip() for line in header]
    lines += [f"currency: {table.currency}", "prices:" if table.prices else "prices: []"]
    for entry in sorted(table.prices, key=lambda e: (e.vm_size, sorted(e.regions))):
        lines += [
            f"  - vm_size: {entry.vm_size}",
            f"    source: {json.dumps(entry.source, ensure_ascii=False)}",
            f"    as_of: {entry.as_of.isoformat()}",
            "    regions:",
        ]
        for region, figures in sorted(entry.regions.items()):
            given = ", ".join(f"{k}: {_figure(v)}" for k, v in figures.model_dump().items() if v is not None)
            lines.append(f"      {region}: {{{given}}}")
    return "\n".join(lines) + "\n"


def merged(new: PriceRead, old: PriceTable | None) -> tuple[PriceTable, int]:
    """The table to write over ``old`` (a file being refreshed): the read's entries, and ``old``'s for the sizes and
    regions not read this time (a pair read without a price row loses its old entry). Also how many pairs were kept."""
    if old is None:
        return new.table, 0
    read = {(s.lower(), r) for s in new.sizes for r in new.regions}
    kept = []
    for entry in old.prices:
        regions = {r: f for r, f in entry.regions.items() if (entry.vm_size.lower(), r) not in read}
        if regions:
            kept.append(entry.model_copy(update={"regions": regions}))
    return PriceTable(currency=new.table.currency, prices=(*new.table.prices, *kept)), sum(len(e.regions) for e in kept)


def read_price_table(path: Path, catalog: Catalog, shown_as: str | None = None) -> PriceTable:
    """A user's price table file, checked against the catalog (its currency, sizes and regions; each size and region
    once); :class:`PriceTableError` with every problem at its line otherwise."""
    from pydantic import ValidationError

    from gpufleet.common.yamldoc import Locator, findings_from_validation, located, plain, read_yaml

    name = shown_as or str(path)
    doc, errors = read_yaml(path)
    if errors:
        raise PriceTableError([Diagnostic(name, d.line, d.path, d.message) for d in errors])
    if not isinstance(doc, dict):
        what = "empty" if doc is None else f"a {type(plain(doc)).__name__}"
        raise PriceTableError(
            [Diagnostic(name, 1, "", f"{what}, not a price table: 'currency: USD' and 'prices: [...]' (docs/azure.md)")]
        )
    try:
        table = PriceTable.model_validate(plain(doc))
    except ValidationError as exc:
        raise PriceTableError(located(findings_from_validation(exc, PriceTable), Locator(doc), name)) from None
    findings = list(_catalog_findings(table, catalog))
    if findings:
        raise PriceTableError(located(findings, Locator(doc), name))
    return table


def _catalog_findings(table: PriceTable, catalog: Catalog) -> Iterator[Finding]:
    if table.currency != catalog.currency:
        yield Finding(
            ("currency",),
            f"{table.currency!r}: gpufleet prices in {catalog.currency}, the shipped table's currency; write the"
            f" table in {catalog.currency}",
        )
    sizes = priceable_sizes(catalog)
    seen: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(table.prices):
        if entry.vm_size.lower() not in sizes:
            yield Finding(
                ("prices", i, "vm_size"),
                f"{entry.vm_size!r} is not a VM size the catalog knows; {did_you_mean(entry.vm_size, sizes.values())}",
            )
        for region in entry.regions:
            if region not in catalog.region_names:
                yield Finding(
                    ("prices", i, "regions", region),
                    f"{region!r} is not an Azure region the catalog knows;"
                    f" {did_you_mean(region, catalog.region_names)}",
                )
            key = (entry.vm_size.lower(), region)
            if key in seen:
                yield Finding(
                    ("prices", i, "regions", region),
                    f"{entry.vm_size} in {region} is priced twice (also at prices[{seen[key]}]); keep one",
                )
            seen.setdefault(key, i)


def priceable_sizes(catalog: Catalog) -> dict[str, str]:
    """Every size a table may price, lowercase -> the catalog's spelling: the GPU sizes and the system pool sizes."""
    return {s.name.lower(): s.name for s in (*catalog.vm_sizes, *catalog.system_vm_sizes)}


def price_table_paths(project: Path | None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """The user's price tables that exist, the first one's prices first: ``<project>/azure_prices.yaml``, then
    ``$XDG_CONFIG_HOME/gpufleet/azure_prices.yaml`` (``~/.config`` when the variable is unset, empty or not an
    absolute path, as the XDG Base Directory specification says)."""
    env = os.environ if environ is None else environ
    config = env.get("XDG_CONFIG_HOME") or ""
    config_home = Path(config) if os.path.isabs(config) else Path.home() / ".config"
    candidates = ([project / TABLE_FILE] if project is not None else []) + [config_home / "gpufleet" / TABLE_FILE]
    found: list[Path] = []
    for path in candidates:
        if path.exists() and all(not _same(path, other) for other in found):
            found.append(path)
    return found


def _same(a: Path, b: Path) -> bool:
    try:
        return a.samefile(b)
    except OSError:
        return False


def table_name(path: Path) -> str:
    """How prices and messages name a user's table: the path, relative to the working directory when below it."""
    from gpufleet.spec.files import display_path

    return str(display_path(path))


def priced_catalog(project: Path | None) -> Catalog:
    """The catalog with the user's price tables in front of the shipped one (:func:`price_table_paths`); the packaged
    catalog itself when there is none. :class:`PriceTableError` for a table that cannot be used."""
    from gpufleet import catalog as catalog_module

    base = catalog_module.load_catalog()
    tables = [(table_name(p), read_price_table(p, base, table_name(p))) for p in price_table_paths(project)]
    return base.with_price_tables(tables) if tables else base
