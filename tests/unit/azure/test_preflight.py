"""``gpufleet preflight`` as a user meets it, with no Azure here: a local HTTPS server (a certificate made for the
test) replays ARM's answers from tests/fixtures/azure-arm/ (its README says what is recorded and what is made up),
and the real SDK (``azure-mgmt-compute``'s ``ComputeManagementClient``) reads them: through a static-token credential
pointed at the server (``base_url``, ``connection_verify``), and, for the command line, through
``DefaultAzureCredential`` with an ``az`` on the PATH that prints a token (the server refuses any other). Every
verdict, the cache, the failures that make a check "not checked", and the promotion gate."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from gpufleet.azure.arm import Arm, cache_file, run_preflight
from gpufleet.azure.preflight import Preflight, parse_skus, quota_key, surge_nodes
from gpufleet.spec.load import load_stack
from gpufleet.spec.models import Upgrade
from tests.cli_server import SERVER
from tests.conftest import FIXTURES, REPO, TODAY, gpufleet
from tests.tls import self_signed

ARM_FIXTURES = FIXTURES / "azure-arm"
SUB = "00000000-0000-0000-0000-000000000001"
TOKEN = "gpufleet-preflight-test-token"
T0 = dt.datetime(2026, 11, 28, 10, 0, tzinfo=dt.UTC)


# -- the local ARM -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the test's own CA: the client trusts it through connection_verify
    or REQUESTS_CA_BUNDLE) and its key."""
    return self_signed(tmp_path_factory.mktemp("tls"), "gpufleet preflight test ARM")


def fixture_rows(name: str) -> list[Any]:
    return json.loads((ARM_FIXTURES / name).read_text())["value"]


@dataclass
class FakeArm:
    """ARM for one test: ``answers[(api, region)]`` is a fixture file name, a list of rows, or ``(status, body file)``;
    ``requests`` what it was asked (path and query, Authorization header)."""

    url: str
    ca: str
    answers: dict[tuple[str, str], Any] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)

    def asked(self, api: str) -> int:
        part = "/skus" if api == "skus" else "/usages"
        return sum(1 for path, _ in self.requests if part in path)


