"""``gpufleet azure prices`` and the price tables every priced command reads.

No Azure here: a local HTTP server (127.0.0.1, stopped after each test) replays Retail Prices API pages written in
the documented shapes (tests/fixtures/azure-prices/, whose README says which figures are published and which are made
up), and the client is pointed at it with ``GPUFLEET_AZURE_PRICES_URL``. The server answers only the query shape the
real API documents (api-version, meterRegion, the ``$filter`` clauses), so the tests hold the client to it too.
Every test runs with an empty ``$XDG_CONFIG_HOME``: a price table in the user's ~/.config cannot reach them.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from gpufleet.azure.prices import (
    URL_ENV,
    PricesError,
    PriceTableError,
    RetailPricesClient,
    RetailRow,
    Skip,
    classify,
    hourly,
    parse_row,
    price_table_paths,
    priced_catalog,
    read_price_table,
    read_prices,
)
from gpufleet.catalog import SHIPPED_PRICES, load_catalog
from gpufleet.cli import app
from tests.conftest import FIXTURES, REPO

PAGES = FIXTURES / "azure-prices"
H100 = "Standard_ND96isr_H100_v5"
D8 = "Standard_D8ds_v5"
A100 = "Standard_NC24ads_A100_v4"
RECORDED_HOST = "https://prices.azure.com:443"
FILTER = re.compile(
    r"^serviceName eq 'Virtual Machines' and armRegionName eq '([a-z0-9]+)' and armSkuName eq '([A-Za-z0-9_]+)'"
    r" and priceType eq '(Consumption|Reservation)'$"
)


class PricesServer:
    """The Retail Prices API on 127.0.0.1: one fixture file per page; ``answer_first[key]`` lists answers given
    before the page (status, headers, body) for key ``(region, size, priceType, page)``; ``requests`` what was asked."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, int]] = []
        self.answer_first: dict[tuple[str, str, str, int], list[tuple[int, dict[str, str], bytes]]] = {}
        self.pages: dict[tuple[str, str, str, int], bytes] = {}  # a page's body instead of its file
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def host(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.host}/api/retail/prices"

    def __enter__(self) -> PricesServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def answer(self, path: str) -> tuple[int, dict[str, str], bytes]:
        parts = urlsplit(path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        match = FILTER.match(query.get("$filter", ""))
        if parts.path != "/api/retail/prices" or not match:
            return 400, {}, json.dumps({"Error": {"Code": "BadRequest", "Message": f"bad query {path}"}}).encode()
        if query.get("api-version") != "2023-01-01-preview" or query.get("meterRegion") != "'primary'":
            return 400, {}, json.dumps({"Error": {"Code": "BadRequest", "Message": "api-version/meterRegion"}}).encode()
        key = (*match.groups(), int(query.get("$skip", "0")) // 1000 + 1)
        self.requests.append(key)  # type: ignore[arg-type]
        if self.answer_first.get(key):  # type: ignore[call-overload]
            return self.answer_first[key].pop(0)  # type: ignore[index]
        region, size, price_type, page = key
        file = PAGES / region / size / f"{price_type}-{page}.json"
        if key in self.pages:
            body = self.pages[key]  # type: ignore[index]
        elif file.is_file():
            body = file.read_bytes()
        else:
            body = json.dumps({"BillingCurrency": "USD", "Items": [], "NextPageLink": None, "Count": 0}).encode()
        return 200, {"Content-Type": "application/json"}, body.replace(RECORDED_HOST.encode(), self.host.encode())

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                status, headers, body = server.answer(self.path)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        return Handler


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[PricesServer]:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty-config"))
    monkeypatch.setenv("COLUMNS", "200")
    with PricesServer() as server:
        monkeypatch.setenv(URL_ENV, server.url)
        yield server


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the repository's stacks (what cost, plan and promote read)."""
    root = tmp_path / "project"
    root.mkdir()
    for file in [REPO / "Pulumi.yaml", REPO / "promotion.yaml", *REPO.glob("Pulumi.*-*.yaml")]:
        shutil.copy(file, root / file.name)
    return root


def gpufleet(*args: str) -> tuple[int, str, str]:
    """``gpufleet ARGS`` in-process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


# -- rows -----------------------------------------------------------------------------------------------------------


def item(**changes: Any) -> dict[str, Any]:
    """A Linux pay-as-you-go row of the documented shape, changed where a test says."""
    base = json.loads((PAGES / "westeurope" / H100 / "Consumption-1.json").read_text())["Items"][0]
    return {**base, **changes}


def test_the_classifier_tells_linux_windows_spot_low_priority_devtest_and_reservation_rows_apart():
    def kind(**changes: Any) -> str:
        row = parse_row(item(**changes))
        assert isinstance(row, RetailRow), row
        result = classify(row)
        return result.reason if isinstance(result, Skip) else result

    assert kind() == "pay_as_you_go"
    assert kind(productName="Virtual Machines NDsr H100 v5 Series Windows") == "Windows"
    assert kind(productName="Virtual Machines NCCadsv5 Srs Win") == "Windows"  # the shortened form
    assert kind(meterName="ND96isr H100 v5 Spot", skuName="ND96isr H100 v5 Spot") == "spot"
    assert kind(skuName="ND96isr H100 v5 Spot") == "spot"  # either name says it
    assert kind(meterName="ND96isr H100 v5 Low Priority", skuName="ND96isr H100 v5 Low Priority").startswith(
        "Low Priority"
    )
    assert kind(type="DevTestConsumption").startswith("DevTestConsumption")
    assert kind(type="Reservation", reservationTerm="1 Year") == "reserved_1y"
    assert kind(type="Reservation", reservationTerm="3 Years") == "reserved_3y"
    assert kind(type="Reservation", reservationTerm="5 Years").startswith("reservation term 5 Years")
    assert kind(productName="Cloud Services Ddsv5 Series") == "Cloud Services"
    assert kind(isPrimaryMeterRegion=False) == "not a primary meter region"
    assert kind(unitOfMeasure="1/Month") == "unit 1/Month, not 1 Hour"
    assert kind(currencyCode="EUR") == "currency EUR, not USD"
    assert kind(retailPrice=0) == "retailPrice 0"
    assert kind(tierMinimumUnits=100) == "a volume tier (tierMinimumUnits above 0)"


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (None, "malformed: not an object"),
        ([1, 2], "malformed: not an object"),
        ({"armSkuName": None}, "malformed: armSkuName missing or not text"),
        ({"productName": 7}, "malformed: productName missing or not text"),
        ({"retailPrice": "n/a"}, "malformed: retailPrice missing or not a number"),
        ({"retailPrice": True}, "malformed: retailPrice missing or not a number"),
        ({"retailPrice": "NaN"}, "malformed: retailPrice missing or not a number"),
        ({"retailPrice": None}, "malformed: retailPrice missing or not a number"),
        ({"reservationTerm": 1}, "malformed: reservationTerm not text"),
        ({"isPrimaryMeterRegion": "yes"}, "malformed: tierMinimumUnits, effectiveStartDate or isPrimaryMeterRegion"),
    ],
)
def test_a_malformed_row_is_skipped_with_its_reason_never_raised(bad: Any, reason: str):
    row = parse_row(item(**bad) if isinstance(bad, dict) else bad)
    assert isinstance(row, Skip) and row.reason.startswith(reason)


def test_a_reservation_row_is_the_whole_term_divided_into_hours():
    one = parse_row(item(type="Reservation", reservationTerm="1 Year", retailPrice=25007.0))  # Microsoft's E64 v4 row
    three = parse_row(item(type="Reservation", reservationTerm="3 Years", retailPrice=1116900.0))
    assert isinstance(one, RetailRow) and isinstance(three, RetailRow)
    assert hourly(one, "reserved_1y") == Decimal("2.854680")  # 25,007 / 8,760 to 6 places
    assert hourly(three, "reserved_3y") == Decimal("42.5")  # 1,116,900 / 26,280


# -- the client -----------------------------------------------------------------------------------------------------


def test_a_read_follows_next_page_links_waits_out_a_429_and_keeps_the_right_rows(api: PricesServer):
    api.answer_first[("westeurope", H100, "Consumption", 2)] = [(429, {"Retry-After": "1"}, b"Too Many Requests")]
    client = RetailPricesClient(url=api.url)
    started = time.monotonic()
    read = read_prices([H100, D8, A100], ["westeurope"], client=client, today=dt.date(2026, 11, 28))
    assert time.monotonic() - started >= 1.0  # Retry-After honoured
    assert api.requests.count(("westeurope", H100, "Consumption", 2)) == 2 and read.retries == 1
    assert ("westeurope", H100, "Consumption", 3) in api.requests  # the second NextPageLink followed
    prices = {(p.vm_size, p.region): p for p in read.table.expand("test")}
    h100, d8 = prices[(H100, "westeurope")], prices[(D8, "westeurope")]
    # Linux 110.24 (not Windows 132.232, not the older 117.984, not DevTest 99.0); Spot 22.048 (not Low Priority)
    assert (h100.pay_as_you_go, h100.spot, h100.reserved_1y, h100.reserved_3y) == (110.24, 22.048, 62.5, 42.5)
    assert (d8.pay_as_you_go, d8.spot, d8.reserved_1y, d8.reserved_3y) == (0.452, 0.0904, 0.285, 0.183)
    assert h100.as_of == dt.date(2026, 11, 28) and h100.source.startswith(api.url + "?api-version=2023-01-01-preview")
    assert "armRegionName eq 'westeurope' and armSkuName eq 'Standard_ND96isr_H100_v5'" in h100.source
    assert read.unpriced == ((A100, "westeurope"),)
    assert (read.queries, read.pages, read.rows, read.used) == (6, 8, 19, 8)
    assert dict(read.skipped) == {
        "Windows": 3,
        "Low Priority (Azure Batch)": 1,
        "DevTestConsumption (Dev/Test offers only)": 1,
        "Cloud Services": 1,
        "reservation term 5 Years (1 Year and 3 Years are read)": 1,
        "an older or repeated row of the same figure (effectiveStartDate)": 1,
        "malformed: retailPrice missing or not a number": 1,
        "malformed: armSkuName missing or not text": 1,
        "malformed: not an object": 1,
    }


def test_a_5xx_is_retried_and_a_4xx_is_not(api: PricesServer):
    api.answer_first[("eastus", A100, "Consumption", 1)] = [(503, {"Retry-After": "0"}, b"busy")]
    read = read_prices([A100], ["eastus"], client=RetailPricesClient(url=api.url), today=today())
    assert read.retries == 1 and read.table.expand("t")[0].pay_as_you_go == 3.673
    error = json.dumps({"Error": {"Code": "BadRequest", "Message": "Invalid OData filter"}}).encode()
    api.answer_first[("eastus", A100, "Reservation", 1)] = [(400, {}, error)]
    with pytest.raises(
        PricesError, match=r"Reservation prices of Standard_NC24ads_A100_v4 in eastus: HTTP 400 .*Invalid"
    ):
        read_prices([A100], ["eastus"], client=RetailPricesClient(url=api.url), today=today())


def test_waits_are_bounded_a_long_retry_after_fails_at_once_and_the_total_is_capped(api: PricesServer):
    api.answer_first[("eastus", A100, "Consumption", 1)] = [(429, {"Retry-After": "3600"}, b"")]
    started = time.monotonic()
    with pytest.raises(PricesError, match=r"asks to wait 3600 s \(HTTP 429.*try again later"):
        read_prices([A100], ["eastus"], client=RetailPricesClient(url=api.url), today=today())
    assert time.monotonic() - started < 5
    api.answer_first[("eastus", A100, "Consumption", 1)] = [(429, {"Retry-After": "1"}, b"")] * 3
    with pytest.raises(PricesError, match=r"still HTTP 429 after 1 s of waiting in all \(at most 1 s\)"):
        read_prices([A100], ["eastus"], client=RetailPricesClient(url=api.url, wait_budget_s=1), today=today())
    api.answer_first[("eastus", A100, "Consumption", 1)] = [(500, {"Retry-After": "0"}, b"")] * 2
    with pytest.raises(PricesError, match=r"HTTP 500 Internal Server Error 2 times"):
        read_prices([A100], ["eastus"], client=RetailPricesClient(url=api.url, attempts=2), today=today())


def test_a_page_that_is_not_the_apis_or_a_link_elsewhere_stops_the_read(api: PricesServer):
    key = ("eastus", H100, "Consumption", 1)
    api.pages[key] = b"<html>maintenance</html>"
    with pytest.raises(PricesError, match=r"Consumption prices of Standard_ND96isr_H100_v5 in eastus: .*not JSON"):
        read_prices([H100], ["eastus"], client=RetailPricesClient(url=api.url), today=today())
    api.pages[key] = json.dumps({"Items": [], "NextPageLink": "https://elsewhere.example/api/retail/prices"}).encode()
    with pytest.raises(PricesError, match=r"NextPageLink 'https://elsewhere.example/.*' leaves .*not followed"):
        read_prices([H100], ["eastus"], client=RetailPricesClient(url=api.url), today=today())
    api.pages[key] = json.dumps({"value": []}).encode()
    with pytest.raises(PricesError, match=r"no Items list"):
        read_prices([H100], ["eastus"], client=RetailPricesClient(url=api.url), today=today())


def test_an_unreachable_api_is_an_error_naming_the_query():
    with PricesServer() as server:
        url = server.url
    client = RetailPricesClient(url=url, attempts=2, sleep=lambda _s: None)
    with pytest.raises(PricesError, match=r"prices of Standard_NC24ads_A100_v4 in eastus: cannot reach 127.0.0.1"):
        read_prices([A100], ["eastus"], client=client, today=today())
    assert client.retries >= 1  # each of its two queries tried again once


# -- the command ----------------------------------------------------------------------------------------------------


def test_azure_prices_writes_the_table_and_says_what_it_read(api: PricesServer, project: Path):
    table = project / "azure_prices.yaml"
    args = ["azure", "prices", "--region", "westeurope", "--size", H100, "--size", "standard_d8ds_v5", "--size", A100]
    code, out, err = gpufleet(*args, "-o", str(table), "--root", str(project))
    assert code == 0, err
    assert out == ""
    assert f"reading 6 queries (3 size(s) x 1 region(s) x 2 price types) from {api.url}" in err
    assert "read 19 row(s) on 8 page(s) of 6 queries (0 retried, 0 s waited); used 8 row(s): 2 of 3" in err
    assert "Windows: 3" in err and "Low Priority (Azure Batch): 1" in err and "malformed: not an object: 1" in err
    assert f"no price row in westeurope for 1 size(s): {A100}" in err
    assert f"wrote {table}: 2 size/region pair(s)" in err
    text = table.read_text()
    assert text.startswith("# Azure VM prices in USD per hour (Linux), written by `gpufleet azure prices` on")
    assert f"# {A100} in westeurope" in text  # the pair without a price row, named in the file
    assert "westeurope: {pay_as_you_go: 110.24, spot: 22.048, reserved_1y: 62.5, reserved_3y: 42.5}" in text
    read = read_price_table(table, load_catalog())  # the written file is a valid table
    assert [(e.vm_size, list(e.regions), e.as_of) for e in read.prices] == [
        (D8, ["westeurope"], today()),
        (H100, ["westeurope"], today()),
    ]
    code, out, _ = gpufleet(*args, "--root", str(project))  # without -o: the same table on stdout
    assert code == 0 and out == text
    code, out, _ = gpufleet(*args, "--json", "--root", str(project))
    data = json.loads(out)
    assert data["file"] is None and data["currency"] == "USD"
    assert data["prices"][1] == {
        "vm_size": H100,
        "region": "westeurope",
        "pay_as_you_go": 110.24,
        "spot": 22.048,
        "reserved_1y": 62.5,
        "reserved_3y": 42.5,
        "source": data["prices"][1]["source"],
        "as_of": today().isoformat(),
    }
    assert data["read"]["unpriced"] == [{"vm_size": A100, "region": "westeurope"}]
    assert {"reason": "Windows", "rows": 3} in data["read"]["skipped"]


def test_by_default_it_reads_every_catalog_size_in_the_regions_of_the_projects_stacks(api: PricesServer, project: Path):
    code, out, err = gpufleet("azure", "prices", "--json", "--root", str(project))
    assert code == 0, err
    catalog = load_catalog()
    sizes = {s.name for s in catalog.vm_sizes if not s.retired(today())} | {s.name for s in catalog.system_vm_sizes}
    assert {r for r, *_ in api.requests} == {"westeurope", "eastus"}  # lab-local's region 'local' is not Azure's
    assert {s for _, s, *_ in api.requests} == sizes
    data = json.loads(out)
    assert data["read"]["queries"] == len(sizes) * 2 * 2
    assert {(p["vm_size"], p["region"]) for p in data["prices"]} == {
        (H100, "westeurope"),
        (D8, "westeurope"),
        (H100, "eastus"),
        (A100, "eastus"),
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--region", "west-europe"], "unknown Azure region 'west-europe'; did you mean 'westeurope'? valid:"),
        (["--region", "westeurope", "--size", "Standard_ND96isr_H100v5"], "did you mean 'Standard_ND96isr_H100_v5'"),
    ],
)
def test_an_unknown_region_or_size_is_a_usage_error_naming_the_valid_ones(
    api: PricesServer, project: Path, args: list[str], message: str
):
    code, _, err = gpufleet("azure", "prices", *args, "--root", str(project))
    assert code == 2 and message in " ".join(err.split())
    assert api.requests == []  # nothing asked


def test_a_project_without_azure_stacks_needs_region(api: PricesServer, tmp_path: Path):
    (tmp_path / "Pulumi.yaml").write_text("name: x\nruntime: python\n")
    code, _, err = gpufleet("azure", "prices", "--root", str(tmp_path))
    assert code == 2 and "names an Azure region: give --region REGION" in err


def test_when_the_api_fails_nothing_is_written_and_the_exit_is_1(api: PricesServer, project: Path):
    api.answer_first[("westeurope", H100, "Reservation", 1)] = [(403, {}, b"")]
    table = project / "azure_prices.yaml"
    code, _, err = gpufleet("azure", "prices", "--region", "westeurope", "--size", H100, "-o", str(table))
    assert code == 1 and "HTTP 403" in err and "nothing written" in err
    assert not table.exists()


def test_refreshing_a_table_keeps_the_pairs_not_read_and_drops_a_pair_read_without_rows(
    api: PricesServer, tmp_path: Path
):
    table = tmp_path / "azure_prices.yaml"
    assert gpufleet("azure", "prices", "--region", "eastus", "--size", H100, "--size", A100, "-o", str(table))[0] == 0
    api.pages[("eastus", A100, "Consumption", 1)] = json.dumps({"Items": [], "NextPageLink": None}).encode()
    code, _, err = gpufleet("azure", "prices", "--region", "westeurope", "--region", "eastus", "--size", A100)
    assert code == 0 and "no price row in westeurope for 1 size(s)" in err
    code, _, err = gpufleet("azure", "prices", "--region", "westeurope", "--size", H100, "-o", str(table))
    assert code == 0 and "2 kept from before" in err
    prices = {(p.vm_size, p.region): p for p in read_price_table(table, load_catalog()).expand("t")}
    assert set(prices) == {(H100, "westeurope"), (H100, "eastus"), (A100, "eastus")}
    assert prices[(H100, "eastus")].pay_as_you_go == 98.32
    code, _, _ = gpufleet("azure", "prices", "--region", "eastus", "--size", A100, "-o", str(table))
    assert code == 0  # A100 in eastus read again, now without a row: its old entry goes
    assert {(p.vm_size, p.region) for p in read_price_table(table, load_catalog()).expand("t")} == {
        (H100, "westeurope"),
        (H100, "eastus"),
    }
    table.write_text("currency: USD\nprices: [oops]\n")
    code, _, err = gpufleet("azure", "prices", "--region", "eastus", "--size", A100, "-o", str(table))
    assert code == 1 and f"{table} is not a price table gpufleet can refresh: nothing written" in err
    assert table.read_text() == "currency: USD\nprices: [oops]\n"


# -- the tables a command prices with ---------------------------------------------------------------------------------


def test_cost_prices_every_pool_from_a_refreshed_table_with_its_table_and_date(api: PricesServer, project: Path):
    """The issue's acceptance: without a refreshed table, cost says which sizes lack a price, as before; with one
    (written from the recorded pages into the stack repository), every pool of prod-westeurope is priced, and each
    says which table and date its price comes from."""
    code, out, _ = gpufleet("cost", "prod-westeurope", "--root", str(project))
    assert code == 0
    assert (
        f"{SHIPPED_PRICES} has no price for Standard_D8ds_v5 (system), no price for {H100} (h100mig), no price for"
        f" {H100} (h100train) in westeurope: left out of the totals" in " ".join(out.split())
    )
    table = project / "azure_prices.yaml"
    code, _, err = gpufleet("azure", "prices", "--region", "westeurope", "--size", H100, "--size", D8, "-o", str(table))
    assert code == 0, err
    code, out, _ = gpufleet("cost", "prod-westeurope", "--root", str(project))
    assert code == 0
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "no price" not in out and "total*" not in out
    assert any(line.startswith("total 662.80 662.80 1,103.76 ") for line in lines), out  # min: 3 x 0.452 + 6 x 110.24
    source = f"{api.url}?api-version=2023-01-01-preview&meterRegion='primary'&$filter=serviceName eq 'Virtual Machines'"
    assert (
        f"h100mig: {H100}, pay-as-you-go $110.24/h per node ({table}, as of {today().isoformat()}; source: {source}"
        f" and armRegionName eq 'westeurope' and armSkuName eq '{H100}')" in lines
    )
    assert any(line.startswith(f"system: {D8}, pay-as-you-go $0.45/h per node ({table}, as of") for line in lines)
    assert "its 2 always-on node(s) reserved: $91,250 (1y), $62,050 (3y) a month, instead of $160,950" in out
    data = json.loads(gpufleet("cost", "prod-westeurope", "--json", "--root", str(project))[1])
    assert data["totals"]["complete"] is True and data["price_tables"] == [str(table), SHIPPED_PRICES]
    assert {p["price"]["table"] for p in data["pools"]} == {str(table)}
    assert {p["price"]["as_of"] for p in data["pools"]} == {today().isoformat()}


def _table(path: Path, *entries: tuple[str, str, float], as_of: str = "2026-11-20") -> Path:
    lines = ["currency: USD", "prices:"]
    for size, region, usd in entries:
        lines += [f"  - vm_size: {size}", f"    source: test {path.parent.name}", f"    as_of: {as_of}", "    regions:"]
        lines.append(f"      {region}: {{pay_as_you_go: {usd}}}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_the_project_table_comes_first_then_the_users_config_then_the_shipped_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Per size and region, the first table that prices it (test figures, not Azure's)."""
    project, config = tmp_path / "project", tmp_path / "config"
    _table(project / "azure_prices.yaml", (H100, "westeurope", 1.5))
    _table(config / "gpufleet" / "azure_prices.yaml", (H100, "westeurope", 2.5), (H100, "eastus", 3.5))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    catalog = priced_catalog(project)
    assert catalog.price(H100, "westeurope").pay_as_you_go == 1.5  # type: ignore[union-attr]
    assert catalog.price(H100, "westeurope").table == str(project / "azure_prices.yaml")  # type: ignore[union-attr]
    assert catalog.price(H100, "eastus").pay_as_you_go == 3.5  # type: ignore[union-attr]  # the config's
    assert catalog.price(H100, "eastus").spot is None  # type: ignore[union-attr]  # the entry wins whole
    shipped = catalog.price("Standard_NC24ads_A100_v4", "eastus")
    assert shipped is not None and shipped.table == SHIPPED_PRICES and shipped.pay_as_you_go == 3.673
    assert catalog.price_tables == (
        str(project / "azure_prices.yaml"),
        str(config / "gpufleet" / "azure_prices.yaml"),
        SHIPPED_PRICES,
    )
    assert load_catalog().price(H100, "westeurope") is None  # the packaged catalog stays as shipped
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")  # not absolute: XDG says ignore it, use ~/.config
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    _table(tmp_path / "home" / ".config" / "gpufleet" / "azure_prices.yaml", (H100, "eastus", 4.5))
    assert price_table_paths(None) == [tmp_path / "home" / ".config" / "gpufleet" / "azure_prices.yaml"]
    assert priced_catalog(None).price(H100, "eastus").pay_as_you_go == 4.5  # type: ignore[union-attr]


def test_plan_size_and_promote_say_which_table_and_date_a_price_comes_from(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    """Test figures in a table at the project's root (not Azure's)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty-config"))
    monkeypatch.setenv("COLUMNS", "200")
    table = _table(project / "azure_prices.yaml", (H100, "westeurope", 100.0), (D8, "westeurope", 0.5))
    code, out, _ = gpufleet("plan", "staging-westeurope", "--root", str(project))
    lines = [line.strip() for line in out.splitlines()]
    assert code == 0 and f"price: {table}, as of 2026-11-20; source: test project" in lines
    code, out, _ = gpufleet(
        "size", "--model", "llama-3.1-70b", "--region", "westeurope", "--root", str(project), "--gpu", "H100-SXM5-80GB"
    )
    assert code == 0 and f"prices in westeurope from {table}, as of 2026-11-20: {H100}" in " ".join(out.split())
    # a promotion whose stack file aliases an anchor of the release block: the target's H100 pool changes
    dev, staging = project / "Pulumi.dev-westeurope.yaml", project / "Pulumi.staging-westeurope.yaml"
    dev.write_text(dev.read_text().replace('driver_branch: "595"', "driver_branch: &nodes 595"))
    text = staging.read_text().replace('driver_branch: "595"', "driver_branch: &nodes 580")
    staging.write_text(
        text.replace("        count: 1\n", "        count: 1\n        autoscaling: {min: 1, max: *nodes}\n")
    )
    identity = ["-c", "user.name=gpufleet tests", "-c", "user.email=ci@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], [*identity, "commit", "-q", "-m", "stacks"]):
        subprocess.run(
            ["git", *args], cwd=project, check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=60
        )
    code, out, _ = gpufleet("promote", "staging-westeurope", "--dry-run", "--root", str(project))
    assert f"price of {H100} in westeurope: {table}, as of 2026-11-20; source: test project" in out
    code, out, _ = gpufleet("promote", "staging-westeurope", "--dry-run", "--json", "--root", str(project))
    prices = json.loads(out)["cost"]["prices"]
    assert prices == [{"vm_size": H100, "region": "westeurope", "table": str(table), "as_of": "2026-11-20"}]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (
            "currency: USD\nprices:\n  - vm_size: Standard_ND96isr_H100v5\n    source: x\n    as_of: 2026-11-20\n"
            "    regions: {westeurope: {pay_as_you_go: 1}}\n",
            ":3: prices[0].vm_size: 'Standard_ND96isr_H100v5' is not a VM size the catalog knows; did you mean"
            " 'Standard_ND96isr_H100_v5'?",
        ),
        (
            "prices:\n  - vm_size: Standard_ND96isr_H100_v5\n    source: x\n    as_of: 2026-11-20\n    regions:\n"
            "      westeurope: {pay_as_you_go: 1, spot: -2}\n",
            ":6: prices[0].regions.westeurope.spot:",
        ),
        (
            "prices:\n  - vm_size: Standard_ND96isr_H100_v5\n    source: x\n    as_of: 2026-11-20\n    regions:\n"
            "      west-europe: {pay_as_you_go: 1}\n",
            ":6: prices[0].regions.west-europe: 'west-europe' is not an Azure region the catalog knows; did you mean"
            " 'westeurope'?",
        ),
        (
            "prices:\n  - vm_size: Standard_ND96isr_H100_v5\n    source: x\n    as_of: 2026-11-20\n    regions:\n"
            "      westeurope: {}\n",
            ":6: prices[0].regions.westeurope: no figure: give pay_as_you_go",
        ),
        ("currency: EUR\nprices: []\n", ":1: currency: 'EUR': gpufleet prices in USD"),
        ("prices: [\n", ":2: YAML:"),
        ("- just a list\n", ":1: a list, not a price table"),
    ],
)
def test_a_malformed_user_table_is_an_error_at_its_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, error: str
):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "empty-config"))
    table = project / "azure_prices.yaml"
    table.write_text(text)
    with pytest.raises(PriceTableError) as raised:
        priced_catalog(project)
    assert f"{table}{error}" in str(raised.value)
    code, out, err = gpufleet("cost", "prod-westeurope", "--root", str(project))
    assert code == 1 and out == "" and "invalid price table" in err and f"{table}{error}" in " ".join(err.split())