def _handler(arm: FakeArm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            arm.requests.append((self.path, self.headers.get("Authorization", "")))
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self.reply(401, json.loads((ARM_FIXTURES / "error-401.json").read_text()))
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            base = f"/subscriptions/{SUB}/providers/Microsoft.Compute"
            if url.path == f"{base}/skus" and query.get("api-version") == ["2021-07-01"]:
                api, region = "skus", query["$filter"][0].removeprefix("location eq '").removesuffix("'")
            elif url.path.startswith(f"{base}/locations/") and query.get("api-version") == ["2026-04-01"]:
                api, region = "usages", url.path.split("/")[-2]
            else:
                return self.reply(404, {"error": {"code": "NotFound", "message": f"no route {url.path}"}})
            answer = arm.answers.get((api, region), f"{api}-{region}.json")
            if isinstance(answer, tuple):
                status, body = answer
                return self.reply(status, json.loads((ARM_FIXTURES / body).read_text()))
            rows = fixture_rows(answer) if isinstance(answer, str) else answer
            if api == "usages":
                return self.reply(200, {"value": rows})
            half = len(rows) // 2  # two pages, as ARM pages a long list
            if query.get("$skiptoken") == ["2"]:
                return self.reply(200, {"value": rows[half:]})
            next_link = f"{arm.url}{url.path}?{url.query}&$skiptoken=2"
            return self.reply(200, {"value": rows[:half], "nextLink": next_link})

    return Handler


@pytest.fixture
def arm(tls: tuple[Path, Path]) -> Iterator[FakeArm]:
    cert, key = tls
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    fake = FakeArm(f"https://127.0.0.1:{server.server_address[1]}", str(cert))
    server.RequestHandlerClass = _handler(fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test starts with an empty cache of its own: never the user's."""
    monkeypatch.setenv("GPUFLEET_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


class StaticToken:
    """A credential with one fixed token, as azure-core's token credentials are called."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token

    def get_token(self, *scopes: str, **kwargs: Any) -> Any:
        from azure.core.credentials import AccessToken

        return AccessToken(self.token, int(time.time()) + 3600)


def preflight(
    stack: str,
    arm: FakeArm,
    *,
    token: str = TOKEN,
    deployed: bool = False,
    refresh: bool = False,
    now: dt.datetime = T0,
    base_url: str | None = None,
) -> Preflight:
    """The library's preflight of an example stack, through the SDK against the local ARM."""
    loaded = load_stack(REPO / f"Pulumi.{stack}.yaml", today=TODAY)
    reach = Arm(SUB, base_url=base_url or arm.url, credential=StaticToken(token), connection_verify=arm.ca)
    return run_preflight(
        loaded, deployed=deployed, refresh=refresh, arm=reach, now=now, environ={"AZURE_SUBSCRIPTION_ID": SUB}
    )


def lines(report: Preflight) -> list[str]:
    return [str(c) for c in report.checks]


def line_of(report: Preflight, pool: str, what: str) -> str:
    """The line of one check (``offered``, ``zones``, or ``quota <name>``) of one pool."""
    found = [str(c) for c in report.checks if c.pool == pool and (f"quota {c.quota}" if c.quota else c.check) == what]
    assert len(found) == 1, (pool, what, lines(report))
    return found[0]


# -- verdicts -----------------------------------------------------------------------------------------------------


def test_offered_and_clear_every_check_ok_with_the_figures(arm: FakeArm):
    report = preflight("prod-westeurope", arm)
    assert report.passes() and not report.skipped, lines(report)
    assert [(r.api, r.cached, len(r.rows)) for r in report.reads] == [("skus", False, 8), ("usages", False, 8)]
    assert arm.asked("skus") == 2  # both pages, through nextLink
    file = str(REPO / "Pulumi.prod-westeurope.yaml")
    assert line_of(report, "h100mig", "offered") == (
        f"{file}:31: h100mig: offered: ok: Standard_ND96isr_H100_v5 is offered in westeurope: 96 vCPUs, family"
        " standardNDSH100v5Family"
    )
    assert line_of(report, "h100mig", "zones").endswith("h100mig: zones: ok: zones 1, 2, 3 offered")
    # two pools of one family, summed: h100mig 6 max + 1 surge (max_surge 1), h100train 4 nodes, max_unavailable
    family = line_of(report, "h100train", "quota standardNDSH100v5Family")
    assert family == (
        f"{file}:51: h100train: quota standardNDSH100v5Family: ok: standardNDSH100v5Family (Standard NDSH100v5 Family"
        " vCPUs): the stack needs 1056 vCPUs at max nodes + surge (h100mig (6 max + 1 surge) x 96 = 672 + h100train"
        " (4 max + 0 surge) x 96 = 384); used 0, limit 1152"
    )
    # the system pool: AKS's default surge (gpufleet sends none), 3 nodes + 1
    assert "system (3 max + 1 surge) x 8 = 32" in line_of(report, "system", "quota cores")
    assert "the stack needs 1088 vCPUs" in line_of(report, "system", "quota cores")
    quota = next(c for c in report.checks if c.quota == "cores")
    assert (quota.need, quota.used, quota.limit, quota.request) == (1088, 100, 2000, None)


def test_percentage_surge_rounds_up_and_spot_pools_draw_on_low_priority_cores(arm: FakeArm):
    report = preflight("prod-eastus", arm)
    assert report.passes(), lines(report)
    # nvlmig: autoscaling max 8, max_surge 33%: 2.64 surge nodes, rounded up to 3
    assert "nvlmig (8 max + 3 surge) x 80 = 880" in line_of(report, "nvlmig", "quota standardNCadsH100v5Family")
    # t4spot: spot, max 10, no surge (max_unavailable); not in the family's or the regional quota
    spot = line_of(report, "t4spot", "quota lowPriorityCores")
    assert "lowPriorityCores (Total Regional Spot vCPUs): the stack needs 160 vCPUs" in spot
    assert not any(c.pool == "t4spot" and c.quota in ("cores", "standardNCASv3_T4Family") for c in report.checks)


def test_family_names_match_usages_without_regard_to_case_and_spaces(arm: FakeArm):
    report = preflight("dev-westeurope", arm)
    assert report.passes(), lines(report)
    # the SKU says "Standard NCASv3_T4 Family", the usages "standardNCASv3_T4Family"
    assert ": ok: standardNCASv3_T4Family (Standard NCASv3_T4 Family vCPUs)" in line_of(
        report, "t4shared", "quota standardNCASv3_T4Family"
    )
    assert quota_key("Standard NCASv3_T4 Family") == quota_key("standardNCASv3_T4Family")
    assert "used 0, limit 96" in line_of(report, "a100mig", "quota standardNCADSA100v4Family")


def test_a_restricted_zone_a_restricted_size_an_absent_size_and_no_spot(arm: FakeArm):
    arm.answers[("skus", "westeurope")] = "skus-westeurope-restricted.json"
    prod = preflight("prod-westeurope", arm)
    assert not prod.passes(allow_unchecked=True)
    assert line_of(prod, "h100mig", "zones").endswith(
        "h100mig: zones: UNAVAILABLE: zone 2 is restricted: not available to this subscription there"
        " (NotAvailableForSubscription: ask Azure support, or choose another region or zone) (usable zones: 1, 3)"
    )
    assert line_of(prod, "h100train", "zones").endswith(": ok: zone 1 offered")  # zone 1 only: not restricted
    assert [c.pool for c in prod.failed] == ["h100mig"]

    dev = preflight("dev-westeurope", arm)
    assert line_of(dev, "t4shared", "offered").endswith(
        "t4shared: offered: UNAVAILABLE: Standard_NC4as_T4_v3 is not offered in westeurope to this subscription"
        " (not in the region's Resource SKUs)"
    )
    assert line_of(dev, "a100mig", "offered").endswith(
        "a100mig: offered: UNAVAILABLE: Standard_NC24ads_A100_v4 is restricted in westeurope: not available to this"
        " subscription there (NotAvailableForSubscription: ask Azure support, or choose another region or zone)"
    )
    assert line_of(dev, "t4spot", "offered").endswith(
        "t4spot: offered: UNAVAILABLE: Standard_NC8as_T4_v3 is not offered as spot in westeurope (LowPriorityCapable:"
        " False)"
    )
    assert {c.pool for c in dev.failed} == {"t4shared", "a100mig", "t4spot"}
    # a size without a row has no family to check: said, not passed
    assert "no family quota to check" in line_of(dev, "t4shared", "quota")


def test_a_family_at_its_limit_is_short_by_the_stack_s_need_summed_over_its_pools(arm: FakeArm):
    arm.answers[("usages", "westeurope")] = "usages-westeurope-family-at-limit.json"
    report = preflight("prod-westeurope", arm)
    short = [c for c in report.failed if c.quota == "standardNDSH100v5Family"]
    assert [c.pool for c in short] == ["h100mig", "h100train"]
    assert (short[0].need, short[0].used, short[0].limit, short[0].request) == (1056, 768, 768, 1824)
    assert line_of(report, "h100mig", "quota standardNDSH100v5Family").endswith(
        "the stack needs 1056 vCPUs at max nodes + surge (h100mig (6 max + 1 surge) x 96 = 672 + h100train (4 max + 0"
        " surge) x 96 = 384); used 768, limit 768: short by 1056: request a limit of 1824 (+1056) for"
        " standardNDSH100v5Family"
    )
    # deployed: the pools' minimum nodes are in the 768 used; the growth still does not fit
    deployed = preflight("prod-westeurope", arm, deployed=True)
    check = next(c for c in deployed.failed if c.pool == "h100mig")
    assert (check.need, check.request) == (480, 1248)
    assert "h100mig (6 max + 1 surge - 2 running) x 96 = 480" in check.detail


def test_the_regional_total_short_while_every_family_fits(arm: FakeArm):
    rows = fixture_rows("usages-westeurope.json")
    next(r for r in rows if r["name"]["value"] == "cores").update(currentValue=100, limit=1000)
    arm.answers[("usages", "westeurope")] = rows
    report = preflight("prod-westeurope", arm)
    assert {c.quota for c in report.failed} == {"cores"}
    assert [c.pool for c in report.failed] == ["system", "h100mig", "h100train"]
    assert report.failed[0].detail.endswith(
        "used 100, limit 1000: short by 188: request a limit of 1188 (+188) for cores"
    )


def test_a_spot_pool_short_of_low_priority_cores(arm: FakeArm):
    rows = fixture_rows("usages-westeurope.json")
    next(r for r in rows if r["name"]["value"] == "lowPriorityCores").update(currentValue=4, limit=16)
    arm.answers[("usages", "westeurope")] = rows
    report = preflight("dev-westeurope", arm)
    assert [(c.pool, c.quota) for c in report.failed] == [("t4spot", "lowPriorityCores")]
    assert report.failed[0].detail.endswith("short by 12: request a limit of 28 (+12) for lowPriorityCores")


def test_malformed_rows_are_skipped_and_their_checks_not_checked_never_passed(arm: FakeArm):
    arm.answers[("skus", "westeurope")] = "skus-westeurope-malformed.json"
    arm.answers[("usages", "westeurope")] = "usages-westeurope-malformed.json"
    report = preflight("prod-westeurope", arm)
    assert sorted(str(s) for s in report.skipped) == [
        "skus row 2: not an object: '42'",
        "skus row 3: a virtualMachines row without a name",
        "skus row 8 (Standard_NC24ads_A100_v4): restrictions is not a list",
        "skus row 9 (Standard_ND96isr_H100_v5): vCPUs capability is 'ninety-six', not a whole number of vCPUs",
        "usages row 1: no name.value",
        "usages row 4 (standardDDSv5Family): currentValue '16' / limit 100 are not counts",
    ]
    assert line_of(report, "h100mig", "offered").endswith(
        "h100mig: offered: not checked: Azure's row for Standard_ND96isr_H100_v5 is malformed (vCPUs capability is"
        " 'ninety-six', not a whole number of vCPUs)"
    )
    assert line_of(report, "system", "quota standardDDSv5Family").endswith(
        "not checked: the usages row for standardDDSv5Family is malformed (currentValue '16' / limit 100 are not"
        " counts); the stack needs 32 vCPUs: system (3 max + 1 surge) x 8 = 32"
    )
    assert line_of(report, "system", "offered").endswith(
        ": ok: Standard_D8ds_v5 is offered in westeurope: 8 vCPUs, family standardDDSv5Family"
    )
    assert not report.failed and not report.passes() and report.passes(allow_unchecked=True)
    # restrictions that are no list make the whole row unusable, not an unrestricted size
    skus, _ = parse_skus(fixture_rows("skus-westeurope-malformed.json"), "westeurope")
    assert "standard_nc24ads_a100_v4" not in skus and "standard_d8ds_v5" in skus


def test_a_rejected_token_a_credential_without_reader_and_no_network_are_not_checked(arm: FakeArm):
    rejected = preflight("prod-westeurope", arm, token="expired")
    assert {c.status for c in rejected.checks} == {"not checked"}
    assert {c.detail for c in rejected.checks} == {
        "ARM refused the credential (HTTP 401 InvalidAuthenticationToken): sign in again (az login)"
    }
    assert arm.asked("usages") == 0  # the same token would be refused again: not asked

    arm.answers[("skus", "westeurope")] = (403, "error-403.json")
    forbidden = preflight("prod-westeurope", arm)
    assert line_of(forbidden, "h100mig", "offered").endswith(
        "h100mig: offered: not checked: the credential may not read Resource SKUs (HTTP 403 AuthorizationFailed): it"
        f" needs Reader on subscription {SUB}"
    )

    closed = preflight("prod-westeurope", arm, base_url="https://127.0.0.1:9", refresh=True)
    assert {c.status for c in closed.checks} == {"not checked"}
    assert next(iter(closed.checks)).detail.startswith("cannot reach ARM at https://127.0.0.1:9: ")


def test_answers_are_cached_for_ten_minutes_with_their_read_time(arm: FakeArm, cache: Path):
    first = preflight("prod-westeurope", arm, now=T0)
    assert (arm.asked("skus"), arm.asked("usages")) == (2, 1)
    stored = cache_file(arm.url, SUB, "westeurope", "skus")
    assert stored.is_relative_to(cache / "azure") and stored.name == "skus-2021-07-01.json"
    assert json.loads(stored.read_text())["read_at"] == T0.isoformat()

    again = preflight("prod-westeurope", arm, now=T0 + dt.timedelta(minutes=9, seconds=59))
    assert (arm.asked("skus"), arm.asked("usages")) == (2, 1)  # nothing read
    assert [(r.cached, r.read_at) for r in again.reads] == [(True, T0), (True, T0)]
    assert lines(again) == lines(first)

    later = preflight("prod-westeurope", arm, now=T0 + dt.timedelta(minutes=10))
    assert (arm.asked("skus"), arm.asked("usages")) == (4, 2)
    assert [r.cached for r in later.reads] == [False, False]

    preflight("prod-westeurope", arm, now=T0 + dt.timedelta(minutes=11), refresh=True)
    assert (arm.asked("skus"), arm.asked("usages")) == (6, 3)


def test_surge_is_a_count_a_percentage_rounded_up_or_none():
    assert surge_nodes(Upgrade(max_surge="2"), 10) == 2
    assert surge_nodes(Upgrade(max_surge="33%"), 4) == 2
    assert surge_nodes(Upgrade(max_surge="100%"), 6) == 6
    assert surge_nodes(Upgrade(max_unavailable="1"), 6) == 0
    assert [surge_nodes(None, n) for n in (0, 3, 10, 11, 25)] == [0, 1, 1, 2, 3]


# -- the command line ---------------------------------------------------------------------------------------------


def cli_env(tmp_path: Path, arm: FakeArm, **extra: str) -> dict[str, str]:
    """The command's environment: DefaultAzureCredential limited to the Azure CLI credential, and an ``az`` that
    prints the server's token (as ``az account get-access-token --output json`` does); the local ARM, trusted
    through REQUESTS_CA_BUNDLE; an empty cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    az = bin_dir / "az"
    expires = int(time.time()) + 3600
    az.write_text(f'#!/bin/sh\necho \'{{"accessToken": "{TOKEN}", "expires_on": {expires}, "tokenType": "Bearer"}}\'\n')
    az.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "COLUMNS": "200",
        "GPUFLEET_CACHE": str(tmp_path / "cache"),
        "GPUFLEET_AZURE_ARM_URL": arm.url,
        "REQUESTS_CA_BUNDLE": arm.ca,
        "AZURE_TOKEN_CREDENTIALS": "AzureCliCredential",
        "AZURE_SUBSCRIPTION_ID": SUB,
        **extra,
    }


def run_cli(tmp_path: Path, arm: FakeArm, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return SERVER.run(list(args), cwd=REPO, env=cli_env(tmp_path, arm, **extra))


def test_cli_a_short_family_exits_1_naming_the_family_the_need_and_the_limit(tmp_path: Path, arm: FakeArm):
    arm.answers[("usages", "westeurope")] = "usages-westeurope-family-at-limit.json"
    proc = run_cli(tmp_path, arm, "preflight", "prod-westeurope")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"prod-westeurope: subscription {SUB} (from AZURE_SUBSCRIPTION_ID), region westeurope" in proc.stdout
    assert (
        "Pulumi.prod-westeurope.yaml:31: h100mig: quota standardNDSH100v5Family: SHORT: standardNDSH100v5Family"
        " (Standard NDSH100v5 Family vCPUs): the stack needs 1056 vCPUs" in proc.stdout
    )
    assert "used 768, limit 768: short by 1056: request a limit of 1824 (+1056)" in proc.stdout
    assert "Resource SKUs (api-version 2021-07-01): 8 rows read 2026-" in proc.stdout
    assert "2 check(s) fail: pulumi up would fail on them" in proc.stdout
    assert all(auth == f"Bearer {TOKEN}" for _, auth in arm.requests)  # DefaultAzureCredential's token, from az

    data = json.loads(run_cli(tmp_path, arm, "preflight", "prod-westeurope", "--json").stdout)
    assert data["stack"] == "prod-westeurope" and data["subscription"] == SUB
    short = [c for c in data["checks"] if c["status"] == "short"]
    assert {(c["pool"], c["check"], c["quota"], c["need"], c["used"], c["limit"]) for c in short} == {
        ("h100mig", "quota", "standardNDSH100v5Family", 1056, 768, 768),
        ("h100train", "quota", "standardNDSH100v5Family", 1056, 768, 768),
    }
    assert {c["check"] for c in data["checks"]} == {"offered", "zones", "quota"}
    assert [r["cached"] for r in data["reads"]] == [True, True]  # the second run read the cache


def test_cli_a_restricted_zone_exits_1_naming_the_pool_and_the_zone(tmp_path: Path, arm: FakeArm):
    arm.answers[("skus", "westeurope")] = "skus-westeurope-restricted.json"
    proc = run_cli(tmp_path, arm, "preflight", "prod-westeurope")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Pulumi.prod-westeurope.yaml:31: h100mig: zones: UNAVAILABLE: zone 2 is restricted" in proc.stdout
    assert "1 check(s) fail" in proc.stdout


def test_cli_all_clear_exits_0_and_refresh_reads_again(tmp_path: Path, arm: FakeArm):
    proc = run_cli(tmp_path, arm, "preflight", "dev-westeurope")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "all clear" in proc.stdout and "from ARM" in proc.stdout
    cached = run_cli(tmp_path, arm, "preflight", "dev-westeurope")
    assert "from the cache" in cached.stdout and "from ARM" not in cached.stdout
    assert arm.asked("skus") == 2
    refreshed = run_cli(tmp_path, arm, "preflight", "dev-westeurope", "--refresh")
    assert "from ARM" in refreshed.stdout and arm.asked("skus") == 4


def test_cli_without_credentials_every_check_is_not_checked_and_exits_1(tmp_path: Path, arm: FakeArm):
    """No az, no AZURE_CLIENT_* variables, a HOME of its own; DefaultAzureCredential limited to the developer
    credentials (AZURE_TOKEN_CREDENTIALS=dev), so a managed identity of the machine running the tests cannot answer."""
    env = {**cli_env(tmp_path, arm), "PATH": "/usr/bin:/bin", "AZURE_TOKEN_CREDENTIALS": "dev"}
    proc = gpufleet("preflight", "prod-westeurope", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "not checked [1]: no Azure credentials: DefaultAzureCredential failed to retrieve a token" in proc.stdout
    assert proc.stdout.count("not checked: see [1]") == 9  # each check of the 3 pools
    assert "9 check(s) not made: not a pass (--allow-unchecked accepts that)" in proc.stdout
    assert proc.stderr == ""  # azure-identity's log of each credential stays out
    allowed = gpufleet("preflight", "prod-westeurope", "--allow-unchecked", env=env)
    assert allowed.returncode == 0 and "nothing fails; 9 check(s) not made (allowed)" in allowed.stdout
    assert arm.requests == []


def test_cli_without_a_subscription_says_where_to_set_one(tmp_path: Path, arm: FakeArm):
    env = cli_env(tmp_path, arm)
    del env["AZURE_SUBSCRIPTION_ID"]
    proc = SERVER.run(["preflight", "prod-westeurope", "--json"], cwd=REPO, env=env)
    assert proc.returncode == 1
    data = json.loads(proc.stdout)
    assert data["subscription"] is None
    assert {c["detail"] for c in data["checks"]} == {
        "no subscription: set AZURE_SUBSCRIPTION_ID, or azure-native:subscriptionId in the stack file"
    }
    # the stack file's azure-native:subscriptionId is what pulumi up deploys into: it comes first
    stack = tmp_path / "Pulumi.prod-westeurope.yaml"
    text = (REPO / "Pulumi.prod-westeurope.yaml").read_text()
    stack.write_text(text.replace("config:\n", f"config:\n  azure-native:subscriptionId: {SUB}\n", 1))
    (tmp_path / "Pulumi.yaml").write_text("name: gpufleet\nruntime: python\n")
    proc = SERVER.run(["preflight", str(stack), "--root", str(tmp_path)], cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"subscription {SUB} (from azure-native:subscriptionId at {stack}:3)" in proc.stdout


def test_cli_a_stack_without_aks_has_nothing_to_check(tmp_path: Path, arm: FakeArm):
    proc = run_cli(tmp_path, arm, "preflight", "lab-local")
    assert proc.returncode == 0 and "no AKS cluster: nothing to check" in proc.stdout
    assert run_cli(tmp_path, arm, "preflight", "no-such-stack").returncode == 2


# -- the promotion gate ---------------------------------------------------------------------------------------------


def git(root: Path, *args: str) -> str:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(root), "GIT_AUTHOR_DATE": "2026-11-20T10:00:00+00:00"}
    env["GIT_COMMITTER_DATE"] = env["GIT_AUTHOR_DATE"]
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL, env=env
    ).stdout


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A git repository of the example stacks whose prod stage lists the preflight gate alone, with a new release in
    staging (verified there: the gate is the only one asked)."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ["Pulumi.yaml", *(p.name for p in REPO.glob("Pulumi.*-*.yaml"))]:
        shutil.copy(REPO / name, root / name)
    policy = (REPO / "promotion.yaml").read_text()
    assert "    gates: [earlier_waves, verified, soaked]\n" in policy
    (root / "promotion.yaml").write_text(policy.replace("[earlier_waves, verified, soaked]", "[preflight]"))
    staging = root / "Pulumi.staging-westeurope.yaml"
    staging.write_text(staging.read_text().replace('driver_branch: "595"', 'driver_branch: "580"'))
    git(root, "init", "-q", "-b", "main")
    git(root, "-c", "user.email=ci@example.invalid", "-c", "user.name=tests", "add", "-A")
    git(root, "-c", "user.email=ci@example.invalid", "-c", "user.name=tests", "commit", "-q", "-m", "stacks")
    return root


def test_the_preflight_gate_refuses_a_promotion_with_preflight_s_lines_and_can_be_forced(
    tmp_path: Path, arm: FakeArm, project: Path
):
    arm.answers[("usages", "westeurope")] = "usages-westeurope-family-at-limit.json"
    env = cli_env(tmp_path, arm)
    status = SERVER.run(["promote", "status", "--root", str(project)], cwd=project, env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert arm.requests == []  # status does not ask Azure

    refused = SERVER.run(["promote", "prod-westeurope", "--root", str(project)], cwd=project, env=env)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "refused (preflight): pulumi up of prod-westeurope would fail (gpufleet preflight prod-westeurope" in (
        refused.stdout
    )
    # the target runs: its pools' minimum nodes are in the usage; the growth to max nodes + surge is short
    assert f"{project}/Pulumi.prod-westeurope.yaml:31: h100mig: quota standardNDSH100v5Family: SHORT:" in refused.stdout
    assert "used 768, limit 768: short by 480: request a limit of 1248 (+480)" in refused.stdout
    assert "(--force --reason TEXT goes past this gate)" in refused.stdout

    forced = SERVER.run(
        ["promote", "prod-westeurope", "--force", "--reason", "quota raised, ticket 42", "--root", str(project)],
        cwd=project,
        env=env,
    )
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert "forced (preflight)" in forced.stdout
    assert 'driver_branch: "580"' in (project / "Pulumi.prod-westeurope.yaml").read_text()


def test_the_preflight_gate_refuses_unchecked_unless_the_stage_allows_it(arm: FakeArm, project: Path):
    from gpufleet.fleet.promote import StackFiles, decide, load_policy

    files = StackFiles.read(project, ["staging-westeurope", "prod-westeurope"])
    policy = load_policy(project).policy
    assert policy is not None

    def unchecked(loaded: Any) -> Preflight:
        return run_preflight(loaded, deployed=True, environ={})  # no subscription: nothing can be asked

    refusals = decide(files, policy, [], "staging-westeurope", "prod-westeurope", T0, preflight=unchecked).refusals
    assert [r.gate for r in refusals] == ["preflight"]
    assert refusals[0].message.startswith(
        "9 preflight check(s) of prod-westeurope not made: no subscription: set AZURE_SUBSCRIPTION_ID, or"
        " azure-native:subscriptionId in the stack file; fix that and run gpufleet preflight prod-westeurope"
        " --deployed, or let stage prod pass unchecked (allow_unchecked_preflight: true in promotion.yaml)"
    )
    allowing = policy.model_copy(
        update={"stages": [s.model_copy(update={"allow_unchecked_preflight": s.name == "prod"}) for s in policy.stages]}
    )
    assert decide(files, allowing, [], "staging-westeurope", "prod-westeurope", T0, preflight=unchecked).refusals == []
    assert arm.requests == []
